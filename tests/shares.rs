//! Shares on every store (`Store::take_share`, what a route that syncs decides from):
//! `RedisStore` on a harness-started server and on Valkey, `RedisClusterStore` on a
//! harness-started 3-master cluster, and `MemoryStore`, which takes none. Time is injected.

mod support;

use std::time::Duration;

use ratelimit_runtime::{
    key::RouteKey,
    store::{AdjustRequest, Adjustment, CheckRequest, Share},
    Algorithm, IdentityPart, Limit, Window,
};
use support::{Backend, T0};

on_every_store!(
    a_share_counts_its_units_at_once_with_the_figures_after_them,
    a_share_gives_what_is_left_and_says_when_to_retry,
    an_unspent_rest_goes_back_where_the_share_was_counted,
);

fn client(ip: &str) -> RouteKey {
    RouteKey::new("rl", "GET", "/api", &[(IdentityPart::Ip, ip)])
}

const ALGORITHMS: [Algorithm; 3] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::Gcra,
];

/// `units` of `limit` for `key` at `now`; `None` from a store that takes no shares.
async fn take(
    backend: &Backend,
    key: &RouteKey,
    limit: Limit,
    units: u32,
    now: u64,
) -> Option<Share> {
    let store = backend.store();
    let limits = [limit];
    let request = CheckRequest {
        key,
        limits: &limits,
        now_millis: Some(now),
    };
    let taking = store.take_share(request, units)?;
    Some(
        taking
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", store.kind())),
    )
}

/// Thirty units of a hundred are counted at once: a check after them finds 69 left, as
/// after thirty checks; the figures are those the thirtieth check would get.
async fn a_share_counts_its_units_at_once_with_the_figures_after_them(backend: &Backend) {
    for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
        let key = client(&format!("203.0.113.{i}"));
        let limit = Limit::new(100, Window::from_secs(60), algorithm);
        let Some(share) = take(backend, &key, limit, 30, T0).await else {
            assert!(!backend.is_redis(), "the Redis stores take shares");
            return;
        };
        assert_eq!(share.granted, 30, "{algorithm:?}");
        let passed = share.passed.expect("granted");
        assert!(passed.allowed && share.refused.is_none(), "{algorithm:?}");
        assert_eq!(passed.limits[0].remaining, 70, "{algorithm:?}");
        assert!(passed.receipt.is_some(), "{algorithm:?}");
        let after = backend.check(&key, &[limit], T0).await;
        assert_eq!(after.limits[0].remaining, 69, "{algorithm:?}: {after:?}");
    }
}

/// Asked for more than is left, a share gives what is left, and says what a check after it
/// is told: refused, and when to retry.
async fn a_share_gives_what_is_left_and_says_when_to_retry(backend: &Backend) {
    for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
        let key = client(&format!("198.51.100.{i}"));
        let limit = Limit::new(100, Window::from_secs(60), algorithm);
        for _ in 0..10 {
            backend.check(&key, &[limit], T0).await;
        }
        let Some(share) = take(backend, &key, limit, 500, T0).await else {
            return;
        };
        assert_eq!(share.granted, 90, "{algorithm:?}");
        let refused = share.refused.expect("fewer than asked");
        assert!(!refused.allowed, "{algorithm:?}");
        assert!(refused.retry_after() > Duration::ZERO, "{refused:?}");
        let empty = take(backend, &key, limit, 10, T0).await.unwrap();
        assert_eq!(empty.granted, 0);
        assert!(empty.passed.is_none() && empty.refused.is_some());
    }
}

/// What a share did not spend, given back with its receipt, is back in the budget.
async fn an_unspent_rest_goes_back_where_the_share_was_counted(backend: &Backend) {
    for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
        let key = client(&format!("192.0.2.{i}"));
        let limit = Limit::new(100, Window::from_secs(60), algorithm);
        let Some(share) = take(backend, &key, limit, 40, T0).await else {
            return;
        };
        let receipt = share.passed.and_then(|d| d.receipt).expect("a receipt");
        let limits = [limit];
        let change = Adjustment::GiveBack {
            units: 25,
            receipt: Some(&receipt),
        };
        let store = backend.store();
        let given = store
            .adjust(AdjustRequest::new(&key, &limits, Some(T0 + 10), change))
            .await
            .expect("given back");
        assert_eq!(given, 25, "{algorithm:?}");
        let after = backend.check(&key, &[limit], T0 + 10).await;
        assert_eq!(after.limits[0].remaining, 84, "{algorithm:?}: {after:?}");
    }
}
