use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 100000, window = "1m", sync = "5ms")]
#[get("/a")]
async fn a() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1000, window = "1m", sync = "100ms")]
#[get("/b")]
async fn b() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100000, window = "1s", sync = "500ms")]
#[get("/c")]
async fn c() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1000, window = "1m", algorithm = "sliding_log", sync = "1s")]
#[get("/d")]
async fn d() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100000, window = "1m", snyc = "100ms")]
#[get("/e")]
async fn e() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(a).service(b).service(c).service(d).service(e);
}
