//! One HTTP request on a limited route, through actix-web's test service, against a real
//! Redis started by the harness (or the memory store where Redis is not the point).
//!
//! The App most tests here share, with its routes, and the helpers to send requests to it,
//! are in this file; the tests are in the modules below, by topic.

#[path = "../support/mod.rs"]
mod support;

mod bodies;
mod decisions;
mod identity;
mod ietf_fields;
mod outage;
mod own_middleware;
mod shared_paths;
mod two_policies;

use std::time::Duration;

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get, post,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock, coverage::AppFactory, rate_limit, store::RedisStore, RateLimiter,
};
use support::RedisServer;

#[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "open")]
#[get("/orders/{id}")]
async fn get_order(id: web::Path<u32>) -> impl Responder {
    HttpResponse::Ok().body(format!("order {id}"))
}

#[rate_limit(
    limit = 3,
    window = "1m",
    identity = "ip",
    algorithm = "fixed_window",
    fail = "open"
)]
#[get("/invoices/{id}")]
async fn get_invoice() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 2,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login(body: web::Bytes) -> impl Responder {
    // Echo the body so the test can compare it byte for byte.
    HttpResponse::Ok().body(body)
}

#[rate_limit(limit = 2, window = "1s", algorithm = "gcra")]
#[rate_limit(limit = 3, window = "1m")]
#[get("/stacked")]
async fn stacked() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1m", identity = "ip", shadow = true)]
#[get("/shadow")]
async fn shadow() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1m", identity = "user_id")]
#[get("/me")]
async fn me() -> impl Responder {
    HttpResponse::Ok()
}

async fn undeclared() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .service(get_order)
        .service(get_invoice)
        .service(login)
        .service(stacked)
        .service(shadow)
        .service(me)
        .route("/undeclared", web::get().to(undeclared))
        .app_data(web::PayloadConfig::new(4 * 1024 * 1024))
        .wrap(limiter)
}

async fn redis_limiter(server: &RedisServer, clock: &ManualClock) -> RateLimiter {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("store");
    RateLimiter::new(store).clock(clock.clone())
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn header(res: &ServiceResponse<impl MessageBody>, name: &str) -> String {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn status_of<S, B>(app: &S, req: TestRequest) -> u16
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    test::call_service(app, req.to_request())
        .await
        .status()
        .as_u16()
}
