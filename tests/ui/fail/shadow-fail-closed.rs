use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 30, window = "1m", shadow = true, fail = "closed")]
#[post("/orders")]
async fn create_order() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(create_order);
}
