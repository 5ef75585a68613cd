//! The demo service: the seed's policy table on a small but real actix-web app.
//!
//! ```text
//! cargo run --release --example demo              # in-memory store (limits per instance)
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example demo
//! cargo run --release --example demo -- --routes  # print the route table and exit
//! cargo run --release --example demo -- --routes --json
//! ```
//!
//! Environment: `BIND` (default `127.0.0.1:8080`), `REDIS_URL` (`redis://` or `rediss://`),
//! `REDIS_CLUSTER_NODES` (comma-separated node URLs), or `REDIS_SENTINEL_NODES`
//! (comma-separated sentinel URLs) with `REDIS_SENTINEL_MASTER` (the primary's name) and, when
//! the primary wants one, `REDIS_SENTINEL_MASTER_PASSWORD`; `TRUSTED_PROXY_HOPS` (default 0),
//! `DEMO_API_KEYS` (the issued API keys, comma-separated; default `key_abc,key_other`),
//! `DEMO_RESET_TOKEN` (the password-reset token; default a random one, logged at start),
//! `RATELIMIT_KEY_SECRET` (16 bytes or more, the same on every instance: usernames and other
//! personal values in keys are hashed under it), `RATELIMIT_OVERRIDES_FILE` (a TOML file of
//! overrides, re-read when it changes; with Redis, a Cluster or Sentinel, the hash
//! `rl:overrides` is read too, which `ratelimit-admin` writes), `RUST_LOG` (default `info`).

mod auth;
mod routes;

use ratelimit_runtime::settings::{Identities, Keys};
use std::{env, sync::Arc};

use actix_web::{middleware::from_fn, web, App, HttpServer};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ratelimit_runtime::{
    coverage::{self, AppFactory},
    identity::{TrustedProxies, UsernameReader},
    key::KeySecret,
    overrides::Overrides,
    store::{redact, MemoryStore, RedisClusterStore, RedisSentinelStore, RedisStore, Store},
    RateLimiter,
};

/// Builds the demo App. `uncovered` adds a route without a declaration (for the test that
/// the coverage check refuses to start such an App).
pub fn app(
    limiter: RateLimiter,
    metrics: web::Data<PrometheusHandle>,
    reset_token: web::Data<routes::ResetToken>,
    uncovered: bool,
) -> App<impl AppFactory> {
    App::new()
        .app_data(metrics)
        .app_data(reset_token)
        // For the password-reset handler, which clears a name's sign-in budget.
        .app_data(web::Data::new(limiter.clone()))
        .configure(routes::configure)
        .configure(move |cfg| {
            if uncovered {
                cfg.route("/debug/uncovered", web::get().to(routes::uncovered));
            }
        })
        .wrap(limiter)
        // Outermost: the stand-in auth runs first, so the limiter sees the user id.
        .wrap(from_fn(auth::bearer_user))
}

/// The password-reset token: `DEMO_RESET_TOKEN`, else 128 random bits made now and logged,
/// so that no token is known before the demo starts.
fn reset_token() -> Result<routes::ResetToken, String> {
    if let Ok(token) = env::var("DEMO_RESET_TOKEN") {
        let token = token.trim();
        if token.len() < 8 {
            return Err("DEMO_RESET_TOKEN must have at least 8 characters".to_owned());
        }
        return Ok(routes::ResetToken(token.to_owned()));
    }
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot make a reset token: {e}"))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    tracing::warn!(
        token = %token,
        "DEMO_RESET_TOKEN is not set: the password-reset token of this run is {token}"
    );
    Ok(routes::ResetToken(token))
}

fn limiter(store: Arc<dyn Store>, overrides: Option<Overrides>) -> Result<RateLimiter, String> {
    let hops = match env::var("TRUSTED_PROXY_HOPS") {
        Ok(text) => text
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("TRUSTED_PROXY_HOPS must be a whole number, got `{text}`"))?,
        Err(_) => 0,
    };
    let identity = Identities::new()
        .trusted_proxies(TrustedProxies::hops(hops))
        // An API key is client input: only an issued one is an identity, so a caller who
        // makes keys up is counted by its address, not given a fresh budget per key.
        .api_key(auth::issued_api_keys())
        // The sign-in routes' usernames are read into the handlers' own types, so every
        // body shape a handler accepts counts against the name it reads (gzip bodies, which
        // this App decompresses, included); a body with no readable username is refused.
        .route_username(
            "POST /login",
            UsernameReader::json_or_form::<routes::Credentials>(|c| &c.username)
                .refuse_unreadable(),
        )
        .route_username(
            "POST /password-reset",
            UsernameReader::json_or_form::<routes::UsernameOnly>(|c| &c.username)
                .refuse_unreadable(),
        );
    let limiter = RateLimiter::from_arc(store).identity(identity);
    let limiter = match overrides {
        Some(overrides) => limiter.overrides(overrides),
        None => limiter,
    };
    match env::var("RATELIMIT_KEY_SECRET") {
        Ok(secret) => {
            let secret =
                KeySecret::new(secret.trim()).map_err(|e| format!("RATELIMIT_KEY_SECRET: {e}"))?;
            Ok(limiter.keys(Keys::new().secret(secret)))
        }
        Err(_) => Ok(limiter),
    }
}

/// Where the demo counts and reads the fleet's overrides.
enum Deployment {
    Memory,
    Url(String),
    Cluster(Vec<String>),
    Sentinel(RedisSentinelStore),
}

/// The one deployment the environment names: `REDIS_URL`, `REDIS_CLUSTER_NODES` or
/// `REDIS_SENTINEL_NODES` (with `REDIS_SENTINEL_MASTER` and, when the primary wants one,
/// `REDIS_SENTINEL_MASTER_PASSWORD`); none is process memory, more than one an error.
async fn deployment() -> Result<Deployment, String> {
    let named: Vec<&str> = ["REDIS_URL", "REDIS_CLUSTER_NODES", "REDIS_SENTINEL_NODES"]
        .into_iter()
        .filter(|name| env::var_os(name).is_some())
        .collect();
    if named.len() > 1 {
        return Err(format!(
            "{} are set together: set one of them, the Redis the fleet counts in",
            named.join(" and ")
        ));
    }
    if let Ok(url) = env::var("REDIS_URL") {
        return Ok(Deployment::Url(url));
    }
    if let Ok(nodes) = env::var("REDIS_CLUSTER_NODES") {
        return Ok(Deployment::Cluster(url_list(&nodes)));
    }
    let Ok(sentinels) = env::var("REDIS_SENTINEL_NODES") else {
        return Ok(Deployment::Memory);
    };
    let name = env::var("REDIS_SENTINEL_MASTER").map_err(|_| {
        "REDIS_SENTINEL_NODES is set without REDIS_SENTINEL_MASTER, the name the sentinels know the primary by".to_owned()
    })?;
    let mut builder = RedisSentinelStore::builder(url_list(&sentinels), name);
    if let Ok(password) = env::var("REDIS_SENTINEL_MASTER_PASSWORD") {
        builder = builder.master_password(password);
    }
    let store = builder
        .build()
        .await
        .map_err(|e| format!("REDIS_SENTINEL_NODES: {e}"))?;
    Ok(Deployment::Sentinel(store))
}

/// Overrides from `RATELIMIT_OVERRIDES_FILE` and, with Redis, from the fleet's hash.
fn overrides(deployment: &Deployment) -> Option<Overrides> {
    // The auth layer puts users named `pro-…` on the `pro` tier (auth.rs); no route declares
    // limits for it, so it is listed for overrides to name (`--tier pro`).
    let overrides = Overrides::new()
        .file_from_env("RATELIMIT_OVERRIDES_FILE")
        .tiers(["pro"]);
    match deployment {
        Deployment::Url(url) => Some(overrides.redis(url)),
        Deployment::Cluster(nodes) => Some(overrides.redis_cluster(nodes.clone())),
        // The store's own clone: one watch of the sentinels, one connection to the primary.
        Deployment::Sentinel(store) => Some(overrides.redis_sentinel(store)),
        Deployment::Memory => env::var_os("RATELIMIT_OVERRIDES_FILE")
            .is_some()
            .then_some(overrides),
    }
}

#[actix_web::main]
async fn main() -> std::process::ExitCode {
    // Logs go to stderr: stdout carries what `--routes` (and `--routes --json`) print.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Buckets for the store latency, so `/metrics` exports a histogram, which a fleet's
    // instances can be summed over (without them the exporter writes a per-instance summary).
    let buckets = [
        0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    ];
    let metrics = match PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("ratelimit_store_duration_seconds".to_owned()),
            &buckets,
        )
        .and_then(PrometheusBuilder::install_recorder)
    {
        Ok(handle) => web::Data::new(handle),
        Err(error) => {
            eprintln!("cannot install the metrics recorder: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let uncovered = env::var("DEMO_UNCOVERED_ROUTE").is_ok_and(|v| v == "1");
    let reset_token = match reset_token() {
        Ok(token) => web::Data::new(token),
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::FAILURE;
        }
    };

    let deployment = match deployment().await {
        Ok(deployment) => deployment,
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if env::args().any(|a| a == "--routes") {
        let limiter = match overrides(&deployment) {
            Some(overrides) => RateLimiter::new(MemoryStore::new()).overrides(overrides),
            None => RateLimiter::new(MemoryStore::new()),
        };
        let mut table =
            coverage::route_table(app(limiter.clone(), metrics, reset_token, uncovered)).await;
        if let Some(overrides) = limiter.overrides_in_use() {
            table = table.with_overrides(overrides);
        }
        if env::args().any(|a| a == "--json") {
            println!("{}", table.to_json());
        } else {
            print!("{table}");
        }
        return std::process::ExitCode::SUCCESS;
    }

    let store = match store(&deployment).await {
        Ok(store) => store,
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let limiter = match limiter(store, overrides(&deployment)) {
        Ok(limiter) => limiter,
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Refuses to start (exit status 1, uncovered routes on stderr) on a gap.
    let table = match coverage::require_coverage(app(
        limiter.clone(),
        metrics.clone(),
        reset_token.clone(),
        uncovered,
    ))
    .await
    {
        Ok(table) => table,
        Err(error) => {
            eprintln!("{error}");
            eprintln!("refusing to start: every route needs a rate limit or an exemption");
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(
        routes = table.routes.len(),
        "every route has a rate limit or an exemption"
    );
    // Checks the overrides against these routes and publishes them for `ratelimit-admin`.
    if let Some(overrides) = limiter.overrides_in_use() {
        let table = table.with_overrides(overrides);
        for row in table.routes.iter().filter(|r| r.overridden.is_some()) {
            tracing::info!(route = %row.label(), source = ?row.source(), "override in force");
        }
    }
    // Which store counts, and whether it answered (the demo starts either way: its routes
    // then fail open or closed, as declared).
    let _ = limiter.check_store().await;

    let bind = env::var("BIND").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let server = match HttpServer::new(move || {
        app(
            limiter.clone(),
            metrics.clone(),
            reset_token.clone(),
            uncovered,
        )
    })
    .bind(&bind)
    {
        Ok(server) => server,
        Err(error) => {
            eprintln!("cannot bind {bind}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(%bind, "demo listening");
    match server.run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("server error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn store(deployment: &Deployment) -> Result<Arc<dyn Store>, String> {
    match deployment {
        Deployment::Url(url) => {
            let store = RedisStore::builder(url.clone())
                .build()
                .await
                .map_err(|e| format!("REDIS_URL `{}`: {e}", redact(url)))?;
            tracing::info!(url = %redact(url), "counting in Redis");
            Ok(Arc::new(store))
        }
        Deployment::Cluster(nodes) => {
            let store = RedisClusterStore::builder(nodes.clone())
                .build()
                .await
                .map_err(|e| format!("REDIS_CLUSTER_NODES: {e}"))?;
            tracing::info!(nodes = nodes.len(), "counting in Redis Cluster");
            Ok(Arc::new(store))
        }
        Deployment::Sentinel(store) => {
            let master = env::var("REDIS_SENTINEL_MASTER").unwrap_or_default();
            tracing::info!(master = %master, "counting in the primary the sentinels name");
            Ok(Arc::new(store.clone()))
        }
        Deployment::Memory => {
            tracing::warn!("none of REDIS_URL, REDIS_CLUSTER_NODES and REDIS_SENTINEL_NODES is set: counting in process memory, so limits apply per instance, not across the fleet");
            Ok(Arc::new(MemoryStore::new()))
        }
    }
}

/// The URLs of a comma-separated list.
fn url_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
        .collect()
}
