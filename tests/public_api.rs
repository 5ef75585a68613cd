//! What a user of `ratelimit-runtime` can build through its public API: values the
//! attribute would refuse are refused here too, a store of the user's own cannot break the
//! request path, and the types users keep in app state behave.

use ratelimit_runtime::settings::{Identities, Undeclared};
use std::{panic::catch_unwind, time::Duration};

use actix_web::{test as web_test, web, App, HttpResponse};
use ratelimit_runtime::{
    clock::ManualClock,
    identity::{ApiKeySource, TrustedProxies, UsernameReader, DEFAULT_BODY_LIMIT},
    key::RouteKey,
    store::{
        CheckFuture, CheckRequest, Decision, LimitState, MemoryStore, RedisClusterStore,
        RedisSentinelStore, RedisStore, Store,
    },
    Algorithm, FailMode, Identity, IdentityPart, Limit, RateLimiter, RoutePolicy, Window,
};

fn panic_message(result: std::thread::Result<impl Sized>) -> String {
    let payload = result.err().expect("refused");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|m| (*m).to_owned()))
        .unwrap_or_default()
}

fn undeclared_from(ip: &str) -> web_test::TestRequest {
    web_test::TestRequest::get()
        .uri("/undeclared")
        .peer_addr(format!("{ip}:40000").parse().unwrap())
}

/// `Identity::Parts(&[])` counted every client of the default policy in one key, so one
/// client spent everyone's budget; a header name that cannot exist counted every request by
/// its IP; a part named twice. The attribute refuses all three; so do `default_identity`
/// and `RoutePolicy::new` now.
#[test]
fn identities_the_attribute_refuses_are_refused_at_configuration() {
    static LIMITS: [Limit; 1] = [Limit::new(10, Window::from_secs(60), Algorithm::Gcra)];
    for (identity, expected) in [
        (Identity::Parts(&[]), "at least one part"),
        (
            Identity::Parts(&[IdentityPart::Header("X Tenant")]),
            "needs a header name",
        ),
        (
            Identity::Parts(&[IdentityPart::Header("")]),
            "needs a header name",
        ),
        (
            Identity::Parts(&[IdentityPart::Ip, IdentityPart::Ip]),
            "one part twice",
        ),
        (
            Identity::Parts(&[
                IdentityPart::Header("X-Tenant"),
                IdentityPart::Header("x-tenant"),
            ]),
            "one part twice",
        ),
    ] {
        let limiter =
            RateLimiter::new(MemoryStore::new()).undeclared(Undeclared::new().identity(identity));
        let message = limiter.check_settings().unwrap_err().to_string();
        assert!(
            message.starts_with("`RateLimiter::undeclared(..).identity(..)`: ")
                && message.contains(expected),
            "{identity:?}: {message}"
        );
        let policy = catch_unwind(|| RoutePolicy::new(&LIMITS, identity, FailMode::Open, false));
        assert!(policy.is_err(), "RoutePolicy::new took {identity:?}");
    }
    // What the attribute writes is still taken.
    let fine = Identity::Parts(&[IdentityPart::Ip, IdentityPart::Header("X-Tenant-Id")]);
    let limiter = RateLimiter::new(MemoryStore::new()).undeclared(Undeclared::new().identity(fine));
    assert!(limiter.check_settings().is_ok());
}

/// With the default policy on the client's IP, two clients have two budgets (the case
/// `Parts(&[])` broke).
#[actix_web::test]
async fn the_default_identity_keeps_clients_apart() {
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(1_700_000_000_000))
        .undeclared(
            Undeclared::new()
                .limits(vec![Limit::new(
                    1,
                    Window::from_secs(60),
                    Algorithm::FixedWindow,
                )])
                .identity(Identity::Parts(&[IdentityPart::Ip])),
        );
    let app = web_test::init_service(
        App::new()
            .route("/undeclared", web::get().to(HttpResponse::Ok))
            .wrap(limiter),
    )
    .await;
    for (ip, status) in [
        ("203.0.113.1", 200),
        ("203.0.113.1", 429),
        ("198.51.100.2", 200),
    ] {
        let response = web_test::call_service(&app, undeclared_from(ip).to_request()).await;
        assert_eq!(response.status(), status, "{ip}");
    }
}

/// The attribute refuses `shadow = true, fail = "closed"`; `RoutePolicy::new` took it, and
/// `fail()` answered `Closed` for a route the limiter fails open.
#[test]
fn a_shadow_policy_cannot_claim_to_fail_closed() {
    static LIMITS: [Limit; 1] = [Limit::new(10, Window::from_secs(60), Algorithm::Gcra)];
    let message = panic_message(catch_unwind(|| {
        RoutePolicy::new(&LIMITS, Identity::UserIdElseIp, FailMode::Closed, true)
    }));
    assert!(message.contains("shadow"), "{message}");
    let open = RoutePolicy::new(&LIMITS, Identity::UserIdElseIp, FailMode::Open, true);
    assert_eq!(open.fail(), FailMode::Open);
}

/// An API key header that cannot exist was never read: every request counted by its IP.
#[test]
fn an_api_key_header_that_cannot_exist_is_refused() {
    for header in ["X-API Key", ""] {
        let message = panic_message(catch_unwind(|| ApiKeySource::new(header, false)));
        assert!(
            message.contains("not a header name"),
            "{header:?}: {message}"
        );
    }
    let _ = ApiKeySource::new("X-API-Key", true);
}

/// `ipv6_prefix(0)` put every IPv6 client in one bucket, `::/0`.
#[test]
fn an_ipv6_prefix_of_zero_is_refused() {
    let proxies = TrustedProxies::default().ipv6_prefix(0);
    let limiter =
        RateLimiter::new(MemoryStore::new()).identity(Identities::new().trusted_proxies(proxies));
    let message = limiter.check_settings().unwrap_err().to_string();
    assert!(
        message.starts_with("`TrustedProxies::ipv6_prefix(0)`: ") && message.contains("1 to 128"),
        "{message}"
    );
    let proxies = TrustedProxies::default().ipv6_prefix(1);
    assert_ne!(
        proxies.bucket("2001:db8::1".parse().unwrap()),
        proxies.bucket("a001:db8::1".parse().unwrap())
    );
}

/// `RouteKey::new` refused `my app` saying it held a brace; it names the prefix and the rule.
#[test]
fn a_refused_key_prefix_is_named_with_the_rule() {
    let message = panic_message(catch_unwind(|| {
        RouteKey::new("my app", "GET", "/x", &[(IdentityPart::Ip, "203.0.113.7")])
    }));
    assert!(
        message.contains("`my app`") && message.contains("printable ASCII"),
        "{message}"
    );
}

/// A refused `ManualClock::advance` moved the clock before it checked (and
/// `advance(Duration::MAX)` wrapped it backwards).
#[test]
fn a_refused_advance_leaves_the_clock_where_it_was() {
    let clock = ManualClock::at(1_700_000_000_000);
    assert!(catch_unwind(|| clock.advance(Duration::MAX)).is_err());
    assert_eq!(clock.now_millis(), 1_700_000_000_000);
    clock.advance(Duration::from_millis(5));
    assert_eq!(clock.now_millis(), 1_700_000_000_005);
}

/// A store that answers one state too many, or says allowed while a limit refused.
struct MalformedStore {
    extra_state: bool,
}

impl Store for MalformedStore {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        let extra_state = self.extra_state;
        Box::pin(async move {
            let state = |limit: Limit, allowed| {
                LimitState::new(limit, allowed, 5, Duration::ZERO, Duration::from_secs(1))
            };
            let limits = if extra_state {
                let mut limits: Vec<_> = request.limits.iter().map(|l| state(*l, true)).collect();
                limits.push(state(request.limits[0], true));
                limits
            } else {
                // Allowed, while its only limit refused.
                request.limits.iter().map(|l| state(*l, false)).collect()
            };
            // Its fields are public: a store can still answer inconsistently.
            let mut decision = Decision::new(limits);
            decision.allowed = true;
            Ok(decision)
        })
    }

    fn kind(&self) -> &'static str {
        "malformed"
    }
}

/// A user's own store answering a malformed decision panicked the request (an index past
/// the policy's limits); it is an unexpected reply now, and the route's failure policy
/// applies (this GET route fails open; a POST one closed).
#[actix_web::test]
async fn a_malformed_decision_from_a_users_store_is_a_store_error() {
    for extra_state in [true, false] {
        let app = web_test::init_service(
            App::new()
                .route("/undeclared", web::get().to(HttpResponse::Ok))
                .route("/undeclared", web::post().to(HttpResponse::Ok))
                .wrap(RateLimiter::new(MalformedStore { extra_state })),
        )
        .await;
        let get = web_test::call_service(&app, undeclared_from("203.0.113.1").to_request()).await;
        assert_eq!(get.status(), 200, "extra state: {extra_state}");
        assert!(
            !get.headers().contains_key("x-ratelimit-limit"),
            "no figures from a bad reply"
        );
        let post = undeclared_from("203.0.113.1").method(actix_web::http::Method::POST);
        let post = web_test::call_service(&app, post.to_request()).await;
        assert_eq!(post.status(), 503, "extra state: {extra_state}");
    }
}

fn send_sync<T: Send + Sync + 'static>() {}
fn send_sync_clone<T: Send + Sync + Clone + 'static>() {}

/// What users keep in app state and share across workers: `Send + Sync` (and `Clone` but
/// for `MemoryStore`, shared through the limiter or an `Arc`), and
/// `Debug` (`RateLimiter` had none, so `#[derive(Debug)]` on a state holding one failed).
#[test]
fn shared_types_are_send_sync_clone_and_debug() {
    send_sync_clone::<RateLimiter>();
    send_sync::<MemoryStore>();
    send_sync_clone::<RedisStore>();
    send_sync_clone::<RedisClusterStore>();
    send_sync_clone::<RedisSentinelStore>();
    send_sync_clone::<ManualClock>();
    let limiter = RateLimiter::new(MemoryStore::new());
    let shown = format!("{limiter:?}");
    assert!(
        shown.contains("RateLimiter") && shown.contains("memory"),
        "{shown}"
    );
    // The default body limit is nameable, for a renamed username field that keeps it.
    let _ = UsernameReader::field("login").body_limit(DEFAULT_BODY_LIMIT);
}
