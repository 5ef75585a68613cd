//! Every single-method route attribute is read, with its method.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

use actix_web::{delete, get, head, patch, post, put, query, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, FailMode};

#[rate_limit(limit = 1, window = "1s")]
#[get("/get")]
async fn get_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[post("/post")]
async fn post_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[put("/put")]
async fn put_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[delete("/delete")]
async fn delete_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[patch("/patch")]
async fn patch_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[head("/head")]
async fn head_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[query("/query")]
async fn query_it() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    for (function, method, path, fail) in [
        ("get_it", "GET", "/get", FailMode::Open),
        ("post_it", "POST", "/post", FailMode::Closed),
        ("put_it", "PUT", "/put", FailMode::Closed),
        ("delete_it", "DELETE", "/delete", FailMode::Closed),
        ("patch_it", "PATCH", "/patch", FailMode::Closed),
        ("head_it", "HEAD", "/head", FailMode::Open),
        // QUERY is safe (it reads), like GET.
        ("query_it", "QUERY", "/query", FailMode::Open),
    ] {
        let d = registry::declarations()
            .find(|d| d.function() == function)
            .unwrap_or_else(|| panic!("`{function}` is registered"));
        assert_eq!(d.methods(), [method]);
        assert_eq!(d.path(), path);
        assert_eq!(
            d.policy().limited().map(|p| p.fail()),
            Some(fail),
            "{function}"
        );
    }

    let _app = App::new()
        .service(get_it)
        .service(post_it)
        .service(put_it)
        .service(delete_it)
        .service(patch_it)
        .service(head_it)
        .service(query_it);
}
