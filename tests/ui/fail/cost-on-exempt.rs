use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(exempt = "health check", cost = 2)]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(export);
}
