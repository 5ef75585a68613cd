//! `crate` takes a path, the same in every stacked `#[rate_limit]`.
use actix_web::{get, post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m", crate = "not a path")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", crate = "ratelimit_runtime")]
#[rate_limit(limit = 100, window = "1h", crate = "crate::rl")]
#[get("/orders")]
async fn orders() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(login).service(orders);
}
