//! (e) This project: `RateLimiter` over `RedisStore` (default timeouts), and one
//! `#[rate_limit]` handler per algorithm and one stacked policy under each budget.
//!
//! Every route is identified by IP behind one trusted proxy (`TrustedProxies::hops(1)`),
//! the rule variants (b) to (d) apply by hand, and fails closed, so a store error would show
//! as a `503` in the load generator's error count instead of passing silently.
//!
//! `allow` limits cannot be reached in a run: 2,000,000,000 per hour, except the sliding
//! log, which the attribute caps at 1,000 per window: 1,000 per ms (1,000,000 per second,
//! far above any measured rate, bursts of 256 connections included; the log then holds
//! about rate × 1 ms entries), and the
//! GCRA's, which spaces requests a whole number of microseconds apart: 1,800,000,000 per hour
//! (2 µs apart) alone, 1,000,000 per second (1 µs) in the stacked policy.

use actix_web::{get, web, App, HttpServer};
use ratelimit_runtime::settings::{Identities, Responses};
use ratelimit_runtime::{
    identity::TrustedProxies, overrides::Overrides, rate_limit, store::RedisStore, HeaderFamilies,
    RateLimiter,
};

use ratelimit_bench::ProjectRoute;

use crate::options::Options;

#[rate_limit(
    limit = 2000000000,
    window = "1h",
    identity = "ip",
    algorithm = "fixed_window",
    fail = "closed"
)]
#[get("/allow/fixed_window")]
async fn allow_fixed_window() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 2000000000,
    window = "1h",
    identity = "ip",
    algorithm = "sliding_window",
    fail = "closed"
)]
#[get("/allow/sliding_window")]
async fn allow_sliding_window() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1000,
    window = "1ms",
    identity = "ip",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[get("/allow/sliding_log")]
async fn allow_sliding_log() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1800000000,
    window = "1h",
    identity = "ip",
    algorithm = "gcra",
    fail = "closed"
)]
#[get("/allow/gcra")]
async fn allow_gcra() -> &'static str {
    "ok"
}

#[rate_limit(limit = 2000000000, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(limit = 1000000, window = "1s", algorithm = "gcra")]
#[get("/allow/stacked")]
async fn allow_stacked() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1,
    window = "1h",
    identity = "ip",
    algorithm = "fixed_window",
    fail = "closed"
)]
#[get("/flood/fixed_window")]
async fn flood_fixed_window() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1,
    window = "1h",
    identity = "ip",
    algorithm = "sliding_window",
    fail = "closed"
)]
#[get("/flood/sliding_window")]
async fn flood_sliding_window() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1,
    window = "1h",
    identity = "ip",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[get("/flood/sliding_log")]
async fn flood_sliding_log() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1,
    window = "1h",
    identity = "ip",
    algorithm = "gcra",
    fail = "closed"
)]
#[get("/flood/gcra")]
async fn flood_gcra() -> &'static str {
    "ok"
}

#[rate_limit(limit = 1, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(limit = 100, window = "1s", algorithm = "gcra")]
#[get("/flood/stacked")]
async fn flood_stacked() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1000,
    window = "1h",
    identity = "ip",
    algorithm = "fixed_window",
    fail = "closed"
)]
#[get("/memory/fixed_window")]
async fn memory_fixed_window() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1000,
    window = "1h",
    identity = "ip",
    algorithm = "sliding_window",
    fail = "closed"
)]
#[get("/memory/sliding_window")]
async fn memory_sliding_window() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1000,
    window = "1h",
    identity = "ip",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[get("/memory/sliding_log")]
async fn memory_sliding_log() -> &'static str {
    "ok"
}

#[rate_limit(
    limit = 1000,
    window = "1h",
    identity = "ip",
    algorithm = "gcra",
    fail = "closed"
)]
#[get("/memory/gcra")]
async fn memory_gcra() -> &'static str {
    "ok"
}

// The GCRA's key lives as long as its theoretical arrival time runs ahead of the clock: 100
// per 10 minutes keeps it through the fill (6 s per request), where 100 per second would let
// it expire 10 ms after each request and the table would count the sliding window's key
// alone.
#[rate_limit(limit = 1000, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(limit = 100, window = "10m", algorithm = "gcra")]
#[get("/memory/stacked")]
async fn memory_stacked() -> &'static str {
    "ok"
}

/// The project server's routes: those of `only`, or all of them.
/// A limit no run reaches, decided from shares of 55,555 requests (its budget of 100 ms):
/// what deciding from a share costs a request against actix-governor's in-memory GCRA.
#[rate_limit(
    limit = 2000000000,
    window = "1h",
    identity = "ip",
    algorithm = "fixed_window",
    sync = "100ms",
    fail = "closed"
)]
#[get("/allow/sync")]
async fn allow_sync() -> &'static str {
    "ok"
}

/// One hot key shared by a fleet: 100,000 a minute, shares of 166.
#[rate_limit(
    limit = 100000,
    window = "1m",
    identity = "ip",
    algorithm = "fixed_window",
    sync = "100ms",
    fail = "closed"
)]
#[get("/hot/sync")]
async fn hot_sync() -> &'static str {
    "ok"
}

/// The routes that sync (`bench_server --sync`, for `sync_fleet`).
pub fn sync_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(allow_sync).service(hot_sync);
}

pub fn routes(cfg: &mut web::ServiceConfig, only: Option<ProjectRoute>) {
    let serves = |route: ProjectRoute| only.is_none_or(|only| only == route);
    if serves(ProjectRoute::FixedWindow) {
        cfg.service(allow_fixed_window)
            .service(flood_fixed_window)
            .service(memory_fixed_window);
    }
    if serves(ProjectRoute::SlidingWindow) {
        cfg.service(allow_sliding_window)
            .service(flood_sliding_window)
            .service(memory_sliding_window);
    }
    if serves(ProjectRoute::SlidingLog) {
        cfg.service(allow_sliding_log)
            .service(flood_sliding_log)
            .service(memory_sliding_log);
    }
    if serves(ProjectRoute::Gcra) {
        cfg.service(allow_gcra)
            .service(flood_gcra)
            .service(memory_gcra);
    }
    if serves(ProjectRoute::Stacked) {
        cfg.service(allow_stacked)
            .service(flood_stacked)
            .service(memory_stacked);
    }
}

pub async fn serve(
    options: &Options,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    let mut store = RedisStore::builder(options.redis_url());
    if let Some(ms) = options.timeout_ms {
        store = store.timeout(std::time::Duration::from_millis(ms));
    }
    let store = store.build().await.map_err(std::io::Error::other)?;
    let mut limiter = RateLimiter::new(store)
        .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)));
    if options.no_headers {
        limiter = limiter.responses(Responses::new().headers(HeaderFamilies::none()));
    }
    if let Some(entries) = options.deny_list {
        limiter = limiter.overrides(deny_list(entries)?);
        if let Some(refused) = limiter
            .overrides_in_use()
            .and_then(|o| o.refused().into_iter().next())
        {
            return Err(std::io::Error::other(refused.1.join("; ")));
        }
    }
    let (only, sync) = (options.route, options.sync);
    Ok(HttpServer::new(move || {
        App::new()
            .configure(|cfg| match sync {
                true => sync_routes(cfg),
                false => routes(cfg, only),
            })
            .wrap(limiter.clone())
    })
    .workers(options.workers)
    .listen(listener)?
    .run())
}

/// Overrides from a file of `entries` deny entries, single addresses from 100.64.0.0 on
/// (none is a client of the benchmark, which sends from 198.18.0.0/15).
fn deny_list(entries: u32) -> std::io::Result<Overrides> {
    use std::fmt::Write as _;

    let base = u32::from(std::net::Ipv4Addr::new(100, 64, 0, 0));
    let mut text = String::from("[deny]\nips = [\n");
    for i in 0..entries {
        let _ = writeln!(text, "\"{}\",", std::net::Ipv4Addr::from(base + i));
    }
    text.push_str("]\n");
    let path = std::env::temp_dir().join(format!("bench-deny-list-{}.toml", std::process::id()));
    std::fs::write(&path, text)?;
    Ok(Overrides::new().file(path))
}

#[cfg(test)]
mod tests {
    use actix_web::test;
    use ratelimit_runtime::{coverage, store::MemoryStore};

    use ratelimit_bench::{Budget, Variant};

    use super::*;

    /// Every route of the project server carries a declaration, so no request also gets the
    /// default policy (which would reject the load after 120 requests per minute).
    #[actix_web::test]
    async fn every_route_is_declared_and_allow_routes_allow() {
        coverage::require_coverage(App::new().configure(|cfg| routes(cfg, None)))
            .await
            .unwrap();
        let limiter = RateLimiter::new(MemoryStore::new())
            .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)));
        let service =
            test::init_service(App::new().configure(|cfg| routes(cfg, None)).wrap(limiter)).await;
        for _ in 0..200 {
            let req = test::TestRequest::get()
                .uri("/allow/gcra")
                .insert_header(("x-forwarded-for", "198.18.0.1"))
                .to_request();
            assert!(test::call_service(&service, req)
                .await
                .status()
                .is_success());
        }
        let flood = || {
            test::TestRequest::get()
                .uri("/flood/stacked")
                .insert_header(("x-forwarded-for", "198.18.0.1"))
                .to_request()
        };
        assert!(test::call_service(&service, flood())
            .await
            .status()
            .is_success());
        assert_eq!(
            test::call_service(&service, flood())
                .await
                .status()
                .as_u16(),
            429
        );
    }

    /// The routes that sync are declared, and sync.
    #[actix_web::test]
    async fn the_sync_routes_are_declared_and_sync() {
        let table = coverage::require_coverage(App::new().configure(sync_routes))
            .await
            .unwrap();
        let text = table.to_string();
        assert!(
            text.contains("/hot/sync") && text.contains("sync 100ms"),
            "{text}"
        );
    }

    /// A one-route server serves that route's three paths and no other route's.
    #[actix_web::test]
    async fn a_one_route_server_serves_only_its_route() {
        for route in ProjectRoute::ALL {
            let limiter = RateLimiter::new(MemoryStore::new());
            let app = App::new()
                .configure(|cfg| routes(cfg, Some(route)))
                .wrap(limiter);
            let service = test::init_service(app).await;
            for other in ProjectRoute::ALL {
                for budget in [Budget::Allow, Budget::Flood, Budget::Memory] {
                    let path = ratelimit_bench::route::path(Variant::Project, Some(other), budget);
                    let req = test::TestRequest::get().uri(&path).to_request();
                    let status = test::call_service(&service, req).await.status();
                    assert_eq!(
                        status.is_success(),
                        other == route,
                        "{route}: {path} {status}"
                    );
                }
            }
        }
    }
}
