//! Concurrent checks of one key in one process share one script call, and the count stays
//! exact: 1,000 at once under a limit of 100 pass exactly 100, for every algorithm, in far
//! fewer calls than checks; a sliding log holds one entry per passed request.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, RedisStore, Store},
    Algorithm, IdentityPart, Limit, Window,
};

use crate::support::{RedisServer, T0};

async fn thousand_at_once(
    store: &RedisStore,
    key: &RouteKey,
    limit: Limit,
    now: Option<u64>,
) -> Vec<(bool, u32)> {
    let limits = [limit];
    join_all((0..1_000).map(|_| {
        store.check(CheckRequest {
            key,
            limits: &limits,
            now_millis: now,
        })
    }))
    .await
    .into_iter()
    .map(|checked| {
        let decision = checked.expect("a decision");
        (decision.allowed, decision.limits[0].remaining)
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_checks_of_one_key_pass_exactly_the_limit_in_few_calls() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let store = RedisStore::builder(server.url())
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .await
        .unwrap();
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
