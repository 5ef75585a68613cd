//! A crate that forbids `non_snake_case` (or `nonstandard_style` without
//! `non_camel_case_types`/`non_upper_case_globals`, which actix-web and inventory allow):
//! the expansion must not `allow` it (that would be E0453 on every `#[rate_limit]`).

#![forbid(non_snake_case)]
#![deny(warnings)]

use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(limit = 1, window = "1s")]
#[get("/get")]
async fn get_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "health check")]
#[get("/health")]
async fn r#health() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    assert!(registry::declarations().any(|d| d.function() == "get_it"));
    let _app = App::new().service(get_it).service(r#health);
}
