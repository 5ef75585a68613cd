use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 100, window = "1h")]
#[rate_limit(block = "15m")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(login);
}
