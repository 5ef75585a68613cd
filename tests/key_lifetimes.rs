//! Every algorithm's key lives exactly as long as the algorithm reads it, under the store's
//! own clock (Redis `TIME`), which is what production runs on: the fixed window to its end,
//! the sliding window to the end of the next window (it is read there as the previous one),
//! the sliding log a window past its newest entry, the GCRA to its arrival time. A key that
//! expires earlier undercounts; one that lives longer only costs memory, and is caught too.

mod support;

use std::time::Duration;

use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, RedisStore, Store},
    Algorithm, IdentityPart, Limit, Window,
};
use support::RedisServer;

/// Redis's clock, in milliseconds.
fn redis_now(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1000 + micros / 1000
}

/// The TTL a key gets when its first request is counted at `now` (ms), for `limit`.
fn expected_ttl(limit: &Limit, now: u64) -> u64 {
    let window = limit.window().as_millis();
    let into_window = now % window;
    match limit.algorithm() {
        Algorithm::FixedWindow => window - into_window,
        Algorithm::SlidingWindow => 2 * window - into_window,
        Algorithm::SlidingLog => window,
        Algorithm::Gcra => window / u64::from(limit.max()),
        other => panic!("no expected lifetime for {other}"),
    }
}

/// Counts one request under the store's clock and returns each limit's key TTL with the
/// range the algorithm allows for it, retrying when the check straddles a window boundary
/// (the expected TTL jumps there).
async fn lifetimes(server: &RedisServer, store: &RedisStore, limits: &[Limit], id: &str) {
    let mut con = server.connection();
    for attempt in 0.. {
        assert!(attempt < 20, "every attempt straddled a window boundary");
        let key = RouteKey::new(
            "rl",
            "GET",
            "/lifetime",
            &[(IdentityPart::Ip, &format!("{id}.{attempt}"))],
        );
        let before = redis_now(&mut con);
        let decision = store
            .check(CheckRequest {
                key: &key,
                limits,
                now_millis: None,
            })
            .await
            .expect("a decision");
        assert!(decision.allowed);
        let ttls: Vec<i64> = limits
            .iter()
            .map(|limit| {
                redis::cmd("PTTL")
                    .arg(key.limit_key(limit))
                    .query(&mut con)
                    .unwrap()
            })
            .collect();
        let after = redis_now(&mut con);
        let same_window = limits.iter().all(|l| {
            let w = l.window().as_millis();
            before / w == after / w
        });
        if !same_window {
            continue;
        }
        for (limit, ttl) in limits.iter().zip(ttls) {
            // The script ran at some `t` in [before, after], and the TTL was read later
            // still: it is the algorithm's lifetime at `t`, less at most `after - before`.
            let longest = expected_ttl(limit, before) as i64 + 1;
            let shortest = expected_ttl(limit, after) as i64 - (after - before) as i64 - 1;
            assert!(
                (shortest..=longest).contains(&ttl),
                "{limit}: TTL {ttl} ms, expected {shortest}..={longest}"
            );
        }
        return;
    }
}

#[tokio::test]
async fn every_algorithms_key_lives_exactly_as_long_as_it_is_read() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("store");
    let window = Window::from_secs(20);
    let alone = [
        Limit::new(5, window, Algorithm::FixedWindow),
        Limit::new(5, window, Algorithm::SlidingWindow),
        Limit::new(5, window, Algorithm::SlidingLog),
        Limit::new(10, window, Algorithm::Gcra),
    ];
    for (i, limit) in alone.iter().enumerate() {
        lifetimes(
            &server,
            &store,
            std::slice::from_ref(limit),
            &format!("alone{i}"),
        )
        .await;
    }
    // The same lifetimes when the limits are stacked (the general script).
    let stacked = [
        Limit::new(5, Window::from_secs(20), Algorithm::FixedWindow),
        Limit::new(5, Window::from_secs(30), Algorithm::SlidingWindow),
        Limit::new(5, Window::from_secs(40), Algorithm::SlidingLog),
        Limit::new(10, Window::from_secs(50), Algorithm::Gcra),
    ];
    lifetimes(&server, &store, &stacked, "stacked").await;
}
