//! Every key, every algorithm, every identity part, both fail modes and both header settings.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

use actix_web::{get, post, App, HttpResponse, Responder};
use ratelimit_runtime::{
    rate_limit, registry, Algorithm, FailMode, Identity, IdentityPart, Policy, RouteHeaders,
    RoutePolicy,
};

#[rate_limit(
    limit = 10,
    window = "1h30m",
    identity = "ip+username+user_id+api_key+header:X-Tenant-Id",
    algorithm = "sliding_log",
    fail = "open",
    shadow = true
)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 1,
    window = "500ms",
    algorithm = "fixed_window",
    fail = "closed",
    shadow = false,
    headers = "none",
    enforce = true
)]
#[get("/fixed")]
async fn fixed() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 3000000, window = "31d", algorithm = "sliding_window")]
#[get("/sliding")]
async fn sliding() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 20, window = "1s", algorithm = "gcra", enforce = false)]
#[get("/gcra")]
async fn gcra() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok()
}

fn policy(function: &str) -> &'static Policy {
    registry::declarations()
        .find(|d| d.function() == function)
        .unwrap_or_else(|| panic!("`{function}` is registered"))
        .policy()
}

fn limited(function: &str) -> &'static RoutePolicy {
    policy(function).limited().expect("a limited route")
}

fn main() {
    // Locals are named `*_policy`: `login` and the others are the unit structs actix-web
    // generates, and a `let login` would be a pattern matching one.
    let login_policy = limited("login");
    assert_eq!(login_policy.limits()[0].max(), 10);
    assert_eq!(login_policy.limits()[0].window().as_millis(), 5_400_000);
    assert_eq!(login_policy.limits()[0].algorithm(), Algorithm::SlidingLog);
    assert_eq!(
        login_policy.identity(),
        Identity::Parts(&[
            IdentityPart::Ip,
            IdentityPart::Username,
            IdentityPart::UserId,
            IdentityPart::ApiKey,
            IdentityPart::Header("x-tenant-id"),
        ])
    );
    assert_eq!(login_policy.fail(), FailMode::Open);
    assert!(login_policy.shadow());

    let fixed_policy = limited("fixed");
    assert_eq!(fixed_policy.limits()[0].algorithm(), Algorithm::FixedWindow);
    assert_eq!(fixed_policy.limits()[0].window().as_millis(), 500);
    assert_eq!(fixed_policy.fail(), FailMode::Closed);
    assert!(!fixed_policy.shadow());
    assert_eq!(fixed_policy.headers(), RouteHeaders::Hidden);
    assert_eq!(login_policy.headers(), RouteHeaders::All);
    assert_eq!(fixed_policy.enforce(), Some(true));
    assert_eq!(login_policy.enforce(), None);

    let sliding_policy = limited("sliding");
    assert_eq!(sliding_policy.limits()[0].max(), 3_000_000);
    assert_eq!(
        sliding_policy.limits()[0].window().as_millis(),
        31 * 24 * 3_600_000
    );
    assert_eq!(
        sliding_policy.limits()[0].algorithm(),
        Algorithm::SlidingWindow
    );
    assert_eq!(sliding_policy.identity(), Identity::UserIdElseIp);

    assert_eq!(limited("gcra").limits()[0].algorithm(), Algorithm::Gcra);
    assert_eq!(limited("gcra").enforce(), Some(false));

    assert_eq!(
        *policy("health"),
        Policy::Exempt {
            reason: "load balancer health check"
        }
    );

    let _app = App::new()
        .service(login)
        .service(fixed)
        .service(sliding)
        .service(gcra)
        .service(health);
}
