//! A colon where `=` belongs, as in a struct literal, says so.
use actix_web::{post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit: 10, window = "5m")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(login);
}
