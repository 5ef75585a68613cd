//! Bans over HTTP, on a harness-started Redis and on the memory store, time injected: a
//! route's own `ban` and the limiter's (`RateLimiter::ban`) refuse a client refused too often
//! on every route they cover, with the ban's `Retry-After`, until the ban ends; a route that
//! counts failures only counts failures toward it; a ban is counted and logged with the
//! client's fingerprint, never its address. The stores' bans themselves are tests/bans.rs's.

mod support;

use std::{sync::OnceLock, time::Duration};

use actix_web::{get, post, test, App, HttpResponse, Responder};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use ratelimit_runtime::{
    clock::ManualClock,
    key::identity_fingerprint,
    policy::Ban,
    rate_limit,
    store::{MemoryStore, Store},
    RateLimiter, Window,
};
use support::{CapturedLog, RedisServer, T0};

/// One a minute; two refusals within ten minutes ban the address for an hour.
#[rate_limit(
    limit = 1,
    window = "1m",
    algorithm = "fixed_window",
    identity = "ip",
    ban = "2 in 10m for 1h"
)]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

/// One a minute, and no ban of its own.
#[rate_limit(limit = 1, window = "1m", algorithm = "fixed_window", identity = "ip")]
#[get("/query")]
async fn query() -> impl Responder {
    HttpResponse::Ok()
}

/// Plenty, and no ban of its own.
#[rate_limit(limit = 100, window = "1m", identity = "ip")]
#[get("/feed")]
async fn feed() -> impl Responder {
    HttpResponse::Ok()
}

/// Ten failures a minute; two failures within ten minutes ban for an hour. A request with
/// `?ok` succeeds, any other fails (401).
#[rate_limit(
    limit = 10,
    window = "1m",
    identity = "ip",
    count = "failures",
    ban = "2 in 10m for 1h"
)]
#[post("/login")]
async fn login(req: actix_web::HttpRequest) -> impl Responder {
    if req.query_string() == "ok" {
        HttpResponse::Ok().finish()
    } else {
        HttpResponse::Unauthorized().finish()
    }
}

/// A permit for each request that entered `/hold`, and one the test gives each to leave.
static ENTERED: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static LEAVE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

/// One request of an address at a time; one refusal bans it for an hour.
#[rate_limit(concurrency = 1, identity = "ip", ban = "1 in 1m for 1h")]
#[get("/hold")]
async fn hold() -> impl Responder {
    ENTERED.add_permits(1);
    LEAVE.acquire().await.expect("open").forget();
    HttpResponse::Ok()
}

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

/// Held by each test while it runs: the tests of one route count in one series.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `ratelimit_bans_total` of `route` counted so far: a snapshot takes what it reads, so
/// every snapshot is added to one running total.
fn bans_counted(route: &str) -> u64 {
    static TOTALS: std::sync::Mutex<Vec<(String, u64)>> = std::sync::Mutex::new(Vec::new());
    let mut totals = TOTALS.lock().unwrap();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let DebugValue::Counter(n) = value else {
            continue;
        };
        if key.key().name() != "ratelimit_bans_total" {
            continue;
        }
        for label in key.key().labels().filter(|l| l.key() == "route") {
            match totals.iter_mut().find(|(r, _)| r == label.value()) {
                Some((_, total)) => *total += n,
                None => totals.push((label.value().to_owned(), n)),
            }
        }
    }
    totals
        .iter()
        .find(|(r, _)| r == route)
        .map_or(0, |(_, total)| *total)
}

fn get(uri: &str, ip: &str) -> actix_web::test::TestRequest {
    test::TestRequest::get()
        .uri(uri)
        .peer_addr(format!("{ip}:40000").parse().unwrap())
}

async fn redis_store(server: &RedisServer) -> ratelimit_runtime::store::RedisStore {
    ratelimit_runtime::store::RedisStore::builder(server.url())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("store")
}

/// The route's ban: the second refusal starts it (`Retry-After: 3600`, counted, logged by
/// fingerprint); it holds past the limit's minute, on that route only, and ends after the
/// hour.
async fn a_route_ban(store: impl Store, ip: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(store).clock(clock.clone());
    let app = test::init_service(App::new().service(search).service(feed).wrap(limiter)).await;
    let call = |uri: &'static str| test::call_service(&app, get(uri, ip).to_request());
    let before = bans_counted("GET /search");
    let captured = CapturedLog::start(tracing::Level::WARN);
    assert_eq!(call("/search").await.status(), 200);
    let refused = call("/search").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers().get("retry-after").unwrap(), "60");
    let banned = call("/search").await;
    assert_eq!(banned.status(), 429);
    assert_eq!(banned.headers().get("retry-after").unwrap(), "3600");
    let logs = captured.text();
    let print = identity_fingerprint(&format!("rl:{{GET:/search|ip:{ip}}}"), None);
    assert!(
        logs.contains("client banned") && logs.contains(&print) && !logs.contains(ip),
        "{logs}"
    );
    assert_eq!(bans_counted("GET /search") - before, 1);
    // Past the limit's window the ban still holds; another route is not banned.
    clock.advance(Duration::from_secs(120));
    let still = call("/search").await;
    assert_eq!(still.status(), 429);
    assert_eq!(still.headers().get("retry-after").unwrap(), "3480");
    assert_eq!(call("/feed").await.status(), 200);
    clock.advance(Duration::from_secs(3_500));
    assert_eq!(call("/search").await.status(), 200, "the ban has ended");
}

/// The limiter's ban: refusals on `/query` ban the address on `/feed`, whose budget is
/// whole, until the ban ends; another address is not banned.
async fn the_limiters_ban(store: impl Store, ip: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(store).clock(clock.clone()).ban(Ban::new(
        3,
        Window::from_secs(600),
        Window::from_secs(900),
    ));
    let app = test::init_service(App::new().service(feed).service(query).wrap(limiter)).await;
    let call = |uri: &'static str, ip: &str| test::call_service(&app, get(uri, ip).to_request());
    let before = bans_counted("GET /query");
    assert_eq!(call("/query", ip).await.status(), 200);
    for _ in 0..2 {
        let refused = call("/query", ip).await;
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers().get("retry-after").unwrap(), "60");
    }
    assert_eq!(call("/feed", ip).await.status(), 200, "two refusals so far");
    let third = call("/query", ip).await;
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers().get("retry-after").unwrap(), "900");
    assert_eq!(bans_counted("GET /query") - before, 1);
    let elsewhere = call("/feed", ip).await;
    assert_eq!(elsewhere.status(), 429, "banned on every route");
    assert_eq!(elsewhere.headers().get("retry-after").unwrap(), "900");
    assert_eq!(call("/feed", "198.51.100.9").await.status(), 200);
    clock.advance(Duration::from_secs(300));
    let later = call("/feed", ip).await;
    assert_eq!(later.headers().get("retry-after").unwrap(), "600");
    clock.advance(Duration::from_secs(601));
    assert_eq!(call("/feed", ip).await.status(), 200, "the ban has ended");
}

/// Failures count toward the ban once they are failures (successes count nothing): two
/// failures, and the next request (a right password) is refused for the hour, with ten
/// failures a minute left.
async fn failures_ban(store: impl Store, ip: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(login).wrap(limiter)).await;
    let call = |uri: &'static str| {
        test::call_service(
            &app,
            test::TestRequest::post()
                .uri(uri)
                .peer_addr(format!("{ip}:40000").parse().unwrap())
                .to_request(),
        )
    };
    for _ in 0..3 {
        assert_eq!(call("/login?ok").await.status(), 200);
    }
    assert_eq!(call("/login").await.status(), 401);
    assert_eq!(call("/login?ok").await.status(), 200);
    assert_eq!(call("/login").await.status(), 401);
    let banned = call("/login?ok").await;
    assert_eq!(banned.status(), 429);
    assert_eq!(banned.headers().get("retry-after").unwrap(), "3600");
}

/// A ban's wait is the ban's on a route whose only limit is a concurrency limit (whose own
/// refusals wait a second at most).
#[actix_web::test]
async fn a_ban_on_a_concurrency_limit_waits_the_ban() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(hold).wrap(limiter)).await;
    let first = test::call_service(&app, get("/hold", "203.0.113.7").to_request());
    let second = async {
        // Once the first request holds the place.
        ENTERED.acquire().await.expect("open").forget();
        let refused = test::call_service(&app, get("/hold", "203.0.113.7").to_request()).await;
        LEAVE.add_permits(1);
        refused
    };
    let both = futures_util::future::join(first, second);
    let (first, refused) = tokio::time::timeout(Duration::from_secs(10), both)
        .await
        .expect("the first request entered and left");
    assert_eq!(first.status(), 200);
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers().get("retry-after").unwrap(), "3600");
}

/// A route's ban and the limiter's that start on one refusal are each counted.
#[actix_web::test]
async fn two_bans_that_start_together_are_each_counted() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(T0))
        .ban(Ban::new(2, Window::from_secs(600), Window::from_secs(900)));
    let app = test::init_service(App::new().service(search).wrap(limiter)).await;
    let before = bans_counted("GET /search");
    let call = || test::call_service(&app, get("/search", "203.0.113.8").to_request());
    assert_eq!(call().await.status(), 200);
    assert_eq!(call().await.status(), 429);
    let banned = call().await;
    assert_eq!(banned.headers().get("retry-after").unwrap(), "3600");
    assert_eq!(
        bans_counted("GET /search") - before,
        2,
        "the route's and the limiter's"
    );
}

#[actix_web::test]
async fn a_route_ban_on_memory() {
    a_route_ban(MemoryStore::new(), "203.0.113.1").await;
}

#[actix_web::test]
async fn a_route_ban_on_redis() {
    let server = RedisServer::start();
    a_route_ban(redis_store(&server).await, "203.0.113.2").await;
}

#[actix_web::test]
async fn the_limiters_ban_on_memory() {
    the_limiters_ban(MemoryStore::new(), "203.0.113.3").await;
}

#[actix_web::test]
async fn the_limiters_ban_on_redis() {
    let server = RedisServer::start();
    the_limiters_ban(redis_store(&server).await, "203.0.113.4").await;
}

#[actix_web::test]
async fn failures_ban_on_memory() {
    failures_ban(MemoryStore::new(), "203.0.113.5").await;
}

#[actix_web::test]
async fn failures_ban_on_redis() {
    let server = RedisServer::start();
    failures_ban(redis_store(&server).await, "203.0.113.6").await;
}
