//! The setters and coverage functions deprecated in 0.2.0 still do what they did: each
//! sets exactly what its replacement sets (the limiter's `Debug` shows every setting), a
//! value they refused with a panic is now reported by `check_settings`, naming the setting,
//! and the deprecated coverage entry points give what `require_coverage` gives.
#![allow(deprecated)]

use std::time::Duration;

use actix_web::{get, http::StatusCode, App, HttpResponse, Responder};
use ratelimit_runtime::{
    coverage,
    identity::{ApiKeySource, TrustedProxies, UserIdSource, UsernameReader},
    key::KeySecret,
    rate_limit,
    settings::{Failure, Identities, Keys, Responses, Undeclared},
    store::MemoryStore,
    Algorithm, FailMode, HeaderFamilies, Identity, IdentityPart, Limit, RateLimiter, Window,
};

fn limiter() -> RateLimiter {
    RateLimiter::new(MemoryStore::new())
}

fn same(old: RateLimiter, new: RateLimiter) {
    assert_eq!(format!("{old:?}"), format!("{new:?}"));
    assert!(old.check_settings().is_ok(), "{:?}", old.check_settings());
}

#[derive(serde::Deserialize)]
struct Login {
    email: String,
}

fn upper(raw: &str) -> String {
    raw.to_uppercase()
}

fn redirects_too(status: StatusCode) -> bool {
    status.is_success() || status.is_redirection()
}

#[core::prelude::v1::test]
fn each_deprecated_setter_sets_what_its_replacement_sets() {
    let proxies = TrustedProxies::hops(2);
    same(
        limiter().trusted_proxies(proxies.clone()),
        limiter().identity(Identities::new().trusted_proxies(proxies)),
    );
    same(
        limiter().username_reader(UsernameReader::field("email")),
        limiter().identity(Identities::new().username(UsernameReader::field("email"))),
    );
    same(
        limiter().username_from::<Login>(|l| &l.email),
        limiter().identity(
            Identities::new().username(UsernameReader::json_or_form::<Login>(|l| &l.email)),
        ),
    );
    same(
        limiter().route_username_reader("POST /login", UsernameReader::field("email")),
        limiter().identity(
            Identities::new().route_username("POST /login", UsernameReader::field("email")),
        ),
    );
    same(
        limiter().canonical_username(upper),
        limiter().identity(Identities::new().canonical_username(upper)),
    );
    same(
        limiter().user_id(UserIdSource::from_fn(|_| None)),
        limiter().identity(Identities::new().user_id(UserIdSource::from_fn(|_| None))),
    );
    same(
        limiter().api_key(ApiKeySource::new("x-key", false)),
        limiter().identity(Identities::new().api_key(ApiKeySource::new("x-key", false))),
    );
    // Setters of one group keep each other's values, as they did.
    same(
        limiter()
            .trusted_proxies(TrustedProxies::hops(1))
            .api_key(ApiKeySource::new("x-key", false)),
        limiter().identity(
            Identities::new()
                .trusted_proxies(TrustedProxies::hops(1))
                .api_key(ApiKeySource::new("x-key", false)),
        ),
    );
    let secret = || KeySecret::new("a deployment secret of 32 bytes!").unwrap();
    same(
        limiter().key_prefix("shop").key_secret(secret()),
        limiter().keys(Keys::new().prefix("shop").secret(secret())),
    );
    same(
        limiter()
            .headers(HeaderFamilies::none())
            .unavailable_retry_after(Duration::from_millis(1500))
            .success_statuses(redirects_too),
        limiter().responses(
            Responses::new()
                .headers(HeaderFamilies::none())
                .unavailable_retry_after(Duration::from_millis(1500))
                .success_statuses(redirects_too),
        ),
    );
    same(
        limiter().instances(3).flood_shield_capacity(7),
        limiter().failure(Failure::new().instances(3).flood_shield_capacity(7)),
    );
    let limits = || vec![Limit::new(5, Window::from_secs(1), Algorithm::Gcra)];
    same(
        limiter()
            .default_limits(limits())
            .default_identity(Identity::Parts(&[IdentityPart::Ip]))
            .default_fail(FailMode::Local),
        limiter().undeclared(
            Undeclared::new()
                .limits(limits())
                .identity(Identity::Parts(&[IdentityPart::Ip]))
                .fail(FailMode::Local),
        ),
    );
    // The limiter's own timeout, which has no replacement there: it is kept and shown.
    let timed = limiter().timeout(Duration::from_millis(300));
    assert!(
        format!("{timed:?}").contains("timeout: Some(300ms)"),
        "{timed:?}"
    );
}

/// What panicked in a deprecated setter is reported by `check_settings`, every value at
/// once, each naming its setting.
#[core::prelude::v1::test]
fn values_the_deprecated_setters_panicked_on_are_reported() {
    let refused = limiter()
        .key_prefix("my app")
        .timeout(Duration::ZERO)
        .instances(0)
        .default_limits(Vec::new())
        .default_identity(Identity::Parts(&[IdentityPart::Ip, IdentityPart::Ip]))
        .route_username_reader("login", UsernameReader::default());
    let error = refused.check_settings().unwrap_err();
    let text = error.to_string();
    for expected in [
        "`RateLimiter::keys(..).prefix(..)`: invalid key prefix `my app`",
        "`RateLimiter::timeout(0ns)`: a rate-limit timeout under 1 ms",
        "`RateLimiter::failure(..).instances(0)`: a fleet has at least one instance",
        "`RateLimiter::undeclared(..).limits(..)`: a limited route needs at least one limit",
        "`RateLimiter::undeclared(..).identity(..)`: an identity names one part twice",
        "`RateLimiter::identity(..).route_username(\"login\", ..)`: name the route as `METHOD /pattern`",
    ] {
        assert!(text.contains(expected), "{expected}\nin\n{text}");
    }
    assert_eq!(error.problems().len(), 6, "{text}");
    assert_eq!(text.lines().count(), 6, "one problem per line: {text}");
}

#[rate_limit(limit = 5, window = "1m")]
#[get("/declared")]
async fn declared() -> impl Responder {
    HttpResponse::Ok()
}

#[get("/forgotten")]
async fn forgotten() -> impl Responder {
    HttpResponse::Ok()
}

#[actix_web::test]
async fn the_deprecated_coverage_entry_points_give_what_require_coverage_gives() {
    let checked = coverage::check(App::new().service(declared)).await.unwrap();
    let required = coverage::require_coverage(App::new().service(declared))
        .await
        .unwrap();
    assert_eq!(checked.to_text(), required.to_text());
    let asserted = coverage::assert_covered(App::new().service(declared)).await;
    assert_eq!(asserted.to_text(), required.to_text());
    let error = coverage::check(App::new().service(declared).service(forgotten))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("GET /forgotten"), "{error}");
}

#[actix_web::test]
#[should_panic(expected = "GET /forgotten")]
async fn the_deprecated_assertion_still_panics_with_the_uncovered_routes() {
    coverage::assert_covered(App::new().service(declared).service(forgotten)).await;
}
