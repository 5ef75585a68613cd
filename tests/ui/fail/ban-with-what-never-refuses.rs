use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "1s", ban = "20 in 10m for 1h", wait = "2s")]
#[get("/batch")]
async fn batch() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", ban = "20 in 10m for 1h")]
#[rate_limit(limit = 100, window = "1h", shadow = true)]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(batch).service(search);
}
