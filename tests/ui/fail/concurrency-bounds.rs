use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(concurrency = 0)]
#[post("/a")]
async fn a() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(concurrency = 1001)]
#[post("/b")]
async fn b() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(concurrency = "3")]
#[post("/c")]
async fn c() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(concurrency = 3, lease = "500ms")]
#[post("/d")]
async fn d() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(concurrency = 3, lease = 10)]
#[post("/e")]
async fn e() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(a).service(b).service(c).service(d).service(e);
}
