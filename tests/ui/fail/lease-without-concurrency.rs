use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "1m", lease = "5s")]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(export);
}
