//! The resource-level middleware the attribute adds to each declared route: it runs after
//! routing (the matched pattern is exact) and before the handler.

use std::{
    cell::RefCell,
    future::{ready, Ready},
    rc::Rc,
};

use actix_web::{
    body::{EitherBody, MessageBody},
    dev::{Service, ServiceRequest, ServiceResponse, Transform},
    http::Method,
    Error, HttpMessage, HttpRequest,
};
use futures_util::future::LocalBoxFuture;

use super::{
    answer, attempt::Unlimited, declared_routes::DeclaredRoutes, limiter::Granted,
    limiter::LimiterHandle, route_info::RouteInfo,
};
use crate::{
    policy::{Policy, RoutePolicy},
    registry::RouteDeclaration,
};

/// Enforces one declaration. Emitted by `#[rate_limit]`; not meant to be built by hand.
#[derive(Clone, Copy)]
pub struct RouteGuard {
    declaration: &'static RouteDeclaration,
}

impl RouteGuard {
    /// The guard of `declaration`.
    pub const fn new(declaration: &'static RouteDeclaration) -> Self {
        RouteGuard { declaration }
    }
}

impl<S, B> Transform<S, ServiceRequest> for RouteGuard
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = RouteGuardService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RouteGuardService {
            service: Rc::new(service),
            declaration: self.declaration,
            routes: RoutesByMethod::default(),
        }))
    }
}

/// A declared route as each of its methods sees it, built on first use (a resource's full
/// pattern is the same for every request; it answers only its declared methods, so the list
/// stays short).
#[derive(Default)]
pub(crate) struct RoutesByMethod(RefCell<Vec<(Method, Rc<RouteInfo>)>>);

impl RoutesByMethod {
    pub(crate) fn route(
        &self,
        declaration: &'static RouteDeclaration,
        req: &HttpRequest,
        policy: RoutePolicy,
        declared: Option<&DeclaredRoutes>,
    ) -> Rc<RouteInfo> {
        let mut routes = self.0.borrow_mut();
        if let Some((_, route)) = routes.iter().find(|(m, _)| m == req.method()) {
            return Rc::clone(route);
        }
        let route = Rc::new(RouteInfo::declared(
            declaration,
            req.method(),
            req.match_pattern(),
            policy,
            declared,
        ));
        routes.push((req.method().clone(), Rc::clone(&route)));
        route
    }
}

/// The service [`RouteGuard`] wraps a declared route in.
pub struct RouteGuardService<S> {
    service: Rc<S>,
    declaration: &'static RouteDeclaration,
    routes: RoutesByMethod,
}

impl<S, B> Service<ServiceRequest> for RouteGuardService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let handle = req.extensions().get::<LimiterHandle>().cloned();
        if let Some(handle) = &handle {
            handle.mark_guarded();
        }
        let declaration = self.declaration;
        let service = Rc::clone(&self.service);
        let policy = match declaration.policy {
            Policy::Exempt { .. } => {
                // No limit counts the request; a handler's `Budget` says why.
                if let Some(handle) = &handle {
                    handle.set_budget(Granted::Unlimited(Unlimited::Exempt));
                }
                return Box::pin(async move {
                    service
                        .call(req)
                        .await
                        .map(ServiceResponse::map_into_left_body)
                });
            }
            Policy::Limited(policy) => policy,
        };
        let declared = handle.as_ref().and_then(|h| h.limiter().declared.get());
        let route = self
            .routes
            .route(declaration, req.request(), policy, declared);
        Box::pin(async move {
            let Some(handle) = handle else {
                tracing::error!(
                    target: "ratelimit",
                    route = %route.label,
                    handler = %declaration.handler(),
                    "declared route reached without the App-level `RateLimiter`: answering 500; wrap the App with `RateLimiter::new(store)`, or, if it is wrapped, build the App's `RateLimiter` and this handler's `#[rate_limit]` with one version of ratelimit-runtime (`cargo tree -d -i ratelimit-runtime` lists two)"
                );
                let response = answer::limiter_not_installed(&route.label);
                return Ok(req.into_response(response).map_into_right_body());
            };
            handle
                .limiter()
                .enforce(req, &route, &*service, &handle)
                .await
        })
    }
}
