//! What only Redis can do to a store: forget the script, restart, be down at startup,
//! stall, refuse a password, hold a key of the wrong type, migrate a slot, fail over (a
//! Cluster master, a Sentinel primary). Each
//! against a harness-started server (or cluster); none of these may turn into a decision or
//! need an app restart.
//!
//! The key, limits and checks most tests share are in this file; the tests are in the
//! modules below, by topic.

#[path = "../support/mod.rs"]
mod support;

mod busy_worker;
mod cluster;
mod cluster_failover;
mod coalescing;
mod exactness;
mod lifecycle;
mod reconnects;
mod scripts;
mod sentinel;

use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, Decision, Store, StoreError},
    Algorithm, IdentityPart, Limit, Window,
};
use support::{RedisServer, W};

fn login() -> RouteKey {
    RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Ip, "203.0.113.7")])
}

fn limits() -> [Limit; 2] {
    [
        Limit::new(5, Window::from_millis(W), Algorithm::SlidingLog),
        Limit::new(100, Window::from_millis(W), Algorithm::SlidingWindow),
    ]
}

async fn check(store: &dyn Store, now: u64) -> Result<Decision, StoreError> {
    let (key, limits) = (login(), limits());
    store
        .check(CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: Some(now),
        })
        .await
}

/// One check of `key` under `limits` on the store's clock.
async fn check_key(
    store: &dyn Store,
    key: &RouteKey,
    limits: &[Limit],
) -> Result<Decision, StoreError> {
    store
        .check(CheckRequest {
            key,
            limits,
            now_millis: None,
        })
        .await
}

/// Waits until `check` decides (5 s at most), silences `proxy` (its connections stay open and
/// forward nothing more), then checks until one decides again (10 s at most): how long that
/// took, and how many checks were given up or failed meanwhile. `check` is a caller's check
/// under its own timer, shorter than the store's timeout.
async fn decided_again_after_silence<F, Fut, T, E, G>(
    proxy: &support::Proxy,
    what: &str,
    mut check: F,
) -> (std::time::Duration, u32)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Result<T, E>, G>>,
{
    use std::time::{Duration, Instant};
    let reached = Instant::now();
    while !matches!(check().await, Ok(Ok(_))) {
        assert!(
            reached.elapsed() < Duration::from_secs(5),
            "{what} never reached through the proxy"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.freeze();
    let frozen = Instant::now();
    let mut given_up = 0;
    while !matches!(check().await, Ok(Ok(_))) {
        given_up += 1;
        assert!(
            frozen.elapsed() < Duration::from_secs(10),
            "{what} still undecided 10 s after its connection went silent ({given_up} checks given up or failed)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = frozen.elapsed();
    println!("decided again {took:?} after the connection went silent ({given_up} checks given up or failed)");
    (took, given_up)
}

/// Redis's count of connections it accepted so far.
fn connections_received(node: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut node.connection())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received")
}

/// Closes every client connection of the server but `admin`'s own.
fn kill_other_clients(admin: &mut redis::Connection) {
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(admin)
        .unwrap();
}
