//! `#[route]` with one method and with several.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

use actix_web::{route, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, FailMode};

#[rate_limit(limit = 10, window = "1m")]
#[route("/one", method = "GET")]
async fn one_method() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m")]
#[route("/several", method = "GET", method = "HEAD", method = "POST")]
async fn several_methods() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let find = |function: &str| {
        registry::declarations()
            .find(|d| d.function() == function)
            .unwrap_or_else(|| panic!("`{function}` is registered"))
    };
    let one = find("one_method");
    assert_eq!(one.methods(), ["GET"]);
    assert_eq!(one.path(), "/one");
    assert_eq!(one.policy().limited().map(|p| p.fail()), Some(FailMode::Open));

    let several = find("several_methods");
    assert_eq!(several.methods(), ["GET", "HEAD", "POST"]);
    assert_eq!(several.path(), "/several");
    assert_eq!(
        several.policy().limited().map(|p| p.fail()),
        Some(FailMode::Closed),
        "a POST among the methods fails closed"
    );

    let _app = App::new().service(one_method).service(several_methods);
}
