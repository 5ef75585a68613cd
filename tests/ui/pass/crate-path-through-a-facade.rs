//! A crate that reaches the runtime through another crate's re-export (a workspace facade)
//! names that path with `crate = ".."`; here a module stands in for the facade.

#![deny(warnings)]

mod platform {
    pub use ratelimit_runtime as ratelimit;
}

use actix_web::{get, HttpResponse, Responder};
use platform::ratelimit::rate_limit;

#[rate_limit(limit = 10, window = "1m", crate = "crate::platform::ratelimit")]
#[rate_limit(limit = 100, window = "1h")]
#[get("/orders")]
async fn orders() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "load balancer health check", crate = "crate::platform::ratelimit")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let limits = |name: &str| {
        platform::ratelimit::registry::declarations()
            .find(|d| d.function() == name)
            .map(|d| d.policy().limited().map(|p| p.limits().len()))
    };
    assert_eq!(limits("orders"), Some(Some(2)));
    assert_eq!(limits("health"), Some(None));
    let _app = actix_web::App::new().service(orders).service(health);
}
