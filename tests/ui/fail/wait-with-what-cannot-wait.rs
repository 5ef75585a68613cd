use actix_web::{get, post, App, HttpResponse, Responder};
use actix_web::dev::ServiceRequest;
use ratelimit_runtime::{budget, rate_limit};

budget!(API = limit = 1000, window = "1h", identity = "api_key");

fn rows(_req: &ServiceRequest) -> u32 {
    1
}

#[rate_limit(limit = 5, window = "1m", wait = "2s", block = "15m")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s")]
#[rate_limit(limit = 5, window = "1m", count = "failures")]
#[post("/verify")]
async fn verify() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s")]
#[rate_limit(concurrency = 2)]
#[get("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s", shadow = true)]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", identity = "ip", wait = "2s")]
#[rate_limit(limit = 100, window = "1h", identity = "api_key")]
#[get("/mixed")]
async fn mixed() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", identity = "api_key", wait = "2s")]
#[rate_limit(budget = API)]
#[get("/shared")]
async fn shared() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", wait = "2s", cost_from = "rows")]
#[get("/weighed")]
async fn weighed() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new()
        .service(login)
        .service(verify)
        .service(export)
        .service(search)
        .service(mixed)
        .service(shared)
        .service(weighed);
}
