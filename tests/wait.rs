//! Reservations (`Store::reserve`, a route's `wait`) on every store: `RedisStore` on a
//! harness-started server and on Valkey, `RedisClusterStore` on a harness-started 3-master
//! cluster, and `MemoryStore`. A request over its limit is counted at the earliest time
//! within its wait at which every limit lets it in, as if it arrived then, and told how long
//! to wait; past the wait it is refused and counts nothing. Time is injected; the delays
//! below are worked out by hand from each algorithm's formulas.

mod support;

use std::time::Duration;

use ratelimit_runtime::{
    key::RouteKey,
    store::{AdjustRequest, Adjustment, CheckRequest, Decision},
    Algorithm, IdentityPart, Limit, Window,
};
use support::{Backend, T0};

on_every_store!(
    each_algorithm_counts_a_request_at_its_turn,
    past_the_wait_a_request_is_refused_and_counts_nothing,
    a_turn_given_back_by_its_receipt_is_free_again,
    a_stack_waits_for_the_turn_every_limit_gives,
    a_hundred_concurrent_reservations_are_spaced_as_the_limit_says,
);

fn client(ip: &str) -> RouteKey {
    RouteKey::new("rl", "GET", "/batch", &[(IdentityPart::Ip, ip)])
}

fn limit(max: u32, window_ms: u64, algorithm: Algorithm) -> Limit {
    Limit::new(max, Window::from_millis(window_ms), algorithm)
}

/// A reservation of `limits` at `now` that may wait `wait_ms`.
async fn reserve(
    backend: &Backend,
    key: &RouteKey,
    limits: &[Limit],
    now: u64,
    wait_ms: u64,
) -> Decision {
    let request = CheckRequest {
        key,
        limits,
        now_millis: Some(now),
    };
    let store = backend.store();
    store
        .reserve(request, Duration::from_millis(wait_ms))
        .await
        .unwrap_or_else(|e| panic!("{} store failed: {e}", store.kind()))
}

/// The delay of an allowed reservation, checking that its receipt names its turn.
fn turn(decision: &Decision, now: u64) -> u64 {
    assert!(decision.allowed, "{decision:?}");
    let delay = decision.delay().as_millis() as u64;
    let receipt = decision
        .receipt
        .as_ref()
        .expect("an allowed check's receipt");
    assert_eq!(receipt.counted_at_millis(), now + delay, "{decision:?}");
    delay
}

/// Two per second: two pass at once, then each algorithm says when the next three may run.
/// Fixed window and sliding log: the next window's two, then the one after. Sliding window:
/// the estimate `prev × (w − e) / w + cur` lets one in at 1.5 s, the next at 2 s (the
/// first of the window at 2 s, whose previous window counted one), then 3 s. GCRA: one per
/// emission interval (500 ms) after the burst.
async fn each_algorithm_counts_a_request_at_its_turn(backend: &Backend) {
    for (algorithm, turns) in [
        (Algorithm::FixedWindow, [1_000, 1_000, 2_000]),
        (Algorithm::SlidingLog, [1_000, 1_000, 2_000]),
        (Algorithm::SlidingWindow, [1_500, 2_000, 3_000]),
        (Algorithm::Gcra, [500, 1_000, 1_500]),
    ] {
        let key = client(&format!("203.0.113.{}", algorithm as u8));
        let limits = [limit(2, 1_000, algorithm)];
        for _ in 0..2 {
            let decision = reserve(backend, &key, &limits, T0, 10_000).await;
            assert_eq!(turn(&decision, T0), 0, "{algorithm:?}");
        }
        let mut delays = Vec::new();
        for _ in 0..3 {
            delays.push(turn(&reserve(backend, &key, &limits, T0, 10_000).await, T0));
        }
        assert_eq!(delays, turns, "{algorithm:?}");
        // A check at the first turn sees what the turns took: without them it would pass.
        let refused = backend.check(&key, &limits, T0 + turns[0]).await;
        assert!(!refused.allowed, "{algorithm:?}: {refused:?}");
    }
}

/// A request whose turn is past its wait is refused, told when it could have run, and
/// counts nothing: refused again with a wait a millisecond short, it is told the same turn,
/// and the next one with a long enough wait gets that very turn.
async fn past_the_wait_a_request_is_refused_and_counts_nothing(backend: &Backend) {
    for algorithm in Algorithm::ALL {
        let key = client(&format!("198.51.100.{}", algorithm as u8));
        let limits = [limit(2, 1_000, algorithm)];
        for _ in 0..2 {
            turn(&reserve(backend, &key, &limits, T0, 0).await, T0);
        }
        let refused = reserve(backend, &key, &limits, T0, 0).await;
        assert!(!refused.allowed, "{algorithm:?}: {refused:?}");
        assert_eq!(refused.delay(), Duration::ZERO);
        let wanted = refused.retry_after().as_millis() as u64;
        assert!(wanted > 0, "{algorithm:?}");
        let again = reserve(backend, &key, &limits, T0, wanted - 1).await;
        assert!(!again.allowed, "{algorithm:?}: {again:?}");
        assert_eq!(
            again.retry_after().as_millis() as u64,
            wanted,
            "{algorithm:?}"
        );
        let then = turn(&reserve(backend, &key, &limits, T0, wanted).await, T0);
        assert_eq!(then, wanted, "{algorithm:?}");
    }
}

/// A reservation given back with its receipt (its client left while waiting) frees its
/// turn: of three turns taken (as in the first case), the first is given back, and the next
/// request gets it again; GCRA, whose state is one arrival time, frees the last turn instead.
async fn a_turn_given_back_by_its_receipt_is_free_again(backend: &Backend) {
    for (algorithm, turns, again) in [
        (Algorithm::FixedWindow, [1_000, 1_000, 2_000], 1_000),
        (Algorithm::SlidingLog, [1_000, 1_000, 2_000], 1_000),
        (Algorithm::SlidingWindow, [1_500, 2_000, 3_000], 1_500),
        (Algorithm::Gcra, [500, 1_000, 1_500], 1_500),
    ] {
        let key = client(&format!("192.0.2.{}", algorithm as u8));
        let limits = [limit(2, 1_000, algorithm)];
        for _ in 0..2 {
            reserve(backend, &key, &limits, T0, 0).await;
        }
        let mut taken = Vec::new();
        for turn_at in turns {
            let decision = reserve(backend, &key, &limits, T0, 5_000).await;
            assert_eq!(turn(&decision, T0), turn_at, "{algorithm:?}");
            taken.push(decision);
        }
        let receipt = taken[0].receipt.as_ref().expect("a receipt");
        let change = Adjustment::GiveBack {
            units: 1,
            receipt: Some(receipt),
        };
        let given = backend
            .store()
            .adjust(AdjustRequest::new(&key, &limits, Some(T0 + 20), change))
            .await
            .expect("the store answers");
        assert_eq!(given, 1, "{algorithm:?}");
        let next = reserve(backend, &key, &limits, T0 + 20, 5_000).await;
        assert_eq!(turn(&next, T0 + 20) + 20, again, "{algorithm:?}");
    }
}

/// Two per second (GCRA) beside three per ten seconds (fixed window): the third request
/// waits half a second for the first; the fourth would wait for the second's next window, ten
/// seconds on, and is refused with a five-second wait, counting in neither; with a ten-second
/// wait it runs then.
async fn a_stack_waits_for_the_turn_every_limit_gives(backend: &Backend) {
    let key = client("203.0.113.77");
    let limits = [
        limit(2, 1_000, Algorithm::Gcra),
        limit(3, 10_000, Algorithm::FixedWindow),
    ];
    let mut delays = Vec::new();
    for _ in 0..3 {
        delays.push(turn(&reserve(backend, &key, &limits, T0, 5_000).await, T0));
    }
    assert_eq!(delays, [0, 0, 500]);
    let refused = reserve(backend, &key, &limits, T0, 5_000).await;
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after(), Duration::from_millis(10_000));
    assert_eq!(
        backend.counted(&key, &limits[0], T0).await,
        3,
        "the refusal counted nothing in the per-second limit"
    );
    let later = reserve(backend, &key, &limits, T0, 10_000).await;
    assert_eq!(turn(&later, T0), 10_000);
}

/// A hundred requests at once at ten per second, each willing to wait ten seconds: every one
/// is served, at the turns the algorithm gives, none twice: GCRA one per 100 ms after a
/// burst of ten; a fixed window and a sliding log, ten per second.
async fn a_hundred_concurrent_reservations_are_spaced_as_the_limit_says(backend: &Backend) {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let key = client(&format!("198.51.100.1{}", algorithm as u8));
        let limits = [limit(10, 1_000, algorithm)];
        let store = backend.store();
        let reservations = (0..100).map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                let request = CheckRequest {
                    key: &key,
                    limits: &limits,
                    now_millis: Some(T0),
                };
                store
                    .reserve(request, Duration::from_secs(10))
                    .await
                    .expect("the store answers")
            })
        });
        let mut delays = Vec::new();
        for reservation in reservations {
            delays.push(turn(&reservation.await.expect("the task ran"), T0));
        }
        delays.sort_unstable();
        let expected: Vec<u64> = (0..100u64)
            .map(|i| match algorithm {
                Algorithm::Gcra => i.saturating_sub(9) * 100,
                _ => i / 10 * 1_000,
            })
            .collect();
        assert_eq!(delays, expected, "{algorithm:?}");
    }
}
