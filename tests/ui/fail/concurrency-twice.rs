use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(concurrency = 3, identity = "ip")]
#[rate_limit(concurrency = 5, identity = "ip")]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(export);
}
