use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "1s", wait = "2m")]
#[get("/batch")]
async fn batch() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "0s")]
#[get("/items")]
async fn items() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wiat = "2s")]
#[get("/feed")]
async fn feed() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "1s")]
#[rate_limit(limit = 100, window = "1m", wait = "2s")]
#[get("/list")]
async fn list() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s")]
#[rate_limit(tier = "pro", limit = 100, window = "1s", wait = "2s")]
#[get("/tiered")]
async fn tiered() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new()
        .service(batch)
        .service(items)
        .service(feed)
        .service(list)
        .service(tiered);
}
