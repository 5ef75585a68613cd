//! The expansion names the runtime by the `crate` path it is given.
use actix_web::{post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m", crate = "crate::nowhere")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(login);
}
