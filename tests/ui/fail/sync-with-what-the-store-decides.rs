use actix_web::{get, post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 100000, window = "1m", sync = "100ms", block = "1m")]
#[get("/a")]
async fn a() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100000, window = "1m", sync = "100ms", count = "failures")]
#[post("/b")]
async fn b() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100000, window = "1m", sync = "100ms")]
#[rate_limit(limit = 100, window = "1s")]
#[get("/c")]
async fn c() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100000, window = "1m", sync = "100ms", ban = "20 in 10m for 1h")]
#[get("/d")]
async fn d() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100000, window = "1m", sync = "100ms")]
#[rate_limit(tier = "pro", limit = 100, window = "1m")]
#[get("/e")]
async fn e() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(a).service(b).service(c).service(d).service(e);
}
