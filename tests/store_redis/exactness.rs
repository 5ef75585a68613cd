//! The scripts decide as the memory store does, to the millisecond: over random schedules,
//! at the largest limits, windows and times, and with a clock that steps back.

use ratelimit_runtime::{
    key::RouteKey, store::CheckRequest, Algorithm, IdentityPart, Limit, Window,
};

use crate::support::{limit_states, Backend, T0};

/// Every algorithm is written once in Lua and once in Rust, and the Lua runs in two
/// scripts (alone, and in a stack): over random schedules, all three decide every request
/// alike, down to `remaining`, `retry_after` and `reset_after`; so do Redis and memory on a
/// stack of two limits that both bind. The clock also steps back (a failover to a node
/// running behind): the memory store must forget what the scripts deleted.
#[test]
fn a_limit_alone_in_a_stack_and_in_memory_decides_alike() {
    use proptest::prelude::*;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (redis, memory) =
        runtime.block_on(async { (Backend::standalone().await, Backend::memory()) });
    let case = std::sync::atomic::AtomicU64::new(0);
    let algorithm = || {
        prop_oneof![
            Just(Algorithm::FixedWindow),
            Just(Algorithm::SlidingWindow),
            Just(Algorithm::SlidingLog),
            Just(Algorithm::Gcra),
        ]
    };
    let other = (algorithm(), 1u32..4, 1_001u64..=6_000);
    // Windows of whole seconds and odd milliseconds; steps from none (a burst at one
    // instant) to more than two windows, and back by up to two windows.
    let schedule = (
        algorithm(),
        1u32..6,
        prop_oneof![1_000u64..=5_000, Just(997)],
        other,
    )
        .prop_flat_map(|(algorithm, max, window, other)| {
            let w = window as i64;
            let steps = proptest::collection::vec(
                prop_oneof![
                    4 => Just(0i64),
                    4 => 0..w / 4,
                    2 => 0..w,
                    1 => w..3 * w,
                    1 => -2 * w..0,
                ],
                1..60,
            );
            (Just(algorithm), Just(max), Just(window), Just(other), steps)
        });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&schedule, |(algorithm, max, window, other, steps)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let ip = format!("198.51.100.{}", n % 250);
            let key = |route: &str| {
                RouteKey::new(
                    "rl",
                    "GET",
                    &format!("/{route}/{n}"),
                    &[(IdentityPart::Ip, &ip)],
                )
            };
            let (key, stacked_key, pair_key) = (key("diff"), key("diff-stack"), key("diff-pair"));
            let limit = Limit::new(max, Window::from_millis(window), algorithm);
            // A second limit that never binds, so the stack decides as the first one does (in
            // a window of its own: two limits of one algorithm and window would share a key,
            // which `#[rate_limit]` refuses).
            let loose = Limit::new(
                1_000_000,
                Window::from_millis(window + 1),
                Algorithm::FixedWindow,
            );
            // And one that binds too, in a window of its own (made one ms longer when it
            // would be the first's).
            let (other_algorithm, other_max, other_window) = other;
            let other_window = if other_window == window {
                window + 1
            } else {
                other_window
            };
            let pair = [
                limit,
                Limit::new(
                    other_max,
                    Window::from_millis(other_window),
                    other_algorithm,
                ),
            ];
            let mut now = T0 + 123;
            runtime.block_on(async {
                for (i, step) in steps.iter().enumerate() {
                    now = now.saturating_add_signed(*step).max(T0);
                    let alone = limit_states(&redis.check(&key, &[limit], now).await);
                    let stacked =
                        limit_states(&redis.check(&stacked_key, &[limit, loose], now).await);
                    let in_memory = limit_states(&memory.check(&key, &[limit], now).await);
                    prop_assert_eq!(&alone, &in_memory, "{} at request {}", limit, i + 1);
                    prop_assert_eq!(alone[0], stacked[0], "{} at request {}", limit, i + 1);
                    prop_assert!(stacked[1].0, "the loose limit never binds");
                    let both = limit_states(&redis.check(&pair_key, &pair, now).await);
                    let both_in_memory = limit_states(&memory.check(&pair_key, &pair, now).await);
                    prop_assert_eq!(both, both_in_memory, "{:?} at request {}", pair, i + 1);
                }
                Ok(())
            })
        })
        .unwrap();
    runtime.block_on(async {
        redis.finish().await;
        memory.finish().await;
    });
}

/// The scripts divide with `math.floor(a / b)`, exact only while the operands stay below
/// 2^53 (`scripts/README.md`): at the largest limits and windows a policy can declare, and
/// up to the latest time a store accepts, Redis alone, Redis in a stack and the memory store
/// (integer arithmetic) still decide every request alike. (GCRA's arrival times near the
/// latest time are past 2^53 µs: computed there, `(1 << 53) / 1000` would round an odd
/// interval and refuse a burst at that time early.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_are_exact_at_the_largest_limits_windows_and_times() {
    use ratelimit_runtime::{policy::MAX_WINDOW_MILLIS, store::MAX_INJECTED_MILLIS};

    let (redis, memory) = (Backend::standalone().await, Backend::memory());
    let maxes = [1, 7, 1_000, 65_537, 2_000_000_000, u32::MAX];
    let windows = [1, 997, 3_600_000, MAX_WINDOW_MILLIS];
    let mut checked = 0;
    for (n, (algorithm, max, window)) in Algorithm::ALL
        .into_iter()
        .flat_map(|a| maxes.map(|m| (a, m)))
        .flat_map(|(a, m)| windows.map(|w| (a, m, w)))
        .enumerate()
    {
        // Only the limits `#[rate_limit]` accepts.
        let Ok(limit) =
            std::panic::catch_unwind(|| Limit::new(max, Window::from_millis(window), algorithm))
        else {
            continue;
        };
        // A second limit that never binds, so the stack decides as `limit` alone does (in a
        // window of its own: two limits of one algorithm and window would share a key).
        let loose_window = if window == 1 { 2 } else { window - 1 };
        let loose = Limit::new(
            u32::MAX,
            Window::from_millis(loose_window),
            Algorithm::FixedWindow,
        );
        // A burst at one instant, then steps into the window, to its end and past it.
        let steps = [
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            1,
            window / 2,
            window / 2,
            window - 1,
            1,
            2 * window,
        ];
        let span: u64 = steps.iter().sum();
        // Early; ending at the latest time; a burst at the latest time (its steps stop there).
        for start in [T0 + 123, MAX_INJECTED_MILLIS - span, MAX_INJECTED_MILLIS] {
            let ip = format!("198.51.100.{}", n % 250);
            let name = format!("/extreme/{n}/{start}");
            let key = RouteKey::new("rl", "GET", &name, &[(IdentityPart::Ip, &ip)]);
            let stacked_key = RouteKey::new(
                "rl",
                "GET",
                &format!("{name}/stack"),
                &[(IdentityPart::Ip, &ip)],
            );
            let mut now = start;
            for step in steps {
                now += step;
                if now > MAX_INJECTED_MILLIS {
                    break;
                }
                let alone = limit_states(&redis.check(&key, &[limit], now).await);
                let in_memory = limit_states(&memory.check(&key, &[limit], now).await);
                assert_eq!(alone, in_memory, "{limit} at {now}");
                let stacked = limit_states(&redis.check(&stacked_key, &[limit, loose], now).await);
                assert_eq!(alone[0], stacked[0], "{limit} at {now}");
                assert!(stacked[1].0, "the loose limit never binds");
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "{checked} checks");
    redis.finish().await;
    memory.finish().await;
}

/// A failover to a node whose clock runs behind, on the store's own clock as in production:
/// a count made there at an earlier time must not shorten its key's life, or what the node
/// ahead counted in a later window (or logged later) would expire with it and the later
/// window's budget come back early. The node ahead is the same script with its clock
/// injected two windows ahead of Redis's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_at_an_earlier_time_never_shortens_its_keys_life() {
    let backend = Backend::standalone().await;
    let store = backend.store();
    let window = 1_000;
    let (seconds, micros): (u64, u64) = backend.query(&redis::cmd("TIME")).await;
    let redis_now = seconds * 1000 + micros / 1000;
    let mut shortened = Vec::new();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let limits = [Limit::new(2, Window::from_millis(window), algorithm)];
        let key = RouteKey::new(
            "rl",
            "GET",
            "/clock-back",
            &[(IdentityPart::Ip, algorithm.as_str())],
        );
        let check = |now: Option<u64>| {
            store.check(CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: now,
            })
        };
        let pttl = || async {
            backend
                .query::<i64>(redis::cmd("PTTL").arg(key.limit_key(&limits[0])))
                .await
        };
        assert!(check(Some(redis_now + 2 * window)).await.unwrap().allowed);
        let ahead = pttl().await;
        assert!(check(None).await.unwrap().allowed, "{algorithm}");
        let behind = pttl().await;
        // A little slack for the time between the two reads.
        if behind < ahead - 1_000 {
            shortened.push(format!("{algorithm}: {ahead} ms, then {behind} ms"));
        }
    }
    assert!(shortened.is_empty(), "{shortened:#?}");
}
