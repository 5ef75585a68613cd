use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

// `fail`, `shadow`, `headers` and `enforce` are the route's: written on a tier, even with the
// default's value, each is an error.
#[rate_limit(limit = 100, window = "1m", fail = "closed")]
#[rate_limit(tier = "pro", limit = 1000, window = "1m", fail = "open", headers = "none")]
#[rate_limit(tier = "team", limit = 300, window = "1m", fail = "closed")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(search);
}
