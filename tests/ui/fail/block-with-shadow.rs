use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m", block = "15m", shadow = true)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(login);
}
