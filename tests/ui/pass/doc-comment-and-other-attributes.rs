//! Doc comments and other attributes around `#[rate_limit]` are kept.

#![deny(warnings, missing_docs)]

use actix_web::{post, web, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

/// Logs a user in.
#[rate_limit(limit = 10, window = "5m", identity = "ip+username")]
/// The body is the login form.
#[allow(clippy::unused_async)]
#[post("/login")]
#[must_use]
pub async fn login(body: web::Bytes) -> impl Responder {
    HttpResponse::Ok().body(body)
}

fn main() {
    let d = registry::declarations()
        .find(|d| d.function() == "login")
        .expect("`login` is registered");
    assert_eq!(d.path(), "/login");

    let _app = App::new().service(login);
}
