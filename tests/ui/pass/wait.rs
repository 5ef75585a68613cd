use std::time::Duration;

use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(limit = 10, window = "1s", algorithm = "gcra", wait = "2s")]
#[get("/batch")]
async fn batch() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1s", identity = "api_key", wait = "500ms", cost = 2)]
#[rate_limit(limit = 1000, window = "1h", identity = "api_key")]
#[rate_limit(tier = "pro", limit = 100, window = "1s", identity = "api_key")]
#[get("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(batch).service(export);
    let policy = |name: &str| {
        *registry::declarations()
            .find(|d| d.function() == name)
            .expect("registered")
            .policy()
            .limited()
            .expect("limited")
    };
    assert_eq!(policy("batch").wait(), Some(Duration::from_secs(2)));
    let exported = policy("export");
    assert_eq!(exported.wait(), Some(Duration::from_millis(500)));
    assert_eq!(exported.limits().len(), 2);
    // The tiers wait as the route does.
    assert_eq!(exported.tier("pro").unwrap().wait(), Some(Duration::from_millis(500)));
}
