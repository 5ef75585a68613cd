use actix_web::{get, post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 5, window = "1m", wait = "2s", block = "15m")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s")]
#[rate_limit(limit = 5, window = "1m", count = "failures")]
#[post("/verify")]
async fn verify() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s")]
#[rate_limit(concurrency = 2)]
#[get("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s", shadow = true)]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new()
        .service(login)
        .service(verify)
        .service(export)
        .service(search);
}
