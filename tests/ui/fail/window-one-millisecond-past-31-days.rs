use actix_web::{get, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "31d 1ms")]
#[get("/x")]
async fn handler() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(handler);
}
