use actix_web::{HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {}
