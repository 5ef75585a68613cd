use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 100, window = "1m")]
#[rate_limit(teir = "pro", limit = 1000, window = "1m")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(search);
}
