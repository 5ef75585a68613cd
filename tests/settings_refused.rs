//! A setting the limiter refuses is reported the same way wherever it is given: an error
//! naming the setting from `RateLimiter::check_settings`, and an App wrapped with such a
//! limiter that does not start.

use std::time::Duration;

use actix_service::IntoServiceFactory;
use actix_web::{
    dev::{AppConfig, ServiceFactory},
    get, App, HttpResponse, HttpServer, Responder,
};
use ratelimit_runtime::{
    identity::{ApiKeySource, TrustedProxies},
    overrides::Overrides,
    rate_limit,
    settings::{Failure, Identities, Keys},
    store::MemoryStore,
    RateLimiter,
};

#[rate_limit(limit = 5, window = "1m")]
#[get("/declared")]
async fn declared() -> impl Responder {
    HttpResponse::Ok()
}

fn refused() -> RateLimiter {
    RateLimiter::new(MemoryStore::new()).failure(Failure::new().instances(0))
}

#[actix_web::test]
async fn an_app_wrapped_with_refused_settings_does_not_start() {
    // What `actix_web::test::init_service` does, without its panic.
    let factory = App::new().service(declared).wrap(refused()).into_factory();
    let built = factory.new_service(AppConfig::default()).await;
    assert!(built.is_err(), "the App started");
    // The same limiter with the value put right starts.
    let fixed = RateLimiter::new(MemoryStore::new()).failure(Failure::new().instances(2));
    let factory = App::new().service(declared).wrap(fixed).into_factory();
    assert!(factory.new_service(AppConfig::default()).await.is_ok());
}

/// actix-server ends `run` with an error when a worker's service cannot be built: the
/// server does not serve without its limiter.
#[actix_web::test]
async fn a_server_with_refused_settings_ends_with_an_error() {
    let limiter = refused();
    let server = HttpServer::new(move || App::new().service(declared).wrap(limiter.clone()))
        .workers(1)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .unwrap()
        .run();
    let ended = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server ends by itself");
    let error = ended.expect_err("the server started");
    assert!(error.to_string().contains("Can not start"), "{error}");
}

#[core::prelude::v1::test]
fn every_refused_setting_is_named_on_a_line_of_its_own() {
    let overrides = Overrides::new()
        .refresh(Duration::from_millis(10))
        .widest_ranges(33, 0);
    let limiter = RateLimiter::new(MemoryStore::new())
        .identity(
            Identities::new().trusted_proxies(
                TrustedProxies::hops(1)
                    .only_from(["10.0.0.0/8", "lb-1"])
                    .ipv6_prefix(129),
            ),
        )
        .keys(Keys::new().prefix(""))
        .overrides(overrides);
    let error = limiter.check_settings().unwrap_err();
    let text = error.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "`TrustedProxies::ipv6_prefix(129)`: an IPv6 prefix is 1 to 128 bits (0 would count every IPv6 client in one bucket)",
            "`TrustedProxies::only_from(..)`: `lb-1` is neither an address nor a network (`10.0.0.0/8`, `2001:db8::/32`)",
            "`RateLimiter::keys(..).prefix(..)`: invalid key prefix ``: use printable ASCII without `{` or `}`",
            "`Overrides::refresh(10ms)`: overrides are read at most every 50 ms and at least every minute",
            "`Overrides::widest_ranges(33, 0)`: an IPv4 prefix is at most 32, an IPv6 one at most 128",
        ]
    );
    assert_eq!(error.problems().len(), 5);
}

#[core::prelude::v1::test]
fn settings_within_bounds_pass() {
    let limiter = RateLimiter::new(MemoryStore::new())
        .overrides(Overrides::new().refresh(Duration::from_secs(60)))
        .keys(Keys::new().prefix("shop"))
        .failure(Failure::new().instances(1));
    assert!(limiter.check_settings().is_ok());
}

/// A group given twice would drop the first one's values without a word (a validated API
/// key source, the trusted proxies): refused, as is a group given after a deprecated setter
/// of it. Deprecated setters after a group add to it.
#[core::prelude::v1::test]
#[allow(deprecated)]
fn a_group_given_twice_is_refused() {
    let twice = RateLimiter::new(MemoryStore::new())
        .identity(Identities::new().api_key(ApiKeySource::from_fn(|_| None)))
        .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)));
    let error = twice.check_settings().unwrap_err();
    assert_eq!(error.problems().len(), 1, "{error}");
    assert!(
        error.problems()[0].starts_with("`RateLimiter::identity(..)`: given twice"),
        "{error}"
    );

    let after_deprecated = RateLimiter::new(MemoryStore::new())
        .instances(3)
        .failure(Failure::new().flood_shield_capacity(10));
    let error = after_deprecated.check_settings().unwrap_err();
    assert!(
        error.problems()[0].starts_with("`RateLimiter::failure(..)`: given twice"),
        "{error}"
    );

    // A deprecated setter after its group adds to it: nothing is lost.
    let extended = RateLimiter::new(MemoryStore::new())
        .keys(Keys::new().prefix("shop"))
        .key_secret(ratelimit_runtime::key::KeySecret::new("sixteen bytes or more").unwrap());
    assert!(extended.check_settings().is_ok());
    let shown = format!("{extended:?}");
    assert!(shown.contains("shop"), "{shown}");
}
