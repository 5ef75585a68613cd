use actix_web::{get, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 1, window = "1s")]
#[rate_limit(limit = 2, window = "2s")]
#[rate_limit(limit = 3, window = "3s")]
#[rate_limit(limit = 4, window = "4s")]
#[rate_limit(limit = 5, window = "5s")]
#[rate_limit(limit = 6, window = "6s")]
#[rate_limit(limit = 7, window = "7s")]
#[rate_limit(limit = 8, window = "8s")]
#[rate_limit(limit = 9, window = "9s")]
#[get("/x")]
async fn handler() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(handler);
}
