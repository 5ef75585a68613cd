//! `ratelimit-admin bans list` and `bans lift` against bans the services started, on a
//! harness-started Redis and a 3-master Cluster: each ban is shown by the client's
//! fingerprint (never its address) with the route it covers, or every route for the
//! limiter's; lifting by fingerprint lets the client in again, on one route or all.

mod support;

use actix_web::{get, test, App, HttpResponse, Responder};
use ratelimit_runtime::{
    key::identity_fingerprint,
    policy::Ban,
    rate_limit,
    store::{RedisClusterStore, RedisStore, Store},
    RateLimiter, Window,
};
use support::{run_admin, RedisCluster, RedisServer};

#[rate_limit(
    limit = 1,
    window = "1h",
    algorithm = "fixed_window",
    identity = "ip",
    ban = "2 in 1h for 1h"
)]
#[get("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100, window = "1h", identity = "ip")]
#[get("/feed")]
async fn feed() -> impl Responder {
    HttpResponse::Ok()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Bans `ip` on `/export` (its own ban) and everywhere (the limiter's): two refusals start
/// both. Lists both by fingerprint, lifts the limiter's, then the rest.
async fn list_and_lift(store: impl Store, env: &[(&str, &str)], ip: &str) {
    let limiter = RateLimiter::new(store).ban(Ban::new(
        2,
        Window::from_secs(3600),
        Window::from_secs(1800),
    ));
    let app = test::init_service(App::new().service(export).service(feed).wrap(limiter)).await;
    let get = |uri: &'static str| {
        test::TestRequest::get()
            .uri(uri)
            .peer_addr(format!("{ip}:40000").parse().unwrap())
            .to_request()
    };
    assert_eq!(test::call_service(&app, get("/export")).await.status(), 200);
    for _ in 0..2 {
        assert_eq!(test::call_service(&app, get("/export")).await.status(), 429);
    }
    assert_eq!(test::call_service(&app, get("/feed")).await.status(), 429);

    let print = identity_fingerprint(&format!("rl:{{ban|ip:{ip}}}"), None);
    let listed = run_admin(env, &["bans", "list"], "");
    let out = text(&listed.stdout);
    assert!(listed.status.success(), "{out}{}", text(&listed.stderr));
    assert!(!out.contains(ip), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(&print)).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("GET /export") && l.contains("counted over 1h")),
        "{out}"
    );
    // The limiter's ban holds for half an hour from when it started (the command may have
    // been built meanwhile).
    let left = |line: &str| -> u64 {
        let (_, tail) = line.rsplit_once(", ").expect("time left");
        tail.trim_end_matches("s left").parse().expect("seconds")
    };
    let every = lines
        .iter()
        .find(|l| l.contains("every route"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!((1_500..=1_800).contains(&left(every)), "{out}");

    let lifted = run_admin(env, &["bans", "lift", &print, "--route", "every"], "");
    assert!(
        text(&lifted.stdout).contains("lifted 1 ban"),
        "{}",
        text(&lifted.stdout)
    );
    // The route's ban holds; the limiter's is lifted. (The flood shield may remember a ban
    // for up to a second.)
    actix_web::rt::time::sleep(std::time::Duration::from_millis(1_100)).await;
    assert_eq!(test::call_service(&app, get("/feed")).await.status(), 200);
    assert_eq!(test::call_service(&app, get("/export")).await.status(), 429);
    let lifted = run_admin(env, &["bans", "lift", &print], "");
    assert!(
        text(&lifted.stdout).contains("lifted 1 ban"),
        "{}",
        text(&lifted.stdout)
    );
    let none = run_admin(env, &["bans", "list"], "");
    assert!(
        text(&none.stdout).contains("no ban in force"),
        "{}",
        text(&none.stdout)
    );
    let wrong = run_admin(env, &["bans", "lift", ip], "");
    assert!(!wrong.status.success());
    assert!(
        text(&wrong.stderr).contains("no fingerprint"),
        "{}",
        text(&wrong.stderr)
    );
}

#[actix_web::test]
async fn bans_are_listed_by_fingerprint_and_lifted_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let store = RedisStore::builder(url.clone())
        .build()
        .await
        .expect("store");
    list_and_lift(store, &[("REDIS_URL", url.as_str())], "203.0.113.30").await;
}

#[actix_web::test]
async fn bans_are_listed_by_fingerprint_and_lifted_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .expect("cluster");
    let store = RedisClusterStore::builder(cluster.urls())
        .build()
        .await
        .expect("store");
    let nodes = cluster.urls().join(",");
    list_and_lift(
        store,
        &[("REDIS_CLUSTER_NODES", nodes.as_str())],
        "203.0.113.31",
    )
    .await;
}
