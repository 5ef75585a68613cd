//! Store throughput and latency, printed as numbers: key building, then checks per second
//! per algorithm on the in-memory store and on Redis, each Redis figure next to a plain
//! `INCR` measured in the same run on the same connection type (the one-round-trip floor).
//!
//! `cargo bench -p ratelimit-runtime --bench store`. The Redis part starts its own
//! `redis-server` on a free loopback port (skipped when the binary is missing). Run by
//! `cargo test --all-targets` (without `--bench`) it does a quick smoke run instead.

use std::{
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    sync::Arc,
    thread,
    time::{Duration, Instant},
};

use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, MemoryStore, RedisStore, Store},
    Algorithm, IdentityPart, Limit, Window,
};

const T0: u64 = 1_700_000_040_000;

fn limits(algorithm: Algorithm) -> [Limit; 1] {
    // High enough that every check is allowed and writes.
    let max = if algorithm == Algorithm::SlidingLog {
        1_000
    } else {
        1_000_000
    };
    [Limit::new(max, Window::from_secs(60), algorithm)]
}

/// Sequential checks over `clients` keys; returns checks per second and latencies.
async fn run(
    store: &dyn Store,
    algorithm: Algorithm,
    checks: usize,
    clients: usize,
) -> (f64, Vec<Duration>) {
    let keys: Vec<RouteKey> = (0..clients)
        .map(|i| {
            RouteKey::new(
                "rl",
                "GET",
                "/bench",
                &[(IdentityPart::UserId, &i.to_string())],
            )
        })
        .collect();
    let limits = limits(algorithm);
    let mut latencies = Vec::with_capacity(checks);
    let started = Instant::now();
    for i in 0..checks {
        let request = CheckRequest {
            key: &keys[i % clients],
            limits: &limits,
            // Spread over time so sliding logs do not fill up.
            now_millis: Some(T0 + i as u64),
        };
        let t = Instant::now();
        store.check(request).await.expect("store answers");
        latencies.push(t.elapsed());
    }
    (checks as f64 / started.elapsed().as_secs_f64(), latencies)
}

fn percentile(latencies: &mut [Duration], p: f64) -> Duration {
    latencies.sort_unstable();
    latencies[((latencies.len() - 1) as f64 * p) as usize]
}

/// Prints one row per algorithm; `floor` is the plain-INCR rate of the same run, if any.
async fn report(name: &str, store: &dyn Store, checks: usize, floor: Option<f64>) {
    for algorithm in Algorithm::ALL {
        let (rate, mut latencies) = run(store, algorithm, checks, 1_000).await;
        let ratio = floor.map_or(String::new(), |f| format!("   {:.2} x INCR", rate / f));
        println!(
            "{name:<8} {:<15} {rate:>10.0} checks/s   p50 {:>9.1?}   p99 {:>9.1?}{ratio}",
            algorithm.as_str(),
            percentile(&mut latencies, 0.50),
            percentile(&mut latencies, 0.99),
        );
    }
}

/// Plain `INCR` + `PEXPIRE`-free round trips on one multiplexed connection: the floor.
async fn incr_floor(url: &str, checks: usize) -> (f64, Vec<Duration>) {
    let client = redis::Client::open(url).expect("url");
    let mut connection = redis::aio::ConnectionManager::new(client)
        .await
        .expect("connect");
    let mut latencies = Vec::with_capacity(checks);
    let started = Instant::now();
    for i in 0..checks {
        let t = Instant::now();
        let _: i64 = redis::cmd("INCR")
            .arg(format!("floor:{}", i % 1_000))
            .query_async(&mut connection)
            .await
            .expect("INCR");
        latencies.push(t.elapsed());
    }
    (checks as f64 / started.elapsed().as_secs_f64(), latencies)
}

/// A memory store held near its capacity by new clients arriving as fast as old ones
/// expire (one a millisecond, each key living `capacity − 128` ms, so about 8 free keys a
/// shard): every few inserts find a shard full and sweep it, which must cost what expired,
/// not the shard's size.
async fn near_capacity(capacity: usize, checks: usize) {
    let store = MemoryStore::builder().capacity(capacity).build();
    let limits = [Limit::new(
        10,
        Window::from_millis(capacity as u64 - 128),
        Algorithm::SlidingLog,
    )];
    let key = |i: usize| {
        RouteKey::new(
            "rl",
            "GET",
            "/bench",
            &[(IdentityPart::UserId, &i.to_string())],
        )
    };
    let check = |i: usize| {
        let key = key(i);
        let store = &store;
        async move {
            let request = CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(T0 + i as u64),
            };
            store.check(request).await.expect("store answers");
        }
    };
    for i in 0..capacity {
        check(i).await;
    }
    let mut latencies = Vec::with_capacity(checks);
    let started = Instant::now();
    for i in capacity..capacity + checks {
        let t = Instant::now();
        check(i).await;
        latencies.push(t.elapsed());
    }
    let rate = checks as f64 / started.elapsed().as_secs_f64();
    println!(
        "memory   near capacity {capacity:>8} keys {rate:>10.0} checks/s   p50 {:>9.1?}   p99 {:>9.1?}   ({} live keys evicted)",
        percentile(&mut latencies, 0.50),
        percentile(&mut latencies, 0.99),
        store.evicted(),
    );
}

/// Nanoseconds per `RouteKey::new` (ip + username, the login key) and per `limit_key`.
fn key_building(iterations: usize) {
    let usernames: Vec<String> = (0..1_000).map(|i| format!("User{i}@example.com")).collect();
    let started = Instant::now();
    let mut total = 0;
    for i in 0..iterations {
        let key = RouteKey::new(
            "rl",
            "POST",
            "/orders/{id}",
            &[
                (IdentityPart::Ip, "203.0.113.7"),
                (IdentityPart::Username, &usernames[i % usernames.len()]),
            ],
        );
        total += key.as_str().len();
    }
    let per_key = started.elapsed().as_nanos() as f64 / iterations as f64;
    let key = RouteKey::new("rl", "GET", "/x", &[(IdentityPart::Ip, "203.0.113.7")]);
    let limit = Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow);
    let started = Instant::now();
    for _ in 0..iterations {
        total += key.limit_key(&limit).len();
    }
    let per_stem = started.elapsed().as_nanos() as f64 / iterations as f64;
    println!("keys     RouteKey::new (ip+username, hashed) {per_key:>8.0} ns   limit_key {per_stem:>6.0} ns   ({total} bytes built)");
}

/// Checks per second with `in_flight` concurrent checks on one store.
async fn concurrent(store: Arc<dyn Store>, in_flight: usize, checks_each: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = RouteKey::new(
                    "rl",
                    "GET",
                    "/bench",
                    &[(IdentityPart::UserId, &task.to_string())],
                );
                let limits = limits(Algorithm::SlidingWindow);
                for i in 0..checks_each {
                    let request = CheckRequest {
                        key: &key,
                        limits: &limits,
                        now_millis: Some(T0 + i as u64),
                    };
                    store.check(request).await.expect("store answers");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    (in_flight * checks_each) as f64 / started.elapsed().as_secs_f64()
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Option<(Server, u16)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let dir = std::env::temp_dir();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = Server(child);
    for _ in 0..500 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((server, port));
        }
        thread::sleep(Duration::from_millis(10));
    }
    None
}

fn main() {
    // One thread for the client, leaving the other core to redis-server.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not: smoke-run then.
    let scale = if std::env::args().any(|a| a == "--bench") {
        1
    } else {
        100
    };
    key_building(200_000 / scale);
    runtime.block_on(async {
        let memory = MemoryStore::new();
        report("memory", &memory, 200_000 / scale, None).await;
        near_capacity(1_600_000 / scale, 400_000 / scale).await;

        let Some((_server, port)) = start_redis() else {
            println!("redis    skipped: redis-server not found on PATH (`apt-get install redis-server`)");
            return;
        };
        let url = format!("redis://127.0.0.1:{port}");
        let redis = RedisStore::builder(url.clone())
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("store");
        let (floor, mut latencies) = incr_floor(&url, 20_000 / scale).await;
        println!(
            "redis    {:<15} {floor:>10.0} checks/s   p50 {:>9.1?}   p99 {:>9.1?}   1.00 x INCR",
            "plain INCR",
            percentile(&mut latencies, 0.50),
            percentile(&mut latencies, 0.99),
        );
        report("redis", &redis, 20_000 / scale, Some(floor)).await;
        let store: Arc<dyn Store> = Arc::new(redis);
        for in_flight in [1, 16, 64] {
            let rate = concurrent(store.clone(), in_flight, 20_000 / scale / in_flight).await;
            println!("redis    sliding_window  {rate:>10.0} checks/s with {in_flight} in flight on one connection");
        }
    });
}
