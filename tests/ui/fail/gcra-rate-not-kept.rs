//! The GCRA spaces requests a whole number of microseconds apart: 1,500 per 2 ms (1.33 µs)
//! would be 2,000 per 2 ms (1 µs).
use actix_web::{get, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 1500, window = "2ms", algorithm = "gcra")]
#[get("/ticks")]
async fn ticks() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(ticks);
}
