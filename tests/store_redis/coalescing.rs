//! Concurrent checks of one key in one process share one script call, and the count stays
//! exact: 1,000 at once under a limit of 100 pass exactly 100, for every algorithm and for
//! stacks of two, in far fewer calls than checks, on a standalone Redis, a Cluster and a
//! Sentinel primary; a sliding log holds one entry per passed request.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use ratelimit_runtime::{
    key::RouteKey,
    store::{
        AdjustRequest, Adjustment, CheckRequest, Decision, RedisClusterStore, RedisSentinelStore,
        RedisStore, Store, StoreError,
    },
    Algorithm, IdentityPart, Limit, Window,
};

use crate::{
    check_key,
    support::{Proxy, RedisCluster, RedisServer, SentinelSetup, MASTER_NAME, T0},
};

/// A store (5 s timeout) on a server of its own.
async fn fresh_store() -> (RedisServer, RedisStore) {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let store = RedisStore::builder(server.url())
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    (server, store)
}

/// One check of `key` under `limit` on the server's clock.
async fn check_now(store: &RedisStore, key: &RouteKey, limit: Limit) -> Decision {
    check_key(store, key, &[limit]).await.expect("a decision")
}

/// 1,000 checks of `key` under `limits` at once.
async fn thousand_decisions(
    store: &dyn Store,
    key: &RouteKey,
    limits: &[Limit],
    now: Option<u64>,
) -> Vec<Decision> {
    join_all((0..1_000).map(|_| {
        store.check(CheckRequest {
            key,
            limits,
            now_millis: now,
        })
    }))
    .await
    .into_iter()
    .map(|checked| checked.expect("a decision"))
    .collect()
}

async fn thousand_at_once(
    store: &dyn Store,
    key: &RouteKey,
    limit: Limit,
    now: Option<u64>,
) -> Vec<(bool, u32)> {
    thousand_decisions(store, key, &[limit], now)
        .await
        .into_iter()
        .map(|decision| (decision.allowed, decision.limits[0].remaining))
        .collect()
}

/// 1,000 at once under a stack of `outer` (100 per 2 hours) and `inner` (`inner_max` per hour; on
/// the server's clock neither regains a unit while the test runs): exactly the tighter limit's max
/// pass, counted in both limits; each passed one is told what each limit has left after it, each
/// refused one that the tighter limit refuses and what the other has left. Then each limit alone
/// holds exactly what passed.
async fn stacked_exactly(
    store: &dyn Store,
    key: &RouteKey,
    (outer, inner): (Algorithm, Algorithm),
    inner_max: u32,
    now: Option<u64>,
) {
    let limits = [
        Limit::new(100, Window::from_secs(7_200), outer),
        Limit::new(inner_max, Window::from_secs(3_600), inner),
    ];
    let label = format!("{outer:?} + {inner:?} ({inner_max}) at {now:?}");
    let decided = thousand_decisions(store, key, &limits, now).await;
    let tight = inner_max.min(100);
    let passed: Vec<&Decision> = decided.iter().filter(|d| d.allowed).collect();
    assert_eq!(passed.len(), tight as usize, "{label}: passed");
    for (at, limit) in limits.iter().enumerate() {
        let told: BTreeSet<u32> = passed.iter().map(|d| d.limits[at].remaining).collect();
        let left = limit.max() - tight;
        assert_eq!(
            told,
            (left..left + tight).collect(),
            "{label}: limit {at} remaining after each passed check"
        );
        let refused_allowed = limit.max() > tight;
        for refused in decided.iter().filter(|d| !d.allowed) {
            let state = &refused.limits[at];
            assert_eq!(
                state.allowed, refused_allowed,
                "{label}: limit {at} on a refused check"
            );
            if refused_allowed {
                assert_eq!(state.remaining, left - 1, "{label}: limit {at}");
            } else {
                assert_eq!(state.remaining, 0, "{label}: limit {at}");
                assert!(!state.retry_after.is_zero(), "{label}: limit {at} retry");
            }
        }
    }
    // Each limit counted exactly the passed checks: one more check of it alone is told so.
    for (at, limit) in limits.iter().enumerate() {
        let alone = store
            .check(CheckRequest {
                key,
                limits: std::slice::from_ref(limit),
                now_millis: now,
            })
            .await
            .expect("a decision");
        let left = limit.max() - tight;
        assert_eq!(alone.allowed, left > 0, "{label}: limit {at} alone");
        assert_eq!(
            alone.limits[0].remaining,
            left.saturating_sub(1),
            "{label}: limit {at} alone"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_checks_of_one_key_pass_exactly_the_limit_in_few_calls() {
    let (server, store) = fresh_store().await;
    for algorithm in Algorithm::ALL {
        for now in [Some(T0 + 1_234), None] {
            let key = RouteKey::new(
                "rl",
                "POST",
                "/hot",
                &[(IdentityPart::Ip, &format!("{algorithm:?}-{now:?}"))],
            );
            let limit = Limit::new(100, Window::from_secs(60), algorithm);
            let calls_before = server.scripts_run();
            let first = thousand_at_once(&store, &key, limit, now).await;
            let calls = server.scripts_run() - calls_before;
            let passed: Vec<u32> = first.iter().filter(|d| d.0).map(|d| d.1).collect();
            assert_eq!(passed.len(), 100, "{algorithm:?} at {now:?}: passed");
            // Each passed request is told what is left after it: 99 down to 0, once each.
            let told: BTreeSet<u32> = passed.iter().copied().collect();
            assert_eq!(
                told,
                (0..100).collect(),
                "{algorithm:?} at {now:?}: remaining"
            );
            assert!(
                first.iter().filter(|d| !d.0).all(|d| d.1 == 0),
                "{algorithm:?}: a refused request was told something remains"
            );
            assert!(
                calls < 100,
                "{algorithm:?} at {now:?}: {calls} script calls for 1,000 concurrent checks"
            );
            println!("{algorithm:?} at {now:?}: 1,000 concurrent checks in {calls} script calls");
            // The budget is spent: the next 1,000 all refused.
            let second = thousand_at_once(&store, &key, limit, now).await;
            assert!(
                second.iter().all(|d| !d.0),
                "{algorithm:?} at {now:?}: passed after the budget was spent"
            );
            if algorithm == Algorithm::SlidingLog {
                let entries: u64 = redis::cmd("ZCARD")
                    .arg(key.limit_key(&limit))
                    .query(&mut server.connection())
                    .unwrap();
                assert_eq!(entries, 100, "one log entry per passed request");
            }
        }
    }
}

/// The figures (allowed, remaining, retry and reset in ms) of each limit of `decision`.
fn figures(decision: &Decision) -> Vec<(bool, u32, u128, u128)> {
    decision
        .limits
        .iter()
        .map(|state| {
            (
                state.allowed,
                state.remaining,
                state.retry_after.as_millis(),
                state.reset_after.as_millis(),
            )
        })
        .collect()
}

/// A check decided in a shared call is told what it would be told checked alone in its
/// place: 1,000 at once under a limit of 100 (and under a stack) get, between them, exactly
/// the figures of 1,000 checks one after another at the same time, reset included (a GCRA's
/// reset grows with each unit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_calls_checks_are_told_what_they_would_be_told_alone() {
    let (_server, store) = fresh_store().await;
    let now = Some(T0 + 1_234);
    let mut cases: Vec<Vec<Limit>> = Algorithm::ALL
        .iter()
        .map(|&algorithm| vec![Limit::new(100, Window::from_secs(60), algorithm)])
        .collect();
    cases.push(vec![
        Limit::new(150, Window::from_secs(7), Algorithm::Gcra),
        Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow),
    ]);
    for limits in cases {
        let label = format!("{limits:?}");
        let key = |tag: &str| RouteKey::new("rl", "GET", "/alone", &[(IdentityPart::Ip, tag)]);
        let (shared_key, alone_key) = (
            key(&format!("shared {label}")),
            key(&format!("alone {label}")),
        );
        let mut shared: Vec<_> = thousand_decisions(&store, &shared_key, &limits, now)
            .await
            .iter()
            .map(figures)
            .collect();
        let mut alone = Vec::new();
        for _ in 0..1_000 {
            let decision = store
                .check(CheckRequest {
                    key: &alone_key,
                    limits: &limits,
                    now_millis: now,
                })
                .await
                .expect("a decision");
            alone.push(figures(&decision));
        }
        shared.sort();
        alone.sort();
        assert_eq!(shared, alone, "{label}");
    }
}

/// A stack of two limits shares calls too, for every pair of algorithms, whichever limit is
/// the tighter, and counts what passed in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_checks_of_a_stack_pass_exactly_its_tighter_limit() {
    let (server, store) = fresh_store().await;
    for outer in Algorithm::ALL {
        for inner in Algorithm::ALL {
            for (inner_max, now) in [(60, Some(T0 + 77)), (150, Some(T0 + 77)), (60, None)] {
                let client = format!("{outer:?}-{inner:?}-{inner_max}-{now:?}");
                let key = RouteKey::new("rl", "POST", "/stack", &[(IdentityPart::Ip, &client)]);
                let calls_before = server.scripts_run();
                stacked_exactly(&store, &key, (outer, inner), inner_max, now).await;
                let calls = server.scripts_run() - calls_before;
                assert!(calls < 100, "{client}: {calls} script calls");
            }
        }
    }
}

/// A check that passed in a shared call carries the receipt of where it was counted, so a
/// give-back returns its own unit: its own log entry; and once its window has moved on,
/// nothing (the current window's count is not its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_calls_passed_check_gives_back_exactly_its_own_unit() {
    let (server, store) = fresh_store().await;
    let log = Limit::new(100, Window::from_secs(60), Algorithm::SlidingLog);
    let fixed = Limit::new(100, Window::from_secs(60), Algorithm::FixedWindow);
    for limits in [vec![log], vec![fixed, log]] {
        let client = format!("{}-limits", limits.len());
        let key = RouteKey::new("rl", "POST", "/receipts", &[(IdentityPart::Ip, &client)]);
        let decided = thousand_decisions(&store, &key, &limits, Some(T0)).await;
        let shared: Vec<&Decision> = decided
            .iter()
            .filter(|d| d.allowed)
            .filter(|d| {
                d.receipt
                    .as_ref()
                    .and_then(|r| r.member())
                    .is_some_and(|m| m.contains(':'))
            })
            .collect();
        assert!(
            shared.len() >= 10,
            "{client}: {} passed in shared calls",
            shared.len()
        );
        let mut conn = server.connection();
        // A minute later: the fixed window the units were counted in has ended.
        let later = T0 + 60_000;
        for decision in &shared[..10] {
            let receipt = decision.receipt.as_ref().expect("a receipt");
            assert_eq!(receipt.counted_at_millis(), T0, "{client}");
            let member = receipt.member().expect("a log member").to_owned();
            let logged: Option<f64> = redis::cmd("ZSCORE")
                .arg(key.limit_key(&log))
                .arg(&member)
                .query(&mut conn)
                .unwrap();
            assert_eq!(
                logged,
                Some(T0 as f64),
                "{client}: {member} logged at the check's time"
            );
            let given = store
                .adjust(AdjustRequest::new(
                    &key,
                    &limits,
                    Some(T0 + 1),
                    Adjustment::GiveBack {
                        units: 1,
                        receipt: Some(receipt),
                    },
                ))
                .await
                .expect("a give-back");
            assert_eq!(given, limits.len() as u64, "{client}: one unit per limit");
            let logged: Option<f64> = redis::cmd("ZSCORE")
                .arg(key.limit_key(&log))
                .arg(&member)
                .query(&mut conn)
                .unwrap();
            assert_eq!(
                logged, None,
                "{client}: {member} still logged after its give-back"
            );
        }
        let entries: u64 = redis::cmd("ZCARD")
            .arg(key.limit_key(&log))
            .query(&mut conn)
            .unwrap();
        assert_eq!(entries, 90, "{client}: log entries after 10 give-backs");
        if limits.len() == 2 {
            // After its window ended, a unit goes back nowhere: not to the current window
            // (it was not counted there), nor to the one that counts no more.
            let receipt = shared[10].receipt.as_ref().expect("a receipt");
            let given = store
                .adjust(AdjustRequest::new(
                    &key,
                    &[fixed],
                    Some(later),
                    Adjustment::GiveBack {
                        units: 1,
                        receipt: Some(receipt),
                    },
                ))
                .await
                .expect("a give-back");
            assert_eq!(given, 0, "{client}");
            let alone = store
                .check(CheckRequest {
                    key: &key,
                    limits: &[fixed],
                    now_millis: Some(later),
                })
                .await
                .expect("a decision");
            assert_eq!(
                alone.limits[0].remaining, 99,
                "{client}: the current window"
            );
        }
    }
}

/// An override that lowers a limit under the count already stored refuses the waiting
/// checks; it never turns their shared call into an error (which a route failing open would
/// let through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_lowered_under_its_count_refuses_a_shared_call_without_an_error() {
    let (_server, store) = fresh_store().await;
    for algorithm in Algorithm::ALL {
        let high = Limit::new(100, Window::from_secs(60), algorithm);
        let low = Limit::new(10, Window::from_secs(60), algorithm);
        let key = RouteKey::new(
            "rl",
            "POST",
            "/lowered",
            &[(IdentityPart::Ip, &format!("{algorithm:?}"))],
        );
        let spent = thousand_at_once(&store, &key, high, Some(T0)).await;
        assert_eq!(spent.iter().filter(|d| d.0).count(), 100, "{algorithm:?}");
        let lowered = thousand_at_once(&store, &key, low, Some(T0)).await;
        assert!(
            lowered.iter().all(|d| !d.0 && d.1 == 0),
            "{algorithm:?}: a check passed, or was told something remains, under a limit lowered under its count"
        );
    }
}

/// Checks given up at any moment (their tasks aborted, as when clients go away) never leave
/// a key's lane stalled: afterwards each check of the key is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_given_up_mid_lane_never_stall_the_key() {
    let (_server, store) = fresh_store().await;
    let key = RouteKey::new("rl", "GET", "/aborted", &[(IdentityPart::Ip, "10.0.0.2")]);
    let limit = Limit::new(1_000_000, Window::from_secs(60), Algorithm::FixedWindow);
    for round in 0..20u64 {
        let tasks: Vec<_> = (0..200u64)
            .map(|i| {
                let (store, key) = (store.clone(), key.clone());
                let handle = tokio::spawn(async move { check_now(&store, &key, limit).await });
                (i, handle)
            })
            .collect();
        for (i, handle) in &tasks {
            if (i + round) % 3 == 0 {
                tokio::task::yield_now().await;
                handle.abort();
            }
        }
        for (_, handle) in tasks {
            let _ = handle.await;
        }
    }
    for _ in 0..10 {
        let started = std::time::Instant::now();
        assert!(check_now(&store, &key, limit).await.allowed);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "a check waited {:?} on a stalled lane",
            started.elapsed()
        );
    }
}

/// A shared call whose connection drops before its reply is sent once more on a new
/// connection, as a check alone is: the checks waiting for it are decided, not failed, and
/// counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_call_on_a_dropped_connection_is_sent_once_more() {
    use std::time::Duration;

    let (server, store) = fresh_store().await;
    let key = RouteKey::new("rl", "GET", "/dropped", &[(IdentityPart::Ip, "10.0.0.3")]);
    let limit = Limit::new(1_000, Window::from_secs(600), Algorithm::FixedWindow);
    assert!(check_now(&store, &key, limit).await.allowed);
    let mut admin = server.connection();
    // Scripts wait unanswered; `CLIENT KILL` and `CLIENT UNPAUSE` still run.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(20_000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let first = {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move { check_key(&store, &key, &[limit]).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    // These wait in the key's lane for the first, then share one call, sent when the first
    // times out (5 s after it started, 3 s into their own 5 s).
    let waiting: Vec<_> = (0..10)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move { check_key(&store, &key, &[limit]).await })
        })
        .collect();
    let timed_out = first.await.unwrap();
    assert!(timed_out.is_err(), "the first check, paused: {timed_out:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The shared call is unanswered on the paused server when its connection drops; the
    // server writes again before a new connection reaches it.
    crate::kill_other_clients(&mut admin);
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .unwrap();
    for waited in waiting {
        let decided = waited.await.unwrap();
        assert!(
            matches!(&decided, Ok(decision) if decision.allowed),
            "a check of the shared call: {decided:?}"
        );
    }
    // Counted: the first check before the pause, the ten, and this one (the timed-out check
    // and the dropped call never ran).
    assert_eq!(
        check_now(&store, &key, limit).await.limits[0].remaining,
        988
    );
}

/// On a Redis slower than half the timeout (every reply 300 ms late, a 500 ms timeout),
/// a hot key's checks are decided as each would be alone: none fails waiting for a shared
/// call that could not be answered within its own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_redis_a_hot_keys_checks_are_decided_as_alone() {
    use std::time::Duration;

    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let proxy = Proxy::start_late(server.port(), Duration::from_millis(300)).await;
    let store = RedisStore::builder(proxy.url())
        .timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let key = RouteKey::new("rl", "GET", "/slow", &[(IdentityPart::Ip, "10.0.0.4")]);
    let limit = Limit::new(1_000_000, Window::from_secs(600), Algorithm::FixedWindow);
    // Both scripts (a check's alone, a shared call's) loaded through a store of no delay:
    // a first call through the proxy would take two round trips (`NOSCRIPT`, then `EVAL`).
    let direct = RedisStore::builder(server.url()).build().await.unwrap();
    let warm = thousand_at_once(&direct, &key, limit, None).await;
    assert!(warm.iter().all(|(allowed, _)| *allowed));
    assert!(server.scripts_run() < 1_000, "no call was shared");
    // The proxied connection's own set-up takes round trips too.
    let mut tries = 0;
    while check_key(&store, &key, &[limit]).await.is_err() {
        tries += 1;
        assert!(tries < 5, "no check decided through the slow proxy");
    }
    let mut checks = Vec::new();
    for _ in 0..40 {
        let (store, key) = (store.clone(), key.clone());
        checks.push(tokio::spawn(async move {
            check_key(&store, &key, &[limit]).await
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut failed = Vec::new();
    for check in checks {
        if let Err(error) = check.await.unwrap() {
            failed.push(error.to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 40 failed: {failed:?}",
        failed.len()
    );
}

/// A store (5 s timeout) whose every reply comes `delay` late (a proxy), with both scripts
/// loaded and its connection made, and a store straight to the same server.
async fn late_store(delay: std::time::Duration) -> (RedisServer, Proxy, RedisStore, RedisStore) {
    use std::time::Duration;

    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let proxy = Proxy::start_late(server.port(), delay).await;
    let store = RedisStore::builder(proxy.url())
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let limit = Limit::new(1_000, Window::from_secs(600), Algorithm::FixedWindow);
    let warm = RouteKey::new("rl", "GET", "/warm", &[(IdentityPart::Ip, "10.0.0.5")]);
    let direct = RedisStore::builder(server.url()).build().await.unwrap();
    assert!(thousand_at_once(&direct, &warm, limit, None)
        .await
        .iter()
        .any(|(allowed, _)| *allowed));
    let mut tries = 0;
    while check_key(&store, &warm, &[limit]).await.is_err() {
        tries += 1;
        assert!(tries < 5, "no check decided through the slow proxy");
    }
    // The round trip the store measures last is a shared call's (one round trip), not the
    // connection's first (more).
    let limits = [limit];
    let shared = join_all((0..3).map(|_| check_key(&store, &warm, &limits))).await;
    assert!(shared.iter().all(Result::is_ok), "{shared:?}");
    (server, proxy, store, direct)
}

/// Spawns a check of `key` under `limit` within `timeout`, answering how long it took.
fn spawn_check(
    store: &RedisStore,
    key: &RouteKey,
    limit: Limit,
    timeout: std::time::Duration,
) -> tokio::task::JoinHandle<(Result<Decision, StoreError>, std::time::Duration)> {
    let (store, key) = (store.clone(), key.clone());
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let decided = store
            .check_within(
                CheckRequest {
                    key: &key,
                    limits: &[limit],
                    now_millis: None,
                },
                timeout,
            )
            .await;
        (decided, started.elapsed())
    })
}

/// Two checks of `key` (5 s each) started together: each makes a call alone, the two a
/// key may have in flight.
fn two_alone(
    store: &RedisStore,
    key: &RouteKey,
    limit: Limit,
) -> [tokio::task::JoinHandle<(Result<Decision, StoreError>, std::time::Duration)>; 2] {
    let five = std::time::Duration::from_secs(5);
    [
        spawn_check(store, key, limit, five),
        spawn_check(store, key, limit, five),
    ]
}

/// At most two calls of one key are in flight from one store: with every reply 400 ms late,
/// of five checks of a key started together two are sent at once, each alone, and the other
/// three wait; when the first is answered they go together in one call. Each is counted
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_of_a_key_are_in_flight_at_most() {
    use std::time::Duration;

    let (server, _proxy, store, direct) = late_store(Duration::from_millis(400)).await;
    let limit = Limit::new(1_000, Window::from_secs(600), Algorithm::FixedWindow);
    let key = RouteKey::new("rl", "GET", "/two", &[(IdentityPart::Ip, "10.0.0.6")]);
    let before = server.scripts_run();
    let checks: Vec<_> = (0..5)
        .map(|_| spawn_check(&store, &key, limit, Duration::from_secs(5)))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.scripts_run() - before, 2, "calls before any answer");
    for check in checks {
        let (decided, _) = check.await.unwrap();
        assert!(
            matches!(&decided, Ok(decision) if decision.allowed),
            "{decided:?}"
        );
    }
    assert_eq!(server.scripts_run() - before, 3, "calls in all");
    assert_eq!(
        check_now(&direct, &key, limit).await.limits[0].remaining,
        1_000 - 6
    );
}

/// A check given up while its shared call is on its way (its client gone) takes nothing
/// with it: the call goes on, every other check of it is answered, and each is counted
/// once (the one given up too, on the strict side: its call was sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_given_up_mid_call_leaves_the_others_counted_once() {
    use std::time::Duration;

    let (server, _proxy, store, direct) = late_store(Duration::from_millis(400)).await;
    let limit = Limit::new(1_000, Window::from_secs(600), Algorithm::FixedWindow);
    let key = RouteKey::new("rl", "GET", "/given-up", &[(IdentityPart::Ip, "10.0.0.7")]);
    let five = Duration::from_secs(5);
    let before = server.scripts_run();
    // Two calls alone, answered at ~400 ms; fifty wait and go together then.
    let alone = two_alone(&store, &key, limit);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut waiting: Vec<_> = (0..50)
        .map(|_| spawn_check(&store, &key, limit, five))
        .collect();
    let last = waiting.pop().expect("fifty");
    // The shared call has reached Redis (~400 ms); its answer is due ~400 ms later.
    let started = std::time::Instant::now();
    while server.scripts_run() - before < 3 {
        assert!(started.elapsed() < five, "no shared call");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    last.abort();
    for check in alone.into_iter().chain(waiting) {
        let (decided, _) = check.await.unwrap();
        assert!(
            matches!(&decided, Ok(decision) if decision.allowed),
            "{decided:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    // 52 checks (2 alone, 50 shared, the one given up among them), and this one.
    assert_eq!(
        check_now(&direct, &key, limit).await.limits[0].remaining,
        1_000 - 53
    );
}

/// A shared call is given the latest deadline of the checks it decides, not that of the
/// last to arrive: when Redis stalls, a check with a short timeout that joined last fails
/// at its own timeout, and one with time to spare that joined before it is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_call_waits_as_long_as_its_most_patient_check() {
    use std::time::Duration;

    let (server, _proxy, store, direct) = late_store(Duration::from_millis(400)).await;
    let limit = Limit::new(1_000, Window::from_secs(600), Algorithm::FixedWindow);
    let key = RouteKey::new("rl", "GET", "/patient", &[(IdentityPart::Ip, "10.0.0.8")]);
    let alone = two_alone(&store, &key, limit);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let patient = spawn_check(&store, &key, limit, Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Waits (2.5 round trips of ~400 ms fit in 1.2 s) and is due at ~1.24 s.
    let hurried = spawn_check(&store, &key, limit, Duration::from_millis(1_200));
    tokio::time::sleep(Duration::from_millis(160)).await;
    // ~200 ms: the two calls alone have run; the shared call, sent at ~400 ms, runs when
    // Redis writes again at ~1.4 s and is answered at ~1.8 s.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_200)
        .arg("WRITE")
        .query(&mut server.connection())
        .unwrap();
    for check in alone {
        assert!(check.await.unwrap().0.unwrap().allowed);
    }
    let (hurried, hurried_took) = hurried.await.unwrap();
    assert!(
        hurried.is_err(),
        "the hurried check, after {hurried_took:?}: {hurried:?}"
    );
    let (patient, patient_took) = patient.await.unwrap();
    assert!(
        matches!(&patient, Ok(decision) if decision.allowed),
        "the patient check, after {patient_took:?}: {patient:?}"
    );
    // Both were counted: the hurried one's call was sent (the strict side).
    assert_eq!(
        check_now(&direct, &key, limit).await.limits[0].remaining,
        1_000 - 5
    );
}

/// 1,000 at once under a limit of 100, every algorithm: exactly 100 pass, each told what is
/// left after it; and under a stack, exactly its tighter limit.
async fn exactly_the_limit(store: &dyn Store, tag: &str) {
    for algorithm in Algorithm::ALL {
        let client = format!("{tag}-{algorithm:?}");
        let key = RouteKey::new("rl", "POST", "/hot", &[(IdentityPart::Ip, client.as_str())]);
        let limit = Limit::new(100, Window::from_secs(60), algorithm);
        let decided = thousand_at_once(store, &key, limit, Some(T0)).await;
        let told: BTreeSet<u32> = decided.iter().filter(|d| d.0).map(|d| d.1).collect();
        assert_eq!(
            decided.iter().filter(|d| d.0).count(),
            100,
            "{tag} {algorithm:?}: passed"
        );
        assert_eq!(told, (0..100).collect(), "{tag} {algorithm:?}: remaining");
    }
    let key = RouteKey::new("rl", "POST", "/stack", &[(IdentityPart::Ip, tag)]);
    let pair = (Algorithm::SlidingWindow, Algorithm::Gcra);
    stacked_exactly(store, &key, pair, 60, Some(T0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_and_a_sentinel_primary_share_calls_exactly_too() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let scripts = |cluster: &RedisCluster| -> u64 {
        cluster.masters().iter().map(RedisServer::scripts_run).sum()
    };
    let before = scripts(&cluster);
    exactly_the_limit(&store, "cluster").await;
    let calls = scripts(&cluster) - before;
    assert!(
        calls < 500,
        "{calls} script calls for 5 x 1,000 concurrent checks"
    );
    println!("Cluster: 5 x 1,000 concurrent checks in {calls} script calls");

    let setup = tokio::task::spawn_blocking(SentinelSetup::start)
        .await
        .unwrap();
    let store = RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let before = setup.primary().scripts_run();
    exactly_the_limit(&store, "sentinel").await;
    let calls = setup.primary().scripts_run() - before;
    assert!(
        calls < 500,
        "{calls} script calls for 5 x 1,000 concurrent checks"
    );
    println!("Sentinel: 5 x 1,000 concurrent checks in {calls} script calls");
}
