use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "1m", ban = "20 per 10m for 1h")]
#[get("/shape")]
async fn shape() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", ban = "0 in 10m for 1h")]
#[get("/zero")]
async fn zero() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", ban = "20 in 10m for 40d")]
#[get("/long")]
async fn long() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", bna = "20 in 10m for 1h")]
#[get("/misspelled")]
async fn misspelled() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", ban = "20 in 10m for 1h")]
#[rate_limit(limit = 100, window = "1h", ban = "5 in 10m for 1h")]
#[get("/twice")]
async fn twice() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m")]
#[rate_limit(tier = "pro", limit = 100, window = "1m", ban = "20 in 10m for 1h")]
#[get("/tiered")]
async fn tiered() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new()
        .service(shape)
        .service(zero)
        .service(long)
        .service(misspelled)
        .service(twice)
        .service(tiered);
}
