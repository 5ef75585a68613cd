//! `M` is months to the duration parser; a capitalised `m` must not silently become a month.
use actix_web::{post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "1M")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1 month")]
#[post("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(login).service(export);
}
