//! Faults under traffic, through the HTTP path (an App with `#[rate_limit]` routes and a
//! `RateLimiter` over a Redis store, driven by actix-web's test service): Redis killed, restarted
//! empty, stalled, a cluster master killed, and a cluster master's host gone. No request waits much
//! longer than the store timeout, fail-closed routes answer 503 while no decision can be made,
//! fail-open routes pass, and once Redis answers again the app decides again by itself, exactly.
//!
//! The tests of this target run one at a time: each keeps 32 requests in flight against its
//! own servers, and the latency bounds are about the limiter, not about CPU contention
//! between them.
//!
//! The App and its routes are in this file, the traffic loops and their checks in `traffic`;
//! the tests are in the other modules, by fault.

#[path = "../support/mod.rs"]
mod support;

mod cluster_black_hole;
mod cluster_failover;
mod outage;
mod stalls;
mod traffic;

use std::time::Duration;

use actix_web::{body::MessageBody, dev::ServiceResponse, get, post, App, HttpResponse, Responder};
use ratelimit_runtime::{clock::ManualClock, rate_limit, store::Store, RateLimiter};
use support::T0;

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

/// One test at a time (see the crate docs).
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
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0 + 30_000));
    App::new()
        .service(closed_route)
        .service(open_route)
        .wrap(limiter)
}
