//! Declarative per-route rate limits for actix-web, shared across every instance through Redis.
//!
//! ```
//! use actix_web::{post, web, HttpResponse, Responder};
//! use ratelimit_runtime::rate_limit;
//!
//! #[rate_limit(limit = 10, window = "5m", identity = "ip+username", fail = "closed")]
//! #[post("/login")]
//! async fn login(body: web::Bytes) -> impl Responder {
//!     HttpResponse::Ok().body(body)
//! }
//!
//! let declared = ratelimit_runtime::registry::declarations()
//!     .find(|d| d.function == "login")
//!     .unwrap();
//! assert_eq!(declared.path, "/login");
//! assert_eq!(declared.methods, ["POST"]);
//! ```

pub mod clock;
pub mod coverage;
pub mod identity;
pub mod key;
pub mod middleware;
pub mod policy;
pub mod registry;
pub mod store;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use middleware::{HeaderFamilies, RateLimiter};
pub use policy::{Algorithm, FailMode, Identity, IdentityPart, Limit, Policy, RoutePolicy, Window};
pub use ratelimit_macros::rate_limit;
pub use registry::RouteDeclaration;
