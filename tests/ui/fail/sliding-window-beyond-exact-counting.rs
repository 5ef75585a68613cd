use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 4000000000, window = "31d")]
#[get("/quota")]
async fn quota() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(quota);
}
