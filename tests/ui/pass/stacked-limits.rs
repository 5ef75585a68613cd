//! Stacked limits register once, in order; shared keys may be written on any of them.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, Algorithm, FailMode, Identity, IdentityPart};

#[rate_limit(limit = 5, window = "1s", algorithm = "gcra")]
#[rate_limit(limit = 100, window = "1m", identity = "api_key", fail = "open")]
#[rate_limit(
    limit = 100,
    window = "1m",
    algorithm = "fixed_window",
    identity = "api_key"
)]
#[rate_limit(limit = 1000, window = "1d", shadow = true)]
#[post("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let declarations: Vec<_> = registry::declarations()
        .filter(|d| d.function() == "search")
        .collect();
    assert_eq!(
        declarations.len(),
        1,
        "one registration for the whole stack"
    );
    let policy = declarations[0].policy().limited().expect("a limited route");
    let limits: Vec<_> = policy
        .limits()
        .iter()
        .map(|l| (l.max(), l.window().as_millis(), l.algorithm()))
        .collect();
    assert_eq!(
        limits,
        [
            (5, 1_000, Algorithm::Gcra),
            (100, 60_000, Algorithm::SlidingWindow),
            (100, 60_000, Algorithm::FixedWindow),
            (1000, 86_400_000, Algorithm::SlidingWindow),
        ]
    );
    assert_eq!(policy.identity(), Identity::Parts(&[IdentityPart::ApiKey]));
    assert_eq!(policy.fail(), FailMode::Open);
    assert!(policy.shadow());

    let _app = App::new().service(search);
}
