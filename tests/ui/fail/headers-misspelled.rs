use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m", headers = "nnone")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "5m", header = "none")]
#[post("/reset")]
async fn reset() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(login).service(reset);
}
