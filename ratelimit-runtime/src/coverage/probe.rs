//! Reads an App's introspection tree: the App is built once with an outermost probe
//! middleware that copies the tree out of the app data on one synthetic request and answers
//! it without calling any route.

use std::{
    cell::RefCell,
    future::{ready, Ready},
    marker::PhantomData,
    rc::Rc,
};

use actix_web::{
    body::{EitherBody, MessageBody},
    dev::{Service, ServiceRequest, ServiceResponse, Transform},
    introspection::IntrospectionTree,
    test, web, App, Error, HttpResponse,
};

use super::AppFactory;
use crate::middleware::declared_routes;

type Slot = Rc<RefCell<Option<IntrospectionTree>>>;

/// The App's introspection tree, and what the limiters inside it declare in code and got
/// wrong.
pub(super) async fn introspection_tree<T: AppFactory>(
    app: App<T>,
) -> (Option<IntrospectionTree>, declared_routes::Checked) {
    let slot: Slot = Rc::default();
    // The limiters built inside the App learn its routes, for `RateLimiter::reset` and its
    // kin before the App serves.
    declared_routes::checking_begins();
    let service = test::init_service(app.wrap(Probe(Rc::clone(&slot)))).await;
    let _ = test::call_service(&service, test::TestRequest::default().to_request()).await;
    let tree = slot.borrow_mut().take();
    let checked = declared_routes::checking_ends(tree.as_ref());
    (tree, checked)
}

struct Probe(Slot);

impl<S, B> Transform<S, ServiceRequest> for Probe
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = ProbeService<B>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, _service: S) -> Self::Future {
        ready(Ok(ProbeService(Rc::clone(&self.0), PhantomData)))
    }
}

struct ProbeService<B>(Slot, PhantomData<B>);

impl<B: MessageBody> Service<ServiceRequest> for ProbeService<B> {
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    actix_web::dev::always_ready!();

    fn call(&self, req: ServiceRequest) -> Self::Future {
        if let Some(tree) = req.app_data::<web::Data<IntrospectionTree>>() {
            *self.0.borrow_mut() = Some(IntrospectionTree::clone(tree));
        }
        let response = req.into_response(HttpResponse::NoContent().finish());
        ready(Ok(response.map_into_right_body()))
    }
}
