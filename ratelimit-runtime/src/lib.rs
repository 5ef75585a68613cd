//! Declarative per-route rate limits for actix-web, shared across every instance through Redis.
//!
//! A handler declares its limit with [`rate_limit`] above its route attribute; the App is
//! wrapped once with a [`RateLimiter`] over a store ([`store::RedisStore`],
//! [`store::RedisSentinelStore`] or [`store::RedisClusterStore`] for a fleet,
//! [`store::MemoryStore`] for one process and tests); [`coverage::require_coverage`] returns
//! an error listing every undeclared route, for `main` to refuse to start on. In Redis, one
//! atomic Lua script in one round trip decides every limit of a request's route, and
//! concurrent checks of one key share calls, at most two in flight per key and worker
//! ([`guide::deployments`]).
//!
//! ```
//! use actix_web::{post, test, web, App, HttpResponse, Responder};
//! use ratelimit_runtime::{clock::ManualClock, rate_limit, store::MemoryStore, RateLimiter};
//!
//! #[rate_limit(limit = 2, window = "5m", identity = "ip+username", algorithm = "sliding_log")]
//! #[post("/login")]
//! async fn login(body: web::Bytes) -> impl Responder {
//!     HttpResponse::Ok().body(body)
//! }
//!
//! # actix_web::rt::System::new().block_on(async {
//! // Tests inject the time; in production the store's clock (Redis `TIME`) decides.
//! let clock = ManualClock::at(1_700_000_000_000);
//! let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
//! let app = test::init_service(App::new().service(login).wrap(limiter)).await;
//!
//! let attempt = || {
//!     test::TestRequest::post()
//!         .uri("/login")
//!         .peer_addr("203.0.113.7:4000".parse().unwrap())
//!         .insert_header(("content-type", "application/json"))
//!         .set_payload(r#"{"username": "alice", "password": "…"}"#)
//!         .to_request()
//! };
//! assert_eq!(test::call_service(&app, attempt()).await.status(), 200);
//! assert_eq!(test::call_service(&app, attempt()).await.status(), 200);
//! let rejected = test::call_service(&app, attempt()).await;
//! assert_eq!(rejected.status(), 429);
//! assert_eq!(rejected.headers().get("retry-after").unwrap(), "300");
//!
//! // Five minutes later the oldest attempts have left the log.
//! clock.advance(std::time::Duration::from_secs(300));
//! assert_eq!(test::call_service(&app, attempt()).await.status(), 200);
//!
//! // Every route of the App has a declaration: the check that runs at startup and in CI.
//! let table = ratelimit_runtime::coverage::require_coverage(App::new().service(login)).await.unwrap();
//! assert_eq!(table.routes.len(), 1);
//! # });
//! ```
//!
//! # Where to read on
//!
//! - [`rate_limit`]: the attribute reference (every key, stacking, placement above the
//!   route attribute, what each compile error means).
//! - [`settings`]: the limiter's settings, in groups; [`RateLimiter::check_settings`]
//!   reports every refused one.
//! - [`guide`]: the chapters.
//!   - [`guide::getting_started`]: a limited app in five minutes.
//!   - [`guide::algorithms`]: choosing an algorithm.
//!   - [`guide::identity`]: who a limit counts; trusted proxies; the key secret.
//!   - [`guide::middleware_order`]: the limiter among auth, CORS and path normalisation.
//!   - [`guide::sign_in`]: failures only, lockouts, clearing a budget from code.
//!   - [`guide::overrides`]: changing limits at run time; allow and deny lists; the admin
//!     command.
//!   - [`guide::failure_modes`]: timeouts, fail open or closed, recovery.
//!   - [`guide::headers`]: rate-limit headers, the 429 and the 503, your own rejection.
//!   - [`guide::tls`]: TLS, passwords and the Redis ACL user.
//!   - [`guide::deployments`]: Redis Cluster, keys, connections per worker.
//!   - [`guide::observability`]: log events, spans, metrics, a dashboard and alert rules.
//!   - [`guide::testing`]: testing your routes with the injected clock.
//!   - [`guide::limitations`]: what the limiter does not do.

pub mod clock;
pub mod coverage;
pub mod guide;
pub mod identity;
pub mod key;
mod middleware;
pub mod overrides;
pub mod policy;
pub mod registry;
pub mod settings;
pub mod store;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use middleware::{
    describe_metrics, AttemptOutcome, Budget, BudgetError, HeaderFamilies, IetfDraft, RateLimiter,
    Rejection, RejectionReason, Unlimited,
};
pub use policy::{
    Algorithm, Count, FailMode, Identity, IdentityPart, Limit, Policy, RouteHeaders, RoutePolicy,
    SharedBudget, TierPolicy, Window,
};
/// Declares a budget shared by routes: `budget!(pub API = limit = 10000, window = "1d",
/// identity = "api_key")` makes a constant `API` ([`SharedBudget`]) that handlers name with
/// `#[rate_limit(budget = API)]`. It takes `limit`, `window`, `identity` (default: user id,
/// else address), `algorithm` and `crate`, with the attribute's rules and messages
/// (`guide::budgets`).
pub use ratelimit_macros::budget;
/// Declares a handler's rate limit, written directly above its actix-web route attribute:
/// the attribute reference.
#[doc(inline)]
#[doc = include_str!("guide/rate_limit.md")]
pub use ratelimit_macros::rate_limit;
pub use registry::RouteDeclaration;

/// The crate README's example (what crates.io shows) compiles against this API: its code
/// blocks run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
