//! Bans on every store: `RedisStore` on a harness-started server and on Valkey,
//! `RedisClusterStore` on a harness-started 3-master cluster (where the limiter's ban lives
//! in a slot of its own), and `MemoryStore`. A ban comes first in a check's stack; time is
//! injected.

mod support;

use std::time::Duration;

use ratelimit_runtime::{
    key::RouteKey,
    policy::Ban,
    store::{CheckRequest, Decision},
    Algorithm, Count, Identity, IdentityPart, Limit, Window,
};
use support::{Backend, T0};

on_every_store!(
    a_route_ban_starts_at_its_count_and_refuses_the_whole_stack,
    a_refusal_by_a_limit_of_another_identity_counts_toward_the_ban,
    a_request_one_ban_refuses_counts_toward_no_other,
    a_refusal_decided_elsewhere_counts_toward_each_ban,
    the_limiters_ban_counts_refusals_of_every_route_and_bans_on_all,
);

fn route(path: &str, ip: &str) -> RouteKey {
    RouteKey::new("rl", "POST", path, &[(IdentityPart::Ip, ip)])
}

async fn check(backend: &Backend, key: &RouteKey, limits: &[Limit], now: u64) -> Decision {
    let request = CheckRequest {
        key,
        limits,
        now_millis: Some(now),
    };
    let store = backend.store();
    store
        .check(request)
        .await
        .unwrap_or_else(|e| panic!("{} store failed: {e}", store.kind()))
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Three refusals in 10 s ban for a minute: the third refusal starts it (its answer waits
/// the minute, the ban's state says it started), and every request until it ends is refused
/// with what is left of it, whatever the limits would say, counting nothing in them.
async fn a_route_ban_starts_at_its_count_and_refuses_the_whole_stack(backend: &Backend) {
    let key = route("/login", "203.0.113.1");
    let ban = Ban::new(3, Window::from_secs(10), Window::from_secs(60)).limit(Count::Requests);
    let one = Limit::new(1, Window::from_secs(10), Algorithm::FixedWindow);
    let limits = [ban, one];
    let first = check(backend, &key, &limits, T0).await;
    assert!(first.allowed, "{first:?}");
    for (i, left) in [(1, 2), (2, 1)] {
        let refused = check(backend, &key, &limits, T0 + i).await;
        assert!(!refused.allowed && refused.limits[0].allowed, "{refused:?}");
        assert_eq!(refused.limits[0].remaining, left, "{refused:?}");
        assert_eq!(ms(refused.retry_after()), 10_000 - i, "{refused:?}");
    }
    let third = check(backend, &key, &limits, T0 + 3).await;
    assert!(!third.allowed, "{third:?}");
    assert_eq!(
        (third.limits[0].allowed, third.limits[0].remaining),
        (false, 1),
        "the ban started with this refusal: {third:?}"
    );
    assert_eq!(ms(third.retry_after()), 60_000, "{third:?}");
    assert_eq!(ms(third.limits[1].retry_after), 60_000, "{third:?}");
    // Past the limit's window, still banned: refused with what is left of the ban.
    let banned = check(backend, &key, &limits, T0 + 20_003).await;
    assert!(!banned.allowed, "{banned:?}");
    assert_eq!(banned.limits[0].remaining, 0, "{banned:?}");
    assert_eq!(ms(banned.retry_after()), 40_000, "{banned:?}");
    // The banned requests counted nothing: once the ban ends the limit lets one in.
    let after = check(backend, &key, &limits, T0 + 60_003).await;
    assert!(after.allowed, "{after:?}");
    assert_eq!(
        after.limits[0].remaining, 3,
        "the count starts afresh: {after:?}"
    );
    let next = check(backend, &key, &limits, T0 + 60_004).await;
    assert!(!next.allowed && next.limits[0].allowed, "{next:?}");
}

/// A refusal by a limit of another identity (a per-username limit beside the route's
/// per-address ones: on a Cluster, another slot) counts toward the route's ban, and none of
/// the ban's count is given back when the request is refused.
async fn a_refusal_by_a_limit_of_another_identity_counts_toward_the_ban(backend: &Backend) {
    let username = IdentityPart::Username;
    let name_key = RouteKey::new("rl", "POST", "/login", &[(username, "alice")]);
    let key = route("/login", "203.0.113.2")
        .with_identity(Identity::Parts(&[IdentityPart::Username]), name_key);
    let ban = Ban::new(2, Window::from_secs(60), Window::from_secs(600)).limit(Count::Requests);
    let by_ip = Limit::new(100, Window::from_secs(60), Algorithm::FixedWindow);
    let by_name = Limit::new(1, Window::from_secs(60), Algorithm::FixedWindow)
        .identified_by(Identity::Parts(&[IdentityPart::Username]));
    let limits = [ban, by_ip, by_name];
    assert!(check(backend, &key, &limits, T0).await.allowed);
    let refused = check(backend, &key, &limits, T0 + 1).await;
    assert!(
        !refused.allowed && refused.limits[2].retry_after > Duration::ZERO,
        "{refused:?}"
    );
    assert_eq!(
        refused.limits[0].remaining, 1,
        "one refusal counted: {refused:?}"
    );
    let started = check(backend, &key, &limits, T0 + 2).await;
    assert_eq!(
        (
            started.limits[0].allowed,
            started.limits[0].remaining,
            ms(started.retry_after())
        ),
        (false, 1, 600_000),
        "{started:?}"
    );
    let banned = check(backend, &key, &limits, T0 + 3).await;
    assert_eq!(ms(banned.retry_after()), 599_999, "{banned:?}");
}

/// A request one ban refuses counts toward no other: with the route's ban holding, the
/// limiter's ban counts nothing; it starts only with a refusal of its own count, and then
/// reports that it started, beside the route's ban that lets the request through.
async fn a_request_one_ban_refuses_counts_toward_no_other(backend: &Backend) {
    let ip = "203.0.113.5";
    let ban_key = RouteKey::for_limiter_ban("rl", &[(IdentityPart::Ip, ip)]);
    let own = Ban::new(2, Window::from_secs(60), Window::from_secs(600)).limit(Count::Requests);
    let everywhere =
        Ban::new(3, Window::from_secs(60), Window::from_secs(300)).limiter_limit(Count::Requests);
    let one = Limit::new(1, Window::from_secs(60), Algorithm::FixedWindow);
    let limits = [own, everywhere, one];
    let a = route("/a", ip).with_limiter_ban(ban_key.clone());
    let b = route("/b", ip).with_limiter_ban(ban_key);
    assert!(check(backend, &a, &limits, T0).await.allowed);
    assert!(!check(backend, &a, &limits, T0 + 1).await.allowed);
    let own_ban = check(backend, &a, &limits, T0 + 2).await;
    assert_eq!(
        (own_ban.limits[0].remaining, own_ban.limits[1].remaining),
        (1, 1),
        "the route's ban started, the limiter's counted two: {own_ban:?}"
    );
    let held = check(backend, &a, &limits, T0 + 3).await;
    assert!(
        !held.limits[0].allowed && held.limits[1].allowed,
        "{held:?}"
    );
    assert!(check(backend, &b, &limits, T0 + 4).await.allowed);
    let started = check(backend, &b, &limits, T0 + 5).await;
    assert_eq!(
        (
            started.limits[0].allowed,
            started.limits[1].allowed,
            started.limits[1].remaining
        ),
        (true, false, 1),
        "the limiter's ban starts with its third counted refusal: {started:?}"
    );
    assert_eq!(ms(started.retry_after()), 300_000, "{started:?}");
}

/// A check of bans that each count a refusal decided elsewhere (a failure once its handler
/// ran) counts one toward each, in its own key (on a Cluster, in two slots), and reports
/// every ban it starts.
async fn a_refusal_decided_elsewhere_counts_toward_each_ban(backend: &Backend) {
    let ip = "203.0.113.6";
    let key = route("/signin", ip)
        .with_limiter_ban(RouteKey::for_limiter_ban("rl", &[(IdentityPart::Ip, ip)]));
    let own = Ban::new(2, Window::from_secs(60), Window::from_secs(600)).limit(Count::Failures);
    let everywhere =
        Ban::new(2, Window::from_secs(60), Window::from_secs(300)).limiter_limit(Count::Failures);
    let failure = [own.counting_a_refusal(), everywhere.counting_a_refusal()];
    assert!(failure.iter().all(Limit::counts_a_refusal));
    let one = check(backend, &key, &failure, T0).await;
    assert_eq!(
        (one.limits[0].remaining, one.limits[1].remaining),
        (1, 1),
        "{one:?}"
    );
    let two = check(backend, &key, &failure, T0 + 1).await;
    assert!(
        two.limits.iter().all(|s| !s.allowed && s.remaining == 1),
        "both bans start: {two:?}"
    );
    // Either ban now refuses a check of the route at once.
    let sign_in = Limit::new(100, Window::from_secs(60), Algorithm::FixedWindow);
    let banned = check(backend, &key, &[own, everywhere, sign_in], T0 + 2).await;
    assert_eq!(ms(banned.retry_after()), 599_999, "{banned:?}");
}

/// The limiter's ban lives in the client's key of its own: refusals on two routes count
/// toward it together, and once it starts a third route refuses the client at once (on a
/// Cluster, from a slot of its own: asked first, and told of the refusals after).
async fn the_limiters_ban_counts_refusals_of_every_route_and_bans_on_all(backend: &Backend) {
    let ip = "203.0.113.3";
    let ban_key = RouteKey::for_limiter_ban("rl", &[(IdentityPart::Ip, ip)]);
    let ban =
        Ban::new(3, Window::from_secs(60), Window::from_secs(300)).limiter_limit(Count::Requests);
    let one = Limit::new(1, Window::from_secs(60), Algorithm::FixedWindow);
    let limits = [ban, one];
    let a = route("/a", ip).with_limiter_ban(ban_key.clone());
    let b = route("/b", ip).with_limiter_ban(ban_key.clone());
    let c = route("/c", ip).with_limiter_ban(ban_key.clone());
    assert!(check(backend, &a, &limits, T0).await.allowed);
    assert!(check(backend, &b, &limits, T0 + 1).await.allowed);
    let refused = check(backend, &a, &limits, T0 + 2).await;
    assert_eq!(
        (refused.allowed, refused.limits[0].remaining),
        (false, 2),
        "{refused:?}"
    );
    let refused = check(backend, &b, &limits, T0 + 3).await;
    assert_eq!(refused.limits[0].remaining, 1, "{refused:?}");
    let started = check(backend, &a, &limits, T0 + 4).await;
    assert_eq!(
        (
            started.allowed,
            started.limits[0].remaining,
            ms(started.retry_after())
        ),
        (false, 1, 300_000),
        "{started:?}"
    );
    let elsewhere = check(backend, &c, &limits, T0 + 5).await;
    assert!(
        !elsewhere.allowed,
        "route /c has its whole budget: {elsewhere:?}"
    );
    assert_eq!(ms(elsewhere.retry_after()), 299_999, "{elsewhere:?}");
    // Another client is not banned.
    let other = route("/c", "203.0.113.4").with_limiter_ban(RouteKey::for_limiter_ban(
        "rl",
        &[(IdentityPart::Ip, "203.0.113.4")],
    ));
    assert!(check(backend, &other, &limits, T0 + 6).await.allowed);
}
