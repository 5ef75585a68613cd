//! The typed policy a `#[rate_limit]` declaration carries.
//!
//! Every type here can be built in a `const` context (the attribute emits them into an
//! `inventory` registration) and none of them can hold an invalid value: a zero limit or a
//! zero window does not compile when built in a `const`, and panics with a clear message
//! when built at run time.

mod ban;
mod identity;
mod limit;
mod route_policy;
mod shared_budget;
mod tier_policy;

pub use ban::Ban;
pub use identity::{Identity, IdentityPart};
pub(crate) use limit::{gcra_interval_micros, APP_BAN};
pub use limit::{
    Limit, Window, MAX_EXACT_SLIDING_PRODUCT, MAX_SLIDING_LOG_LIMIT, MAX_WINDOW_MILLIS,
};
pub(crate) use ratelimit_grammar::is_header_name;
pub use ratelimit_grammar::{Algorithm, Count, FailMode, RouteHeaders, MAX_STACKED};
pub(crate) use route_policy::{limits_problem, why_cannot_sync, why_cannot_wait};
pub use route_policy::{Policy, RoutePolicy};
pub(crate) use shared_budget::duplicate_names;
pub use shared_budget::{shared_budgets, SharedBudget};
pub use tier_policy::TierPolicy;
