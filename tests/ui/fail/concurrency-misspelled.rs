use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(concurency = 3)]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(concurrency = 3, leese = "5s")]
#[post("/reports/import")]
async fn import() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(export).service(import);
}
