//! The outer half of a declared route that has middleware of its own (`wrap = ...` in the
//! route attribute): it counts the requests that middleware refuses before the route's guard
//! sees them.
//!
//! The guard is the innermost middleware, so that a route-level auth layer has set the user
//! id when the guard looks. But then a request that layer refuses (a wrong password: `401`,
//! as an answer or as an error) never reaches the guard, and a password could be guessed
//! without limit. The attribute therefore also wraps such a route in this middleware,
//! outermost: when the answer comes back and the guard never saw the request, the request
//! is counted against the route's declared limit after all, and once the client is over it
//! the refusal becomes a 429, so a guess that would have succeeded and one that failed look
//! alike.

use std::{
    future::{ready, Ready},
    rc::Rc,
};

use actix_web::{
    body::{EitherBody, MessageBody},
    dev::{Service, ServiceRequest, ServiceResponse, Transform},
    Error, HttpMessage as _,
};
use futures_util::future::LocalBoxFuture;

use super::{limiter::LimiterHandle, route_guard::RoutesByMethod};
use crate::{policy::Policy, registry::RouteDeclaration};

/// Counts what a declared route's own middleware refuses. Emitted by `#[rate_limit]` on
/// routes with `wrap = ...`; not meant to be built by hand.
#[derive(Clone, Copy)]
pub struct RouteEntry {
    declaration: &'static RouteDeclaration,
}

impl RouteEntry {
    /// The entry of `declaration`.
    pub const fn new(declaration: &'static RouteDeclaration) -> Self {
        RouteEntry { declaration }
    }
}

impl<S, B> Transform<S, ServiceRequest> for RouteEntry
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = RouteEntryService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RouteEntryService {
            service: Rc::new(service),
            declaration: self.declaration,
            routes: Rc::default(),
        }))
    }
}

/// The service [`RouteEntry`] wraps a declared route in.
pub struct RouteEntryService<S> {
    service: Rc<S>,
    declaration: &'static RouteDeclaration,
    routes: Rc<RoutesByMethod>,
}

impl<S, B> Service<ServiceRequest> for RouteEntryService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let declaration = self.declaration;
        let handle = req.extensions().get::<LimiterHandle>().cloned();
        let (Policy::Limited(policy), Some(handle)) = (declaration.policy, handle) else {
            // Exempt, or no App-level limiter (the guard answers 500): nothing counts here.
            let answer = self.service.call(req);
            return Box::pin(async move { answer.await.map(ServiceResponse::map_into_left_body) });
        };
        let declared = handle.limiter().declared.get();
        let route = self
            .routes
            .route(declaration, req.request(), policy, declared);
        // Resolved now: a request the route's middleware refuses with an error is gone when
        // the error comes back. The request itself is not kept: middleware below may need it
        // unshared (`ServiceRequest::headers_mut` panics on a shared request).
        let client = handle.resolve_client(&req);
        let reads_body = policy.any_reads_username();
        let service = Rc::clone(&self.service);
        let mut req = req;
        Box::pin(async move {
            // Read unless the App-level middleware did: the route's middleware may consume
            // the body, and a refusal must count against the username it submitted.
            if reads_body {
                handle.read_username(&mut req, &route.label).await;
            }
            let answer = service.call(req).await;
            if handle.guarded() {
                return answer.map(ServiceResponse::map_into_left_body);
            }
            // Counted here: the App-level middleware must not count it again.
            handle.mark_guarded();
            let limiter = handle.limiter();
            limiter
                .count_answered(answer, &route, client, &handle)
                .await
        })
    }
}
