use actix_web::{get, route, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

// A route attribute `#[rate_limit]` cannot read is an error of its own, never left to
// actix-web: some forms actix-web accepts would otherwise compile without the limit.
#[rate_limit(limit = 10, window = "5m")]
#[get]
async fn no_path() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "5m")]
#[route("/no-method")]
async fn no_method() -> impl Responder {
    HttpResponse::Ok()
}

const PATH: &str = "/const";

#[rate_limit(limit = 10, window = "5m")]
#[get(PATH)]
async fn path_not_a_literal() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {}
