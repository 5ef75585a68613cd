//! One behaviour suite, run against every store: `RedisStore` on a harness-started server,
//! the same on a harness-started Valkey server (the binary `tests/run` installs),
//! `RedisClusterStore` on a harness-started 3-master cluster, and `MemoryStore`.
//!
//! Every case is an `async fn(&Backend)`; `on_every_store!` (tests/support) generates one
//! test per (case, backend). Time is injected (a `ManualClock`); no test sleeps for a window.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratelimit_runtime::{
    clock::ManualClock,
    key::RouteKey,
    policy::MAX_WINDOW_MILLIS,
    store::{CheckRequest, Decision, StoreErrorKind, MAX_INJECTED_MILLIS},
    Algorithm, IdentityPart, Limit, Window,
};
use support::{limit_states, Backend, T0, W};

on_every_store!(
    fixed_window_allows_a_full_quota_again_one_ms_after_rollover,
    sliding_window_still_limits_one_ms_after_rollover,
    sliding_window_weighs_the_previous_window_at_the_midpoint,
    sliding_log_counts_exactly_over_the_last_window,
    sliding_log_is_exact_across_rollover,
    gcra_is_exact_across_rollover,
    remaining_retry_after_and_reset_after_are_exact,
    every_key_has_a_ttl,
    the_store_clock_decides_without_an_injected_time,
    routes_and_identities_have_separate_budgets,
    stacked_limits_are_all_or_nothing,
    concurrent_fixed_window_checks_allow_exactly_the_limit,
    concurrent_sliding_window_checks_allow_exactly_the_limit,
    concurrent_sliding_log_checks_allow_exactly_the_limit,
    concurrent_gcra_checks_allow_exactly_the_limit,
    a_clock_that_steps_back_does_not_reset_a_later_window,
    a_clock_that_steps_back_keeps_later_log_entries,
    an_injected_time_past_the_latest_is_refused_by_every_store,
    a_peek_answers_what_the_next_check_would_and_counts_nothing,
);

fn limit(max: u32, algorithm: Algorithm) -> Limit {
    Limit::new(max, Window::from_millis(W), algorithm)
}

fn client(route: &str, ip: &str) -> RouteKey {
    RouteKey::new("rl", "GET", route, &[(IdentityPart::Ip, ip)])
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// How many of `n` checks at `now` were allowed.
async fn spend(backend: &Backend, key: &RouteKey, limits: &[Limit], now: u64, n: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..n {
        if backend.check(key, limits, now).await.allowed {
            allowed += 1;
        }
    }
    allowed
}

/// `(allowed, remaining, retry_after ms, reset_after ms)` of the first limit.
fn state(decision: &Decision) -> (bool, u32, u64, u64) {
    limit_states(decision)[0]
}

async fn fixed_window_allows_a_full_quota_again_one_ms_after_rollover(backend: &Backend) {
    let clock = ManualClock::at(T0 + W - 1);
    let limits = [limit(5, Algorithm::FixedWindow)];
    let key = client("/export", "203.0.113.7");
    for left in (0..5).rev() {
        let d = backend.check(&key, &limits, clock.now_millis()).await;
        assert_eq!(state(&d), (true, left, 0, 1));
    }
    let d = backend.check(&key, &limits, clock.now_millis()).await;
    assert_eq!(
        state(&d),
        (false, 0, 1, 1),
        "rejected until the window ends in 1 ms"
    );
    assert_eq!(
        backend.counted(&key, &limits[0], clock.now_millis()).await,
        5
    );

    clock.advance(ms(1));
    // The fixed window's known weakness: twice the limit within 2 ms.
    assert_eq!(
        spend(backend, &key, &limits, clock.now_millis(), 8).await,
        5
    );
    let d = backend.check(&key, &limits, clock.now_millis()).await;
    assert_eq!(state(&d), (false, 0, W, W));
    assert_eq!(
        backend.counted(&key, &limits[0], clock.now_millis()).await,
        5
    );
}

async fn sliding_window_still_limits_one_ms_after_rollover(backend: &Backend) {
    let clock = ManualClock::at(T0 + W - 1);
    let limits = [limit(10, Algorithm::SlidingWindow)];
    let key = client("/search", "203.0.113.7");
    assert_eq!(
        spend(backend, &key, &limits, clock.now_millis(), 11).await,
        10
    );

    clock.advance(ms(1));
    // The previous 10 weigh (W - 0) / W: the estimate is 10, nothing fits. One request fits
    // once 10 * (W - e) / W + 1 <= 10, i.e. from e = W / 10 = 6000 ms.
    let d = backend.check(&key, &limits, clock.now_millis()).await;
    assert_eq!(state(&d), (false, 0, 6_000, W));
    let d = backend.check(&key, &limits, T0 + W + 5_999).await;
    assert_eq!(state(&d), (false, 0, 1, W - 5_999));
    let d = backend.check(&key, &limits, T0 + W + 6_000).await;
    assert_eq!(state(&d), (true, 0, 0, 2 * W - 6_000));
    assert!(!backend.check(&key, &limits, T0 + W + 6_000).await.allowed);
    assert_eq!(backend.counted(&key, &limits[0], T0 + W).await, 1);
    assert_eq!(backend.counted(&key, &limits[0], T0).await, 10);
}

async fn sliding_window_weighs_the_previous_window_at_the_midpoint(backend: &Backend) {
    let limits = [limit(10, Algorithm::SlidingWindow)];
    let key = client("/search", "203.0.113.7");
    assert_eq!(spend(backend, &key, &limits, T0 + 1_000, 10).await, 10);

    // Midpoint of the next window: the previous 10 still weigh 5, so exactly 5 more fit.
    let midpoint = T0 + W + W / 2;
    assert_eq!(spend(backend, &key, &limits, midpoint, 20).await, 5);
    assert_eq!(backend.counted(&key, &limits[0], midpoint).await, 5);
    assert_eq!(backend.counted(&key, &limits[0], T0).await, 10);
    // The next fits when 10 * (W - e) <= 4 * W: e = 36000, 6000 ms after the midpoint.
    let d = backend.check(&key, &limits, midpoint).await;
    assert_eq!(d.limits[0].retry_after, ms(6_000));
    assert!(!backend.check(&key, &limits, midpoint + 5_999).await.allowed);
    assert!(backend.check(&key, &limits, midpoint + 6_000).await.allowed);
}

async fn sliding_log_counts_exactly_over_the_last_window(backend: &Backend) {
    let limits = [limit(5, Algorithm::SlidingLog)];
    let key = client("/login", "203.0.113.7");
    assert_eq!(spend(backend, &key, &limits, T0, 1).await, 1);
    assert_eq!(spend(backend, &key, &limits, T0 + 10_000, 4).await, 4);

    // The window is (now - W, now]: at T0 + W - 1 the entry from T0 still counts...
    let d = backend.check(&key, &limits, T0 + W - 1).await;
    assert_eq!(state(&d), (false, 0, 1, 10_001));
    // ...and at T0 + W it has left, freeing exactly one request.
    let d = backend.check(&key, &limits, T0 + W).await;
    assert_eq!(state(&d), (true, 0, 0, W));
    let d = backend.check(&key, &limits, T0 + W).await;
    assert_eq!(state(&d), (false, 0, 10_000, W));
    assert!(!backend.check(&key, &limits, T0 + W + 9_999).await.allowed);
    assert_eq!(spend(backend, &key, &limits, T0 + W + 10_000, 6).await, 4);
    assert_eq!(backend.counted(&key, &limits[0], T0 + W + 10_000).await, 5);
}

async fn sliding_log_is_exact_across_rollover(backend: &Backend) {
    let clock = ManualClock::at(T0 + W - 1);
    let limits = [limit(5, Algorithm::SlidingLog)];
    let key = client("/login", "203.0.113.7");
    assert_eq!(
        spend(backend, &key, &limits, clock.now_millis(), 6).await,
        5
    );
    clock.advance(ms(1));
    let d = backend.check(&key, &limits, clock.now_millis()).await;
    assert_eq!(
        state(&d),
        (false, 0, W - 1, W - 1),
        "no window boundary to exploit"
    );
    let d = backend.check(&key, &limits, T0 + 2 * W - 2).await;
    assert_eq!(state(&d), (false, 0, 1, 1));
    assert_eq!(spend(backend, &key, &limits, T0 + 2 * W - 1, 6).await, 5);
    // Rejected requests were never logged.
    assert_eq!(backend.counted(&key, &limits[0], T0 + 2 * W - 1).await, 5);
}

async fn gcra_is_exact_across_rollover(backend: &Backend) {
    let clock = ManualClock::at(T0 + W - 1);
    let limits = [limit(5, Algorithm::Gcra)]; // one request per 12 s, bursts of 5
    let key = client("/orders", "203.0.113.7");
    for left in (0..5).rev() {
        let d = backend.check(&key, &limits, clock.now_millis()).await;
        assert_eq!(state(&d), (true, left, 0, 12_000 * (5 - u64::from(left))));
    }
    let d = backend.check(&key, &limits, clock.now_millis()).await;
    assert_eq!(state(&d), (false, 0, 12_000, W));
    clock.advance(ms(1));
    let d = backend.check(&key, &limits, clock.now_millis()).await;
    assert_eq!(state(&d), (false, 0, 11_999, W - 1));
    let d = backend.check(&key, &limits, T0 + W - 1 + 11_999).await;
    assert_eq!(state(&d), (false, 0, 1, W - 11_999));
    let later = T0 + W - 1 + 12_000;
    let d = backend.check(&key, &limits, later).await;
    assert_eq!(state(&d), (true, 0, 0, W));
    let d = backend.check(&key, &limits, later).await;
    assert_eq!(state(&d), (false, 0, 12_000, W));
    assert_eq!(backend.counted(&key, &limits[0], later).await, 5);
}

async fn remaining_retry_after_and_reset_after_are_exact(backend: &Backend) {
    let now = T0 + 15_000;
    // (algorithm, reset_after of the 1st, 2nd and 3rd allowed request, retry_after and
    // reset_after of the 4th, rejected) for 3 per minute at 15 s into a window.
    let expected = [
        (
            Algorithm::FixedWindow,
            [45_000, 45_000, 45_000],
            45_000,
            45_000,
        ),
        // Next window, then the 3 must decay to 2: 3 * (W - e) <= 2 * W from e = W / 3.
        (
            Algorithm::SlidingWindow,
            [105_000, 105_000, 105_000],
            45_000 + 20_000,
            105_000,
        ),
        (Algorithm::SlidingLog, [W, W, W], W, W),
        (Algorithm::Gcra, [20_000, 40_000, 60_000], 20_000, 60_000),
    ];
    for (algorithm, resets, retry_after, reset_after) in expected {
        let limits = [limit(3, algorithm)];
        let key = client("/pinned", algorithm.as_str());
        for (i, reset) in resets.into_iter().enumerate() {
            let d = backend.check(&key, &limits, now).await;
            assert_eq!(
                state(&d),
                (true, 2 - i as u32, 0, reset),
                "{algorithm} request {}",
                i + 1
            );
        }
        let d = backend.check(&key, &limits, now).await;
        assert_eq!(
            state(&d),
            (false, 0, retry_after, reset_after),
            "{algorithm} rejected"
        );
        assert_eq!(d.retry_after(), ms(retry_after));
    }
}

async fn every_key_has_a_ttl(backend: &Backend) {
    let now = T0 + 1_234;
    let single = client("/single", "203.0.113.7");
    let stacked = client("/stacked", "203.0.113.7");
    let all: Vec<Limit> = Algorithm::ALL.iter().map(|a| limit(3, *a)).collect();
    let mut expected = Vec::new();
    for limit in &all {
        backend.check(&single, &[*limit], now).await;
        for key in [&single, &stacked] {
            // One key per limit and client in either store (a window algorithm's counters
            // are fields of it).
            expected.push(key.limit_key(limit));
        }
    }
    for _ in 0..5 {
        backend.check(&stacked, &all, now).await;
    }
    let ttls = backend.ttls(now).await;
    let mut keys: Vec<&str> = ttls.iter().map(|(k, _, _)| k.as_str()).collect();
    keys.sort();
    expected.sort();
    assert_eq!(keys, expected, "every key written is known");
    // With an injected clock Redis keeps keys at least ten minutes (it expires them on its
    // own clock, which a test's clock need not follow); never without a TTL.
    for (key, ttl, _) in &ttls {
        assert!(
            *ttl > 0 && *ttl as u64 <= (2 * W).max(600_000),
            "`{key}` has TTL {ttl}"
        );
    }
    // All keys of one route and client live on one cluster node.
    for route in [&single, &stacked] {
        let mut nodes: Vec<usize> = ttls
            .iter()
            .filter(|(k, _, _)| k.starts_with(route.as_str()))
            .map(|(_, _, node)| *node)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        assert_eq!(nodes.len(), 1, "{route} keys on nodes {nodes:?}");
    }
}

async fn the_store_clock_decides_without_an_injected_time(backend: &Backend) {
    // The longest window, so that no real window boundary falls inside the test.
    let window = MAX_WINDOW_MILLIS;
    let system_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for algorithm in Algorithm::ALL {
        let limits = [Limit::new(3, Window::from_millis(window), algorithm)];
        let key = client("/store-clock", algorithm.as_str());
        for left in [2, 1, 0] {
            let d = backend.check_at(&key, &limits, None).await;
            assert!(
                d.allowed && d.limits[0].remaining == left,
                "{algorithm}: {d:?}"
            );
        }
        assert!(
            !backend.check_at(&key, &limits, None).await.allowed,
            "{algorithm}"
        );
    }
    // With the store's own clock TTLs are exact: a fixed window's counter lives until the
    // window ends (Redis TIME and this machine's clock are the same clock here).
    let window_end = (system_now / window + 1) * window;
    let ttls = backend.ttls(system_now).await;
    assert_eq!(ttls.len(), 4);
    for (key, ttl, _) in ttls {
        assert!(ttl > 0 && ttl as u64 <= 2 * window, "`{key}` has TTL {ttl}");
        if key.contains(":fw") {
            assert!(
                (ttl - (window_end - system_now) as i64).abs() < 1_000,
                "`{key}` has TTL {ttl}"
            );
        }
    }
}

async fn routes_and_identities_have_separate_budgets(backend: &Backend) {
    let now = T0 + 5_000;
    for algorithm in Algorithm::ALL {
        let limits = [limit(2, algorithm)];
        let spent = RouteKey::new("rl", "GET", "/a", &[(IdentityPart::Ip, "42.0.0.1")]);
        let other_route = RouteKey::new("rl", "GET", "/b", &[(IdentityPart::Ip, "42.0.0.1")]);
        let other_method = RouteKey::new("rl", "POST", "/a", &[(IdentityPart::Ip, "42.0.0.1")]);
        let other_client = RouteKey::new("rl", "GET", "/a", &[(IdentityPart::Ip, "42.0.0.2")]);
        let other_kind = RouteKey::new("rl", "GET", "/a", &[(IdentityPart::UserId, "42.0.0.1")]);
        assert_eq!(
            spend(backend, &spent, &limits, now, 3).await,
            2,
            "{algorithm}"
        );
        for key in [&other_route, &other_method, &other_client, &other_kind] {
            let d = backend.check(key, &limits, now).await;
            assert_eq!(
                (d.allowed, d.limits[0].remaining),
                (true, 1),
                "{algorithm} {key}"
            );
            assert_eq!(
                backend.counted(key, &limits[0], now).await,
                1,
                "{algorithm} {key}"
            );
        }
        assert_eq!(
            backend.counted(&spent, &limits[0], now).await,
            2,
            "{algorithm}"
        );
    }
}

async fn stacked_limits_are_all_or_nothing(backend: &Backend) {
    let now = T0 + 20_000;
    // The tight limit last, then first: order must not matter.
    let stacks = [
        (
            client("/stack-last", "203.0.113.7"),
            vec![
                limit(10, Algorithm::FixedWindow),
                limit(10, Algorithm::SlidingWindow),
                limit(10, Algorithm::Gcra),
                limit(2, Algorithm::SlidingLog),
            ],
        ),
        (
            client("/stack-first", "203.0.113.7"),
            vec![
                limit(2, Algorithm::Gcra),
                limit(10, Algorithm::FixedWindow),
                limit(10, Algorithm::SlidingWindow),
                limit(10, Algorithm::SlidingLog),
            ],
        ),
    ];
    for (key, limits) in &stacks {
        let tight = limits.iter().position(|l| l.max() == 2).unwrap();
        assert_eq!(spend(backend, key, limits, now, 2).await, 2);
        for _ in 0..5 {
            let d = backend.check(key, limits, now).await;
            assert!(!d.allowed);
            for (i, s) in d.limits.iter().enumerate() {
                assert_eq!(
                    s.allowed,
                    i != tight,
                    "{key}: only the tight limit rejects: {d:?}"
                );
            }
            assert_eq!(d.retry_after(), d.limits[tight].retry_after);
            assert_eq!(d.binding().map(|(i, _)| i), Some(tight));
        }
        for l in limits {
            assert_eq!(
                backend.counted(key, l, now).await,
                2,
                "{key} {l}: rejected requests consumed nothing"
            );
        }
    }
}

/// 1,000 checks in flight at once against one key limited to 100.
async fn concurrent_checks(backend: &Backend, algorithm: Algorithm) {
    let now = T0 + 30_000;
    let limits = [limit(100, algorithm)];
    let key = client("/hot", "203.0.113.7");
    let store = backend.store();
    let tasks: Vec<_> = (0..1_000)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                let request = CheckRequest {
                    key: &key,
                    limits: &limits,
                    now_millis: Some(now),
                };
                store.check(request).await.expect("store answers").allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        if task.await.expect("task") {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 100, "{algorithm}");
    assert_eq!(
        backend.counted(&key, &limits[0], now).await,
        100,
        "{algorithm}"
    );
}

async fn concurrent_fixed_window_checks_allow_exactly_the_limit(backend: &Backend) {
    concurrent_checks(backend, Algorithm::FixedWindow).await;
}

async fn concurrent_sliding_window_checks_allow_exactly_the_limit(backend: &Backend) {
    concurrent_checks(backend, Algorithm::SlidingWindow).await;
}

async fn concurrent_sliding_log_checks_allow_exactly_the_limit(backend: &Backend) {
    concurrent_checks(backend, Algorithm::SlidingLog).await;
}

async fn concurrent_gcra_checks_allow_exactly_the_limit(backend: &Backend) {
    concurrent_checks(backend, Algorithm::Gcra).await;
}

/// The sliding log's side of a clock that steps back: a request logged at `later` counts
/// until `later + W`, whatever is logged meanwhile at an earlier time: the earlier entry's
/// expiry does not replace the later one's.
async fn a_clock_that_steps_back_keeps_later_log_entries(backend: &Backend) {
    let limits = [limit(2, Algorithm::SlidingLog)];
    let key = client("/login-clock-back", "203.0.113.7");
    let later = T0 + W + 30_000;
    assert_eq!(spend(backend, &key, &limits, later, 1).await, 1);
    // The clock steps back more than half a window: one request of its own fits (1 < 2).
    assert_eq!(spend(backend, &key, &limits, T0 + 10, 1).await, 1);
    // Past T0 + 10 + W the entry at T0 + 10 has left, the one at `later` has not: 1 fits.
    assert_eq!(
        spend(backend, &key, &limits, T0 + W + 20, 3).await,
        1,
        "the entry logged at `later` must still count"
    );
}

async fn a_clock_that_steps_back_does_not_reset_a_later_window(backend: &Backend) {
    // A failover to a node whose clock runs behind: a check lands in an earlier window than
    // the one a client has spent. The later window's count must survive it.
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let limits = [limit(2, algorithm)];
        let key = client("/clock-back", algorithm.as_str());
        let later = T0 + 2 * W + 10;
        assert_eq!(
            spend(backend, &key, &limits, later, 2).await,
            2,
            "{algorithm}"
        );
        assert!(
            backend.check(&key, &limits, T0 + 10).await.allowed,
            "{algorithm}: an earlier window of its own"
        );
        assert!(
            !backend.check(&key, &limits, later).await.allowed,
            "{algorithm}: the later window is still spent"
        );
    }
}

/// Injected times are whole milliseconds the scripts turn into microseconds, exact up to
/// 2^53: past that every store refuses the check with the same error (no overflow, panic or
/// wrapped figures), and at the latest accepted time every algorithm still decides.
async fn an_injected_time_past_the_latest_is_refused_by_every_store(backend: &Backend) {
    let store = backend.store();
    for algorithm in Algorithm::ALL {
        let limits = [limit(5, algorithm)];
        let key = client("/far-future", algorithm.as_str());
        let at = |now| CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: Some(now),
        };
        for now in [MAX_INJECTED_MILLIS + 1, u64::MAX / 100, u64::MAX] {
            let refused = store.check(at(now)).await.unwrap_err();
            assert_eq!(
                refused.kind(),
                StoreErrorKind::Protocol,
                "{algorithm} at {now}"
            );
            assert!(refused.to_string().contains("injected time"), "{refused}");
        }
        let decided = store.check(at(MAX_INJECTED_MILLIS)).await.unwrap();
        assert!(decided.allowed, "{algorithm}");
        assert_eq!(decided.limits[0].remaining, 4, "{algorithm}");
    }
}

/// A peek (an operator's view of a client's budget) answers, for every algorithm under a
/// stack, exactly what a check at that time answers, and counts nothing: passed and refused.
async fn a_peek_answers_what_the_next_check_would_and_counts_nothing(backend: &Backend) {
    let now = T0 + 30_000;
    let store = backend.store();
    for algorithm in Algorithm::ALL {
        let key = client(&format!("/peek-{algorithm:?}"), "203.0.113.9");
        let limits = [limit(3, algorithm), limit(5, Algorithm::FixedWindow)];
        for at in now..now + 4 {
            let request = CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(at),
            };
            let peeked = limit_states(&store.peek(request).await.expect("a peek"));
            let again = limit_states(&store.peek(request).await.expect("a peek"));
            assert_eq!(peeked, again, "{algorithm:?} at {at}: the peek counted");
            let checked = limit_states(&backend.check(&key, &limits, at).await);
            assert_eq!(peeked, checked, "{algorithm:?} at {at}");
        }
    }
}
