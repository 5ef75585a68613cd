//! The request path: an App-level [`RateLimiter`] that installs the limiter and applies the
//! default policy to undeclared routes, and a resource-level [`RouteGuard`] that the
//! attribute adds to every declared route.

mod answer;
mod attempt;
mod budget;
mod budget_admin;
mod cost;
pub(crate) mod declared_routes;
mod deprecated_settings;
mod enforce;
mod flood_shield;
mod header_families;
mod headers;
mod lease;
mod limiter;
mod local_fallback;
mod overridden;
mod rate_limiter;
mod refusals;
mod rejection;
mod rollout;
mod rollout_state;
mod route_entry;
mod route_guard;
mod route_info;
mod service;
mod shares;
pub(crate) mod telemetry;
mod waiting;

pub use budget::{AttemptOutcome, Budget, Unlimited};
pub use budget_admin::BudgetError;
pub use headers::{HeaderFamilies, IetfDraft};
pub use rate_limiter::RateLimiter;
pub use rejection::{Rejection, RejectionReason};
pub use route_entry::RouteEntry;
pub use route_guard::RouteGuard;
pub use telemetry::describe_metrics;
