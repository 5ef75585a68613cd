//! A `wrap = ...` the user writes on the route attribute stays and still runs.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

use actix_web::{
    get, http::StatusCode, middleware::DefaultHeaders, test, App, HttpResponse, Responder,
};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(exempt = "public status page")]
#[get(
    "/status",
    wrap = "DefaultHeaders::new().add((\"x-wrapped\", \"yes\"))"
)]
async fn status() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m")]
#[get(
    "/limited",
    name = "limited_route",
    wrap = "DefaultHeaders::new().add((\"x-wrapped\", \"yes\"))"
)]
async fn limited() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    assert!(registry::declarations().any(|d| d.function() == "limited"));

    actix_web::rt::System::new().block_on(async {
        let app = test::init_service(App::new().service(status).service(limited)).await;
        let response =
            test::call_service(&app, test::TestRequest::get().uri("/status").to_request()).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers().get("x-wrapped").map(|v| v.as_bytes()),
            Some(&b"yes"[..]),
            "the user's middleware still wraps the route"
        );
    });
}
