use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(exempt = "load balancer health check", tier = "pro")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(health);
}
