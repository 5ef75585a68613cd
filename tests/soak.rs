//! Soak: traffic from ever-new clients on short windows (1 s and 2 s, real Redis `TIME`, no
//! injected clock, so every TTL is real), through the App over Redis and, side by side, over
//! the in-memory store. Afterwards Redis is back where it started (every key had a TTL:
//! `DBSIZE` 0 and `used_memory` at its starting level), and the process's resident memory
//! stayed flat (the flood shield and the memory store are bounded).
//!
//! A few seconds in the normal suite; minutes with `SOAK_SECS` (figures in tests/SOAK.md):
//!
//! ```text
//! SOAK_SECS=300 cargo test --release --test soak -- --nocapture
//! ```

mod support;

use ratelimit_runtime::settings::Failure;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    post,
    test::{self, TestRequest},
    App, HttpResponse, Responder,
};
use futures_util::{
    future::join_all,
    stream::{FuturesUnordered, StreamExt},
};
use ratelimit_runtime::{
    rate_limit,
    store::{MemoryStore, RedisStore, Store},
    RateLimiter,
};
use support::RedisServer;

/// Traffic seconds when `SOAK_SECS` is not set.
const DEFAULT_SECS: u64 = 5;

/// Requests per client burst: the limit is 3, so 2 are rejected (one by the store, the
/// next usually by the flood shield).
const BURST: usize = 5;
const LIMIT: usize = 3;

/// Client bursts in flight at a time.
const BURSTS_IN_FLIGHT: usize = 8;

/// Keys the memory store may hold: fewer than are live at any time during the soak, so
/// it sweeps and evicts all along.
const MEMORY_CAPACITY: usize = 1_000;

/// Rejected keys the flood shield may remember: filled within the first second.
const SHIELD_CAPACITY: usize = 500;

/// Longest key lifetime: the sliding window keeps its previous 2 s window.
const LONGEST_TTL: Duration = Duration::from_secs(4);

#[rate_limit(
    limit = 3,
    window = "1s",
    identity = "header:x-client",
    algorithm = "fixed_window",
    fail = "closed"
)]
#[post("/fixed_window")]
async fn fixed_window() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 3,
    window = "2s",
    identity = "header:x-client",
    algorithm = "sliding_window",
    fail = "closed"
)]
#[post("/sliding_window")]
async fn sliding_window() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 3,
    window = "1s",
    identity = "header:x-client",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/sliding_log")]
async fn sliding_log() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 3,
    window = "2s",
    identity = "header:x-client",
    algorithm = "gcra",
    fail = "closed"
)]
#[post("/gcra")]
async fn gcra() -> impl Responder {
    HttpResponse::Ok()
}

const ROUTES: [&str; 4] = ["/fixed_window", "/sliding_window", "/sliding_log", "/gcra"];
const SLIDING_LOG: usize = 2;

fn app(
    store: Arc<dyn Store>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    // The Redis store's timeout is generous (2 s, on its builder): the soak is about
    // memory; an overloaded machine must not turn into 503s.
    let limiter =
        RateLimiter::from_arc(store).failure(Failure::new().flood_shield_capacity(SHIELD_CAPACITY));
    App::new()
        .service(fixed_window)
        .service(sliding_window)
        .service(sliding_log)
        .service(gcra)
        .wrap(limiter)
}

/// This process's resident set size in bytes (`/proc/self/statm`: resident pages of 4 KiB).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages in statm");
    pages * 4096
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `DBSIZE` and `INFO memory`'s `used_memory`.
async fn redis_state(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
        .expect("used_memory in INFO memory");
    (keys, used)
}

/// Waits until Redis holds no key (every key had a TTL); returns how long that took and
/// `used_memory` then.
async fn drained(conn: &mut redis::aio::MultiplexedConnection) -> (Duration, u64) {
    let started = Instant::now();
    loop {
        let (keys, used) = redis_state(conn).await;
        if keys == 0 {
            return (started.elapsed(), used);
        }
        // Redis expires keys lazily and in a 10 Hz sampling cycle: allow it some slack.
        assert!(
            started.elapsed() < LONGEST_TTL + Duration::from_secs(20),
            "{keys} keys still in Redis {:?} after the traffic: a key without a TTL?",
            started.elapsed()
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One client's burst on its route, through both apps: how many each allowed.
async fn burst<S1, S2, B1, B2>(redis_app: &S1, memory_app: &S2, client: u64) -> (usize, [usize; 2])
where
    S1: Service<actix_http::Request, Response = ServiceResponse<B1>, Error = actix_web::Error>,
    S2: Service<actix_http::Request, Response = ServiceResponse<B2>, Error = actix_web::Error>,
    B1: MessageBody,
    B2: MessageBody,
{
    let route = (client % ROUTES.len() as u64) as usize;
    let request = || {
        TestRequest::post()
            .uri(ROUTES[route])
            .insert_header(("x-client", format!("soak-client-{client}")))
            .to_request()
    };
    let in_redis = join_all((0..BURST).map(|_| test::call_service(redis_app, request()))).await;
    let in_memory = join_all((0..BURST).map(|_| test::call_service(memory_app, request()))).await;
    let mut allowed = [0; 2];
    let statuses = in_redis
        .iter()
        .map(|r| (0, r.status()))
        .chain(in_memory.iter().map(|r| (1, r.status())));
    for (store, status) in statuses {
        match status.as_u16() {
            200 => allowed[store] += 1,
            429 => {}
            other => panic!("client {client} on {}: status {other}", ROUTES[route]),
        }
    }
    (route, allowed)
}

/// What one traffic run did.
#[derive(Default)]
struct Run {
    clients: u64,
    bursts: [usize; ROUTES.len()],
    /// Allowed requests per route, in Redis and in memory.
    allowed: [[usize; 2]; ROUTES.len()],
    took: Duration,
    /// RSS once `rss_from` had passed, and at the end.
    rss_baseline: u64,
    rss_end: u64,
    /// `(second, RSS)` once a second.
    rss_samples: Vec<(u64, u64)>,
    peak_redis_keys: u64,
    peak_memory_keys: usize,
}

/// Ever-new clients, one burst each, round-robin over the routes, for `duration`, starting
/// at client `first`; RSS is sampled once a second and its baseline taken at `rss_from`.
async fn traffic<S1, S2, B1, B2>(
    redis_app: &S1,
    memory_app: &S2,
    memory_store: &MemoryStore,
    conn: &mut redis::aio::MultiplexedConnection,
    first: u64,
    duration: Duration,
    rss_from: Duration,
) -> Run
where
    S1: Service<actix_http::Request, Response = ServiceResponse<B1>, Error = actix_web::Error>,
    S2: Service<actix_http::Request, Response = ServiceResponse<B2>, Error = actix_web::Error>,
    B1: MessageBody,
    B2: MessageBody,
{
    let mut run = Run::default();
    let started = Instant::now();
    let mut next_sample = Duration::ZERO;
    let mut pending = FuturesUnordered::new();
    let mut client = first;
    loop {
        let elapsed = started.elapsed();
        while elapsed < duration && pending.len() < BURSTS_IN_FLIGHT {
            pending.push(burst(redis_app, memory_app, client));
            client += 1;
        }
        let Some((route, counts)) = pending.next().await else {
            break;
        };
        // The sliding log is exact, and a burst is far shorter than its 1 s window.
        if route == SLIDING_LOG {
            for n in counts {
                assert!(
                    (1..=LIMIT).contains(&n),
                    "sliding log allowed {n} of a burst"
                );
            }
        }
        for (store, n) in counts.into_iter().enumerate() {
            run.allowed[route][store] += n;
        }
        run.bursts[route] += 1;
        if elapsed >= next_sample {
            let now = rss();
            run.rss_samples.push((elapsed.as_secs(), now));
            if run.rss_baseline == 0 && elapsed >= rss_from {
                run.rss_baseline = now;
            }
            run.peak_redis_keys = run.peak_redis_keys.max(redis_state(conn).await.0);
            run.peak_memory_keys = run.peak_memory_keys.max(memory_store.len());
            next_sample = elapsed + Duration::from_secs(1);
        }
    }
    run.took = started.elapsed();
    run.rss_end = rss();
    run.clients = client - first;
    run
}

#[actix_web::test]
async fn after_a_soak_every_key_expires_and_memory_stays_flat() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECS);
    let server = RedisServer::start();
    let mut conn = server.async_connection().await;
    let redis_store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let memory_store = Arc::new(MemoryStore::builder().capacity(MEMORY_CAPACITY).build());
    let redis_app = test::init_service(app(Arc::new(redis_store))).await;
    let memory_app = test::init_service(app(memory_store.clone())).await;

    // One second of the same traffic, then until its keys expired: Redis has the script
    // cached, the connections open and its tables sized for this load. That is the
    // starting level.
    let (keys_fresh, used_fresh) = redis_state(&mut conn).await;
    assert_eq!(keys_fresh, 0);
    let warm_up = traffic(
        &redis_app,
        &memory_app,
        &memory_store,
        &mut conn,
        0,
        Duration::from_secs(1),
        Duration::ZERO,
    )
    .await;
    let (_, used_before) = drained(&mut conn).await;
    println!(
        "Redis used_memory: {:.3} MiB fresh, {:.3} MiB after a 1 s warm-up ({} clients) and its expiry",
        mib(used_fresh),
        mib(used_before),
        warm_up.clients
    );

    // The soak. RSS is compared from a quarter of the way in (at least 1 s): by then the
    // flood shield and the memory store are full and the allocator holds what it keeps.
    let duration = Duration::from_secs(secs);
    let rss_from = (duration / 4).max(Duration::from_secs(1));
    let run = traffic(
        &redis_app,
        &memory_app,
        &memory_store,
        &mut conn,
        warm_up.clients,
        duration,
        rss_from,
    )
    .await;
    let requests = run.clients as usize * BURST * 2;
    let (keys_at_end, used_at_end) = redis_state(&mut conn).await;
    println!(
        "{secs} s soak: {} clients, {requests} requests ({:.0}/s) through both apps",
        run.clients,
        requests as f64 / run.took.as_secs_f64()
    );
    for (i, route) in ROUTES.iter().enumerate() {
        println!(
            "  {route}: {} bursts of {BURST}, allowed {} (redis) / {} (memory)",
            run.bursts[i], run.allowed[i][0], run.allowed[i][1]
        );
    }
    println!(
        "  Redis when the traffic stopped: {keys_at_end} keys (peak {}), used_memory {:.3} MiB",
        run.peak_redis_keys,
        mib(used_at_end),
    );
    println!(
        "  memory store: {} keys at the end, peak {} (capacity {MEMORY_CAPACITY})",
        memory_store.len(),
        run.peak_memory_keys
    );

    // Every algorithm decided in both stores: at least once and at most twice the limit
    // per burst (a fixed window may roll over mid-burst).
    for (i, route) in ROUTES.iter().enumerate() {
        for (store, name) in ["redis", "memory"].iter().enumerate() {
            let n = run.allowed[i][store];
            assert!(
                n >= run.bursts[i] && n <= run.bursts[i] * LIMIT * 2,
                "{route} in {name}: allowed {n} in {} bursts",
                run.bursts[i]
            );
        }
    }
    assert!(keys_at_end > 0, "the traffic wrote keys");
    assert!(
        run.peak_memory_keys <= MEMORY_CAPACITY && memory_store.len() <= MEMORY_CAPACITY,
        "the memory store held {} keys (peak {}), capacity {MEMORY_CAPACITY}",
        memory_store.len(),
        run.peak_memory_keys
    );

    // Every key had a TTL: Redis empties itself and is back at its starting level.
    let (drain, used_after) = drained(&mut conn).await;
    let left = used_after as i64 - used_before as i64;
    println!(
        "  Redis drained {drain:?} after the traffic: 0 keys, used_memory {:.3} MiB ({left:+} bytes from the starting level)",
        mib(used_after),
    );
    // What may stay: Redis keeps its key tables sized for the peak key count (two 8-byte
    // buckets per key, rounded up to a power of two), a few client buffers. A per-request
    // leak would scale with the request count instead.
    let allowance = 64 * 1024 + 32 * run.peak_redis_keys as i64;
    assert!(
        left < allowance,
        "used_memory {used_after} after the soak, {used_before} before: {left:+} bytes (allowed {allowance})"
    );

    let growth = run.rss_end as i64 - run.rss_baseline as i64;
    println!(
        "  RSS: {:.1} MiB at {rss_from:?}, {:.1} MiB at the end ({:+.1} MiB); over time: {}",
        mib(run.rss_baseline),
        mib(run.rss_end),
        growth as f64 / (1024.0 * 1024.0),
        run.rss_samples
            .iter()
            .step_by(run.rss_samples.len().div_ceil(12).max(1))
            .map(|(s, b)| format!("{s}s {:.1}", mib(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Flat: an unbounded cache grows with the client count (tens of MiB over minutes).
    assert!(
        growth < 8 * 1024 * 1024,
        "RSS grew by {:.1} MiB after {rss_from:?}",
        growth as f64 / (1024.0 * 1024.0)
    );
}
