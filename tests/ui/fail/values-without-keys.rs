//! Values without their keys, as a function call would pass them, say what to write.
use actix_web::{post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(10, "5m")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(login);
}
