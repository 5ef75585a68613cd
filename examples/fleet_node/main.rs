//! One app instance of a fleet, as its own process: one route per algorithm, each limited to
//! 100 per minute per API key, counted in the shared Redis. The fleet load test
//! (`tests/fleet_load.rs`) starts four of these on one Redis.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 BIND=127.0.0.1:8081 cargo run --release --example fleet_node
//! curl -s localhost:8081/gcra -H 'x-api-key: k1' -i
//! ```
//!
//! Environment:
//!
//! - `REDIS_URL` (required): the shared Redis.
//! - `BIND` (default `127.0.0.1:8080`), `WORKERS` (default 2).
//! - `KEY_PREFIX` (default `rl`).
//! - `INSTANCES` (default 1): how many nodes share Redis; while it fails, `/local` (which
//!   fails `local`) is limited in each node at `ceil(100 / INSTANCES)`.
//! - `STORE_TIMEOUT_MS` (default 50): the store's and the limiter's timeout.
//! - `FLEET_NOW_MS` (optional; empty is unset): a fixed time in Unix milliseconds, passed
//!   to the script instead of Redis `TIME`, so that a test's burst never straddles a window
//!   boundary.
//!
//! `/export` is a concurrency limit: at most 5 requests per API key in flight across the
//! fleet, leases of one second. Its handler runs `?ms=` milliseconds (default 100) and
//! counts in Redis how many of its calls run at once across the fleet (`fleet:running:<key>`,
//! the most seen in `fleet:most:<key>`).

use ratelimit_runtime::settings::{Failure, Keys};
use std::{env, process::ExitCode, str::FromStr, time::Duration};

use actix_web::{get, web, App, HttpRequest, HttpResponse, HttpServer, Responder};
use ratelimit_runtime::{clock::ManualClock, coverage, rate_limit, store::RedisStore, RateLimiter};

#[rate_limit(
    limit = 100,
    window = "1m",
    identity = "api_key",
    algorithm = "fixed_window",
    fail = "closed"
)]
#[get("/fixed_window")]
async fn fixed_window() -> impl Responder {
    HttpResponse::Ok().body("allowed")
}

#[rate_limit(
    limit = 100,
    window = "1m",
    identity = "api_key",
    algorithm = "sliding_window",
    fail = "closed"
)]
#[get("/sliding_window")]
async fn sliding_window() -> impl Responder {
    HttpResponse::Ok().body("allowed")
}

#[rate_limit(
    limit = 100,
    window = "1m",
    identity = "api_key",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[get("/sliding_log")]
async fn sliding_log() -> impl Responder {
    HttpResponse::Ok().body("allowed")
}

#[rate_limit(
    limit = 100,
    window = "1m",
    identity = "api_key",
    algorithm = "gcra",
    fail = "closed"
)]
#[get("/gcra")]
async fn gcra() -> impl Responder {
    HttpResponse::Ok().body("allowed")
}

/// While Redis fails, limited in each process at its share (`INSTANCES`).
#[rate_limit(
    limit = 100,
    window = "1m",
    identity = "api_key",
    algorithm = "sliding_log",
    fail = "local"
)]
#[get("/local")]
async fn local() -> impl Responder {
    HttpResponse::Ok().body("allowed")
}

/// Counts a call of `/export` in: the calls running now across the fleet, and the most seen.
const ENTER: &str = "local n = redis.call('INCR', KEYS[1]) \
    if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end \
    return n";

#[rate_limit(concurrency = 5, lease = "1s", identity = "api_key", fail = "closed")]
#[get("/export")]
async fn export(
    req: HttpRequest,
    redis: web::Data<redis::aio::ConnectionManager>,
) -> Result<HttpResponse, actix_web::Error> {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    let ms: u64 = req
        .query_string()
        .strip_prefix("ms=")
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(100);
    let (running, most) = (format!("fleet:running:{key}"), format!("fleet:most:{key}"));
    let mut conn = redis.get_ref().clone();
    let _: i64 = redis::cmd("EVAL")
        .arg(ENTER)
        .arg(2)
        .arg(&running)
        .arg(&most)
        .query_async(&mut conn)
        .await
        .map_err(actix_web::error::ErrorInternalServerError)?;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let _: i64 = redis::cmd("DECR")
        .arg(&running)
        .query_async(&mut conn)
        .await
        .map_err(actix_web::error::ErrorInternalServerError)?;
    Ok(HttpResponse::Ok().body("exported"))
}

#[rate_limit(exempt = "readiness probe of the fleet test")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok().body("ok")
}

fn app(
    limiter: RateLimiter,
    redis: web::Data<redis::aio::ConnectionManager>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(redis)
        .service(fixed_window)
        .service(sliding_window)
        .service(sliding_log)
        .service(gcra)
        .service(local)
        .service(export)
        .service(health)
        .wrap(limiter)
}

fn env_number<T: FromStr>(name: &str, default: T) -> Result<T, String> {
    match env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{name} must be a whole number, got `{text}`")),
        Err(_) => Ok(default),
    }
}

async fn run() -> Result<(), String> {
    let url = env::var("REDIS_URL").map_err(|_| "REDIS_URL is required".to_owned())?;
    let bind = env::var("BIND").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let workers: usize = env_number("WORKERS", 2)?;
    let timeout = Duration::from_millis(env_number("STORE_TIMEOUT_MS", 50)?);
    let prefix = env::var("KEY_PREFIX").unwrap_or_else(|_| "rl".to_owned());
    let instances: u32 = env_number("INSTANCES", 1)?;

    let store = RedisStore::builder(url.clone())
        .timeout(timeout)
        .build()
        .await
        .map_err(|e| format!("REDIS_URL: {e}"))?;
    let mut limiter = RateLimiter::new(store)
        .keys(Keys::new().prefix(&prefix))
        .failure(Failure::new().instances(instances));
    let redis = redis::Client::open(url.as_str())
        .map_err(|e| format!("REDIS_URL: {e}"))?
        .get_connection_manager()
        .await
        .map_err(|e| format!("REDIS_URL: {e}"))?;
    let redis = web::Data::new(redis);
    if let Ok(text) = env::var("FLEET_NOW_MS")
        .map(|t| t.trim().to_owned())
        .and_then(|t| {
            if t.is_empty() {
                Err(env::VarError::NotPresent)
            } else {
                Ok(t)
            }
        })
    {
        let now: u64 = text
            .trim()
            .parse()
            .map_err(|_| format!("FLEET_NOW_MS must be Unix milliseconds, got `{text}`"))?;
        limiter = limiter.clock(ManualClock::at(now));
    }
    coverage::require_coverage(app(limiter.clone(), redis.clone()))
        .await
        .map_err(|e| {
            format!("{e}\nrefusing to start: every route needs a rate limit or an exemption")
        })?;

    HttpServer::new(move || app(limiter.clone(), redis.clone()))
        .workers(workers)
        .bind(&bind)
        .map_err(|e| format!("cannot bind {bind}: {e}"))?
        .run()
        .await
        .map_err(|e| format!("server error: {e}"))
}

#[actix_web::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fleet node: {error}");
            ExitCode::FAILURE
        }
    }
}
