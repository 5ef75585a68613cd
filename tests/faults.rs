//! Faults under traffic, through the HTTP path (an App with `#[rate_limit]` routes and a
//! `RateLimiter` over a Redis store, driven by actix-web's test service): Redis killed,
//! restarted empty, stalled, and a cluster master killed. No request waits much longer than
//! the store timeout, fail-closed routes answer 503 while no decision can be made, fail-open
//! routes pass, and once Redis answers again the app decides again by itself, exactly.
//!
//! The tests of this file run one at a time: each keeps 32 requests in flight against its
//! own servers, and the latency bounds are about the limiter, not about CPU contention
//! between them.

mod support;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get, post,
    test::{self, TestRequest},
    App, HttpResponse, Responder,
};
use futures_util::{
    future::join_all,
    stream::{FuturesUnordered, StreamExt},
};
use ratelimit_runtime::{
    clock::ManualClock,
    key::RouteKey,
    rate_limit,
    store::{RedisClusterStore, RedisStore, Store},
    IdentityPart, RateLimiter,
};
use support::{key_slot, serves_slot_zero, CapturedLog, RedisCluster, RedisServer, T0};

/// The limit of both routes.
const LIMIT: usize = 5;

/// The store's and the limiter's timeout (the default).
const TIMEOUT: Duration = Duration::from_millis(50);

/// What every request must stay under: the timeout plus a margin for a shared 2-core
/// machine.
const BOUND: Duration = Duration::from_millis(250);

/// Requests kept in flight by the traffic loops.
const IN_FLIGHT: usize = 32;

/// The share of requests that must be decided while Redis is healthy: on a loaded machine
/// a healthy Redis can still miss a 50 ms deadline now and then.
const HEALTHY: f64 = 0.95;

/// One test at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[rate_limit(
    limit = 5,
    window = "1m",
    identity = "header:x-client",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/closed")]
async fn closed_route() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 5,
    window = "1m",
    identity = "header:x-client",
    algorithm = "gcra",
    fail = "open"
)]
#[get("/open")]
async fn open_route() -> impl Responder {
    HttpResponse::Ok()
}

fn app(
    store: impl Store,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    // The clock is injected (mid-window) so no window rolls over during a test; the faults
    // are real.
    let limiter = RateLimiter::new(store)
        .clock(ManualClock::at(T0 + 30_000))
        .timeout(TIMEOUT);
    App::new()
        .service(closed_route)
        .service(open_route)
        .wrap(limiter)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Closed,
    Open,
}

impl Route {
    fn request(self, client: &str) -> TestRequest {
        let req = match self {
            Route::Closed => TestRequest::post().uri("/closed"),
            Route::Open => TestRequest::get().uri("/open"),
        };
        req.insert_header(("x-client", client.to_owned()))
    }

    /// The hash-tagged key the middleware builds for `client` on this route.
    fn key(self, client: &str) -> RouteKey {
        let (method, path) = match self {
            Route::Closed => ("POST", "/closed"),
            Route::Open => ("GET", "/open"),
        };
        RouteKey::new(
            "rl",
            method,
            path,
            &[(IdentityPart::Header("x-client"), client)],
        )
    }
}

/// One request of a traffic loop.
#[derive(Debug, Clone)]
struct Sample {
    route: Route,
    /// Which group of clients it belongs to (test-specific).
    group: usize,
    sent: Instant,
    latency: Duration,
    status: u16,
    /// Whether the response carries a decision (`X-RateLimit-Limit`): a 200 without one on
    /// the open route failed open.
    decided: bool,
}

impl Sample {
    fn done(&self) -> Instant {
        self.sent + self.latency
    }

    /// The only answers a fresh client can get: a decided 200, a fail-open 200 on the open
    /// route, a 503 on the closed route.
    fn assert_answer(&self, what: &str) {
        let ok = match self.route {
            Route::Open => self.status == 200,
            Route::Closed => (self.status == 200 && self.decided) || self.status == 503,
        };
        assert!(ok, "{what}: {self:?}");
    }
}

async fn send<S, B>(app: &S, route: Route, client: String, group: usize) -> Sample
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let sent = Instant::now();
    let res = test::call_service(app, route.request(&client).to_request()).await;
    Sample {
        route,
        group,
        sent,
        latency: sent.elapsed(),
        status: res.status().as_u16(),
        decided: res.headers().contains_key("x-ratelimit-limit"),
    }
}

/// Keeps [`IN_FLIGHT`] requests in flight, each from `next(n)` (route, client, group), until
/// `stop` (shown each answered request) says so; returns every request once all have been
/// answered.
async fn traffic<S, B>(
    app: &S,
    mut next: impl FnMut(u64) -> (Route, String, usize),
    mut stop: impl FnMut(Option<&Sample>) -> bool,
) -> Vec<Sample>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut pending = FuturesUnordered::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut n = 0;
    let mut stopped = false;
    loop {
        stopped = stopped || stop(samples.last());
        while !stopped && pending.len() < IN_FLIGHT {
            let (route, client, group) = next(n);
            n += 1;
            pending.push(send(app, route, client, group));
        }
        match pending.next().await {
            Some(sample) => samples.push(sample),
            None => return samples,
        }
    }
}

/// Fresh clients, alternating between the closed and the open route.
fn fresh_clients(tag: &str) -> impl FnMut(u64) -> (Route, String, usize) + '_ {
    move |n| {
        let route = if n % 2 == 0 {
            Route::Closed
        } else {
            Route::Open
        };
        (route, format!("{tag}-{n}"), 0)
    }
}

/// Asserts every request stayed under [`BOUND`]; prints and returns the slowest.
fn assert_bounded(samples: &[Sample], what: &str) -> Duration {
    let max = samples.iter().map(|s| s.latency).max().unwrap_or_default();
    println!(
        "{what}: {} requests, slowest {max:?} (timeout {TIMEOUT:?}, bound {BOUND:?})",
        samples.len()
    );
    assert!(
        max < BOUND,
        "{what}: a request took {max:?}, more than {BOUND:?} with a {TIMEOUT:?} timeout"
    );
    max
}

/// Asserts that at least [`HEALTHY`] of `samples` (requests to a healthy Redis) were decided.
fn assert_mostly_decided<'a>(samples: impl IntoIterator<Item = &'a Sample>, what: &str) {
    let (mut total, mut decided) = (0, 0);
    for s in samples {
        total += 1;
        decided += usize::from(s.decided);
    }
    println!("{what}: {decided} of {total} decided");
    assert!(total > 0, "{what}: no requests");
    assert!(
        decided as f64 >= HEALTHY * total as f64,
        "{what}: only {decided} of {total} requests were decided"
    );
}

/// Polls with fresh clients until `route` decides again (200 with a decision); returns how
/// long that took. Panics after 10 s.
async fn recovery<S, B>(app: &S, route: Route, tag: &str) -> Duration
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let started = Instant::now();
    for attempt in 0.. {
        let sample = send(app, route, format!("{tag}-probe-{attempt}"), 0).await;
        if sample.status == 200 && sample.decided {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{route:?} did not decide again within 10 s (last answer {sample:?})"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

/// Sends `2 * LIMIT` concurrent requests for one fresh client on `route` and asserts exactly
/// `LIMIT` are allowed and the rest rejected. A round with an undecided answer (a healthy
/// Redis missing the deadline on a loaded machine) is repeated with another client.
async fn assert_exact<S, B>(app: &S, route: Route, client: &str)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    for round in 0..3 {
        let client = format!("{client}-{round}");
        let samples = join_all((0..2 * LIMIT).map(|_| send(app, route, client.clone(), 0))).await;
        if samples.iter().any(|s| !s.decided) {
            println!("{route:?} `{client}`: an undecided answer, again with another client");
            continue;
        }
        let allowed = samples.iter().filter(|s| s.status == 200).count();
        let rejected = samples.iter().filter(|s| s.status == 429).count();
        assert_eq!(
            (allowed, rejected),
            (LIMIT, LIMIT),
            "{route:?} for `{client}`: statuses {:?}",
            samples.iter().map(|s| s.status).collect::<Vec<_>>()
        );
        return;
    }
    panic!("{route:?}: three rounds with undecided answers after recovery");
}

async fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let mut conn = server.async_connection().await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[actix_web::test]
async fn redis_killed_under_traffic_fails_closed_in_time_passes_open_then_recovers_exactly() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    // Killed 200 ms into the traffic, from another thread, with requests in flight.
    let killed: Arc<Mutex<Option<(Instant, Instant)>>> = Arc::default();
    let killer = thread::spawn({
        let killed = Arc::clone(&killed);
        let mut server = server;
        move || {
            thread::sleep(Duration::from_millis(200));
            let started = Instant::now();
            server.kill();
            *killed.lock().unwrap() = Some((started, Instant::now()));
            server
        }
    });
    // 600 ms of traffic after the kill.
    let outage_over = || {
        killed
            .lock()
            .unwrap()
            .is_some_and(|(_, done)| done.elapsed() > Duration::from_millis(600))
    };
    let samples = traffic(&app, fresh_clients("kill"), |_| outage_over()).await;
    let server = killer.join().unwrap();
    let (kill_started, kill_done) = killed.lock().unwrap().unwrap();

    assert_bounded(&samples, "redis killed under traffic");
    let before: Vec<_> = samples.iter().filter(|s| s.done() < kill_started).collect();
    let across = samples
        .iter()
        .filter(|s| s.sent < kill_started && s.done() > kill_done)
        .count();
    let after: Vec<_> = samples.iter().filter(|s| s.sent > kill_done).collect();
    println!(
        "answered before the kill {}, in flight across it {across}, sent after it {}",
        before.len(),
        after.len()
    );
    assert!(before.len() >= 2 * IN_FLIGHT && after.len() >= 2 * IN_FLIGHT);
    for s in &samples {
        s.assert_answer("redis killed");
    }
    assert_mostly_decided(before, "before the kill");
    for s in &after {
        assert!(!s.decided, "a decision without Redis: {s:?}");
    }

    // The 503 says when to come back, in problem+json.
    let res = test::call_service(&app, Route::Closed.request("outage").to_request()).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers().get("retry-after").unwrap(), "1");
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "application/problem+json"
    );

    let mut server = actix_web::rt::task::spawn_blocking(move || {
        let mut server = server;
        server.start_again();
        server
    })
    .await
    .unwrap();
    let took = recovery(&app, Route::Closed, "back").await;
    println!("decisions again {took:?} after Redis came back");
    assert_exact(&app, Route::Closed, "after-kill-closed").await;
    assert_exact(&app, Route::Open, "after-kill-open").await;
    server.kill();
}

#[actix_web::test]
async fn a_redis_restart_between_requests_fails_no_request_and_reloads_the_script() {
    let _serial = SERIAL.lock().await;
    let mut server = RedisServer::start();
    // Generous: this test is about the retry after a dropped connection and the NOSCRIPT
    // fallback (without them the first request after a restart fails at once, whatever the
    // timeout); the latency bound is the other tests' business.
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::new(store)
        .clock(ManualClock::at(T0 + 30_000))
        .timeout(Duration::from_secs(1));
    let app = test::init_service(
        App::new()
            .service(closed_route)
            .service(open_route)
            .wrap(limiter),
    )
    .await;

    let mut requests = 0;
    for round in 0..4 {
        if round > 0 {
            server = actix_web::rt::task::spawn_blocking(move || {
                server.restart();
                server
            })
            .await
            .unwrap();
        }
        // The same client spends the whole budget every round: it is allowed again only
        // because the restarted Redis is empty, so each 200 is a decision of the new server.
        for k in 0..LIMIT {
            for route in [Route::Closed, Route::Open] {
                let res = test::call_service(&app, route.request("steady").to_request()).await;
                requests += 1;
                assert_eq!(res.status(), 200, "round {round}, request {k}, {route:?}");
                let remaining = res.headers().get("x-ratelimit-remaining");
                assert_eq!(
                    remaining.and_then(|v| v.to_str().ok()),
                    Some((LIMIT - 1 - k).to_string().as_str()),
                    "round {round}, request {k}, {route:?}"
                );
            }
        }
        let over = format!("over-{round}");
        for k in 0..=LIMIT {
            let res = test::call_service(&app, Route::Closed.request(&over).to_request()).await;
            requests += 1;
            let expected = if k < LIMIT { 200 } else { 429 };
            assert_eq!(
                res.status(),
                expected,
                "round {round}, request {k} of a client over its limit"
            );
        }
        // The first call of each script on each server met NOSCRIPT and fell back to EVAL,
        // once per script: two here, the sliding log's and GCRA's (one limit each).
        let evals = command_calls(&server, "eval").await;
        assert_eq!(evals, 2, "round {round}: EVAL calls on this server");
    }
    println!("{requests} requests across 3 Redis restarts, none failed");
    server.kill();
}

/// Traffic on fresh clients while `stall` (run on its own thread) stalls Redis for
/// `stall_for`; then recovery and exact decisions.
async fn stalled<S, B>(
    app: &S,
    stall_for: Duration,
    stall: impl FnOnce() + Send + 'static,
    tag: &str,
) where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let stalled_at = Instant::now();
    let staller = thread::spawn(stall);
    // Requests sent in the first 50 ms may still be answered before the stall begins, and
    // traffic stops 300 ms before it ends.
    let settled = stalled_at + Duration::from_millis(50);
    let traffic_for = stall_for - Duration::from_millis(300);
    let samples = traffic(app, fresh_clients(tag), |_| {
        stalled_at.elapsed() > traffic_for
    })
    .await;
    assert_bounded(&samples, tag);
    for s in &samples {
        s.assert_answer(tag);
    }
    let late: Vec<_> = samples.iter().filter(|s| s.sent > settled).collect();
    assert!(
        late.len() > 4 * IN_FLIGHT,
        "{tag}: too little traffic during the stall"
    );
    for s in late {
        assert!(!s.decided, "{tag}: a decision from a stalled Redis: {s:?}");
    }
    staller.join().unwrap();
    let took = recovery(app, Route::Closed, tag).await;
    println!("{tag}: decisions again {took:?} after the stall's traffic stopped");
    assert_exact(app, Route::Closed, &format!("{tag}-after-closed")).await;
    assert_exact(app, Route::Open, &format!("{tag}-after-open")).await;
}

/// `RateLimiter::timeout` replaces the store's own timeout, longer or shorter (found by
/// review: the Redis store's 50 ms still cut every call short under a limiter's 2 s, so a
/// remote Redis answering in 300 ms failed every request closed).
#[actix_web::test]
async fn the_limiters_timeout_replaces_the_stores_own_longer_or_shorter() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let pause = |millis: u64| {
        let mut admin = server.connection();
        thread::spawn(move || {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(millis)
                .arg("ALL")
                .query(&mut admin)
                .expect("CLIENT PAUSE");
        })
        .join()
        .unwrap();
    };
    for (store_timeout, limiter_timeout, expected) in [
        (TIMEOUT, Duration::from_secs(2), 200),
        (Duration::from_secs(2), TIMEOUT, 503),
    ] {
        let store = RedisStore::builder(server.url())
            .timeout(store_timeout)
            .build()
            .await
            .unwrap();
        let limiter = RateLimiter::new(store)
            .clock(ManualClock::at(T0 + 30_000))
            .timeout(limiter_timeout);
        let app = test::init_service(App::new().service(closed_route).wrap(limiter)).await;
        let client = format!("replaces-{}", limiter_timeout.as_millis());
        let request = || {
            TestRequest::post()
                .uri("/closed")
                .insert_header(("x-client", client.clone()))
                .to_request()
        };
        assert_eq!(test::call_service(&app, request()).await.status(), 200);
        pause(300);
        let started = Instant::now();
        let status = test::call_service(&app, request()).await.status();
        let waited = started.elapsed();
        assert_eq!(
            status.as_u16(),
            expected,
            "store {store_timeout:?}, limiter {limiter_timeout:?}: answered after {waited:?}"
        );
        if expected == 503 {
            assert!(waited < BOUND, "waited {waited:?}");
        }
        // Let the pause end before the next round.
        thread::sleep(Duration::from_millis(350));
    }
}

/// Found by review (medium): a limiter timeout longer than a cluster connection's response
/// timeout (the longer of its connect timeout and its own, 1 s here) left a check that timed
/// out in redis-rs's retry queue, sent again with the next request and counted twice, and
/// the store retried it once more itself. A cluster check now ends at the longer of those two
/// timeouts, before its connection's reply timeout, and is not retried: Redis busy for 1.5 s
/// under a 4 s limiter timeout answers 503 after about 1 s, and the request counts once.
#[actix_web::test]
async fn a_cluster_check_past_its_connections_response_timeout_ends_once_in_time() {
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::new(store)
        .clock(ManualClock::at(T0 + 30_000))
        .timeout(Duration::from_secs(4));
    let app = test::init_service(App::new().service(closed_route).wrap(limiter)).await;
    let request = || {
        TestRequest::post()
            .uri("/closed")
            .insert_header(("x-client", "past-response-timeout"))
            .to_request()
    };
    let remaining = |response: &ServiceResponse<_>| {
        response
            .headers()
            .get("x-ratelimit-remaining")
            .expect("X-RateLimit-Remaining")
            .to_str()
            .unwrap()
            .to_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let response = test::call_service(&app, request()).await;
        if response.status() == 200 {
            break response;
        }
        assert!(Instant::now() < deadline, "the cluster never answered");
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(remaining(&first), "4");
    for master in cluster.masters() {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1500)
            .arg("ALL")
            .query(&mut master.connection())
            .unwrap();
    }
    let started = Instant::now();
    let second = test::call_service(&app, request()).await;
    let waited = started.elapsed();
    assert_eq!(second.status(), 503);
    assert!(waited < Duration::from_millis(1_400), "waited {waited:?}");
    thread::sleep(Duration::from_millis(800));
    // The refused request was run once when Redis woke: 4, then 3 left, then 2.
    let third = test::call_service(&app, request()).await;
    assert_eq!(remaining(&third), "2");
}

#[actix_web::test]
async fn a_stalled_redis_never_holds_a_request_longer_than_the_timeout() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let store = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    // Every client paused for 2 s: commands queue up unanswered.
    let mut admin = server.connection();
    stalled(
        &app,
        Duration::from_millis(2000),
        move || {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(2000)
                .arg("ALL")
                .query(&mut admin)
                .expect("CLIENT PAUSE");
        },
        "client-pause",
    )
    .await;

    // The server itself busy for 1 s.
    let mut admin = server.connection();
    stalled(
        &app,
        Duration::from_millis(1000),
        move || {
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(1)
                .query(&mut admin)
                .expect("DEBUG SLEEP");
        },
        "debug-sleep",
    )
    .await;
}

#[actix_web::test]
async fn a_killed_cluster_master_is_replaced_and_the_limiter_decides_again_without_a_restart() {
    let _serial = SERIAL.lock().await;
    let captured = CapturedLog::start(tracing::Level::INFO);

    let cluster = actix_web::rt::task::spawn_blocking(|| RedisCluster::start_with_replicas(3, 1))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    // Clients whose keys live on master 0 (slots 0..=5460: the harness splits the slots
    // evenly) are group 0; the others, on the surviving masters, group 1.
    let group_of =
        |route: Route, client: &str| usize::from(key_slot(route.key(client).as_str()) > 5460);
    let mut conn = cluster.masters()[1].connection();
    for client in ["a", "failover-1", "failover-2"] {
        let key = Route::Open.key(client);
        let by_redis: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key.as_str())
            .query(&mut conn)
            .unwrap();
        assert_eq!(key_slot(key.as_str()), by_redis, "{key}");
    }
    let probe = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|c| group_of(Route::Closed, c) == 0)
        .unwrap();
    assert_eq!(
        send(&app, Route::Closed, probe.clone(), 0).await.status,
        200
    );
    let pattern = format!("{}*", Route::Closed.key(&probe));
    let on_master_0: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query(&mut cluster.masters()[0].connection())
        .unwrap();
    assert_eq!(on_master_0.len(), 1, "group 0's keys live on master 0");

    #[derive(Default)]
    struct Timeline {
        kill: Option<(Instant, Instant)>,
        /// When the last check that found the replica not yet promoted began: the replica
        /// was still a replica then (a check that began earlier than the promotion can
        /// still see it, so the end of a failed check proves nothing).
        unpromoted: Option<Instant>,
        promoted: Option<Instant>,
    }
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let killer = thread::spawn({
        let timeline = Arc::clone(&timeline);
        let mut cluster = cluster;
        move || {
            thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            cluster.kill_master(0);
            timeline.lock().unwrap().kill = Some((started, Instant::now()));
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let checked = Instant::now();
                if serves_slot_zero(&cluster.replicas()[0]) {
                    break;
                }
                timeline.lock().unwrap().unpromoted = Some(checked);
                assert!(Instant::now() < deadline, "the replica was never promoted");
                thread::sleep(Duration::from_millis(20));
            }
            timeline.lock().unwrap().promoted = Some(Instant::now());
            cluster
        }
    });

    // Fresh clients of both groups on both routes, until four seconds after the promotion
    // (and after the limiter decided again for group 0).
    let mut candidate = 0u64;
    let mut decided_again: Option<Instant> = None;
    let samples = traffic(
        &app,
        |n| {
            let group = (n / 2 % 2) as usize;
            let route = if n % 2 == 0 {
                Route::Closed
            } else {
                Route::Open
            };
            loop {
                candidate += 1;
                let client = format!("failover-{candidate}");
                if group_of(route, &client) == group {
                    return (route, client, group);
                }
            }
        },
        |last| {
            let Some(promoted) = timeline.lock().unwrap().promoted else {
                return false;
            };
            if let Some(s) = last.filter(|s| s.group == 0 && s.sent > promoted && s.decided) {
                decided_again.get_or_insert(s.done());
            }
            (decided_again.is_some() && promoted.elapsed() > Duration::from_secs(4))
                || promoted.elapsed() > Duration::from_secs(15)
        },
    )
    .await;
    let cluster = killer.join().unwrap();
    let (kill_started, kill_done, unpromoted, promoted) = {
        let t = timeline.lock().unwrap();
        let (started, done) = t.kill.unwrap();
        (started, done, t.unpromoted.unwrap(), t.promoted.unwrap())
    };
    println!("replica promoted {:?} after the kill", promoted - kill_done);

    assert_bounded(&samples, "cluster master killed");
    for group in 0..2 {
        let mut counts = BTreeMap::<(&str, u16, bool), usize>::new();
        for s in samples.iter().filter(|s| s.group == group) {
            let route = if s.route == Route::Closed {
                "closed"
            } else {
                "open"
            };
            *counts.entry((route, s.status, s.decided)).or_default() += 1;
        }
        let failed: Vec<_> = samples
            .iter()
            .filter(|s| s.group == group && !s.decided)
            .collect();
        let window = failed
            .iter()
            .map(|s| s.sent)
            .min()
            .zip(failed.iter().map(|s| s.done()).max());
        println!(
            "group {group}: (route, status, decided) counts {counts:?}; undecided from {:?} to {:?} after the kill",
            window.map(|(first, _)| first.saturating_duration_since(kill_done)),
            window.map(|(_, last)| last.saturating_duration_since(kill_done)),
        );
    }

    // Fresh clients, so the only answers are 200 and, on the closed route during the
    // outage, 503: never a 500, and never a MOVED/ASK/CROSSSLOT reply made into anything.
    for s in &samples {
        s.assert_answer("cluster master killed");
    }
    // The killed master's slots are down from the kill until the replica's promotion (known
    // to be later than the start of the last check that found it still a replica).
    let down: Vec<_> = samples
        .iter()
        .filter(|s| s.group == 0 && s.sent > kill_done && s.done() < unpromoted)
        .collect();
    assert!(down.len() > 4 * IN_FLIGHT, "traffic during the outage");
    for s in down {
        assert!(
            !s.decided,
            "a decision for a slot without a master, sent {:?} after the kill, answered {:?} \
             before the replica was last seen unpromoted: {s:?}",
            s.sent - kill_done,
            unpromoted - s.done(),
        );
    }
    // Before the kill, and for the surviving masters' slots until the other masters mark the
    // dead one failed (cluster-node-timeout, 2 s), requests are decided. After that, with the
    // default cluster-require-full-coverage, every node refuses with CLUSTERDOWN until the
    // replica is promoted.
    assert_mostly_decided(
        samples.iter().filter(|s| s.done() < kill_started),
        "before the kill",
    );
    assert_mostly_decided(
        samples.iter().filter(|s| {
            s.group == 1 && s.sent > kill_done && s.done() < kill_done + Duration::from_millis(1500)
        }),
        "surviving masters, first 1.5 s after the kill",
    );
    // From two seconds after the promotion, everything is decided again.
    assert_mostly_decided(
        samples
            .iter()
            .filter(|s| s.sent > promoted + Duration::from_secs(2)),
        "from 2 s after the promotion",
    );
    let decided_again = decided_again.expect("group 0 decided again after the promotion");
    println!(
        "group 0 decided again {:?} after the promotion was seen",
        decided_again.saturating_duration_since(promoted)
    );

    let logs = captured.text();
    let errors: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("rate-limit store error"))
        .collect();
    assert!(!errors.is_empty(), "store errors are logged");
    for line in &errors {
        for redirect in ["MOVED", "ASK ", "CROSSSLOT", "TRYAGAIN"] {
            assert!(
                !line.contains(redirect),
                "`{redirect}` reached the request path: {line}"
            );
        }
    }
    let timeouts = errors
        .iter()
        .filter(|l| l.contains("store timeout"))
        .count();
    println!(
        "{} store errors logged, {timeouts} of them timeouts",
        errors.len()
    );

    // Exact decisions on the promoted replica for fresh clients, with no app restart.
    for route in [Route::Closed, Route::Open] {
        let fresh = (0..)
            .map(|i| format!("after-failover-{i}"))
            .find(|c| group_of(route, &format!("{c}-0")) == 0)
            .unwrap();
        assert_exact(&app, route, &fresh).await;
    }

    // No node ever answered CROSSSLOT.
    for node in cluster.masters().iter().skip(1).chain(cluster.replicas()) {
        let stats: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut node.connection())
            .unwrap();
        assert!(
            !stats.contains("CROSSSLOT"),
            "a node answered CROSSSLOT:\n{stats}"
        );
    }
}
