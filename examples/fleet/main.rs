//! The fleet experiment: why per-instance counters break on several instances.
//!
//! Starts 4 instances of one limited route (100 per minute) on local ports, sends 1,000
//! requests from one client round-robin across them, and prints how many were allowed with
//! a per-instance in-memory store and with the shared Redis store, side by side.
//!
//! ```text
//! cargo run --release --example fleet
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example fleet
//! ```
//!
//! Without `REDIS_URL` it starts its own `redis-server` on a free loopback port and stops it
//! at the end. `FLEET_JSON=1` prints the figures as one JSON line instead of a table.

mod local_redis;

use ratelimit_runtime::settings::Keys;
use std::{env, net::TcpListener, process::ExitCode, sync::Arc};

use actix_web::{dev::ServerHandle, get, App, HttpResponse, HttpServer, Responder};
use ratelimit_runtime::{
    rate_limit,
    store::{MemoryStore, RedisStore, Store},
    RateLimiter,
};

const INSTANCES: usize = 4;
const REQUESTS: usize = 1000;
const LIMIT: usize = 100;

// A sliding log counts exactly, whenever in the minute the run happens to start.
#[rate_limit(limit = 100, window = "1m", identity = "ip", algorithm = "sliding_log")]
#[get("/fleet")]
async fn fleet() -> impl Responder {
    HttpResponse::Ok().body("allowed")
}

/// Starts one instance on a free port; returns its base URL and handle.
fn start_instance(store: Arc<dyn Store>, prefix: &str) -> std::io::Result<(String, ServerHandle)> {
    let prefix = prefix.to_owned();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = HttpServer::new(move || {
        App::new()
            .service(fleet)
            .wrap(RateLimiter::from_arc(Arc::clone(&store)).keys(Keys::new().prefix(&prefix)))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    Ok((url, handle))
}

/// Runs the experiment with one store per instance; returns how many requests were allowed.
async fn run(stores: Vec<Arc<dyn Store>>) -> Result<usize, String> {
    // A fresh key prefix per run, so runs against a shared Redis do not see each other.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("rl-fleet-{}-{nanos}", std::process::id());
    let mut urls = Vec::new();
    let mut handles = Vec::new();
    for store in stores {
        let (url, handle) =
            start_instance(store, &prefix).map_err(|e| format!("cannot start an instance: {e}"))?;
        urls.push(url);
        handles.push(handle);
    }
    let client = awc::Client::default();
    let mut allowed = 0;
    for i in 0..REQUESTS {
        let url = format!("{}/fleet", urls[i % urls.len()]);
        let response = client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("request to {url} failed: {e}"))?;
        match response.status().as_u16() {
            200 => allowed += 1,
            429 => {}
            other => return Err(format!("unexpected status {other} from {url}")),
        }
    }
    for handle in handles {
        handle.stop(true).await;
    }
    Ok(allowed)
}

async fn experiment() -> Result<(usize, usize), String> {
    let memory: Vec<Arc<dyn Store>> = (0..INSTANCES)
        .map(|_| Arc::new(MemoryStore::new()) as Arc<dyn Store>)
        .collect();
    let in_memory = run(memory).await?;

    let (url, _server) = match env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = local_redis::LocalRedis::start()?;
            (server.url(), Some(server))
        }
    };
    let mut shared: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..INSTANCES {
        // One store (one connection) per instance, as separate processes would have.
        let store = RedisStore::builder(url.clone())
            .build()
            .await
            .map_err(|e| format!("cannot use Redis at {url}: {e}"))?;
        shared.push(Arc::new(store));
    }
    let with_redis = run(shared).await?;
    Ok((in_memory, with_redis))
}

#[actix_web::main]
async fn main() -> ExitCode {
    match experiment().await {
        Ok((in_memory, with_redis)) => {
            if env::var("FLEET_JSON").is_ok_and(|v| v == "1") {
                println!(
                    "{}",
                    serde_json::json!({
                        "instances": INSTANCES,
                        "requests": REQUESTS,
                        "limit": LIMIT,
                        "allowed_in_memory": in_memory,
                        "allowed_redis": with_redis,
                    })
                );
            } else {
                println!("{INSTANCES} instances, {REQUESTS} requests from one client, round-robin; limit {LIMIT} per minute\n");
                println!("{:<28} {:>8}  {:>13}", "store", "allowed", "x limit");
                println!(
                    "{:<28} {:>8}  {:>13.2}",
                    "in-memory, per instance",
                    in_memory,
                    in_memory as f64 / LIMIT as f64
                );
                println!(
                    "{:<28} {:>8}  {:>13.2}",
                    "Redis, shared",
                    with_redis,
                    with_redis as f64 / LIMIT as f64
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("fleet experiment failed: {error}");
            ExitCode::FAILURE
        }
    }
}
