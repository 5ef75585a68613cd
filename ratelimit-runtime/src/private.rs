//! Paths the `#[rate_limit]` expansion names. Not public API.

pub use actix_web;
pub use inventory;

/// For the suite's own tests: the check scripts, which users never name.
pub use crate::store::script::{
    check_script, check_script_sha1, give_back_script, CheckScript, CHECK_SCRIPT,
};

/// For the suite's own tests: the unkeyed hash keys hold without a key secret.
pub fn short_hash(value: &str) -> String {
    crate::key::short_hash(value)
}
pub use crate::{
    middleware::{RouteEntry, RouteGuard},
    policy::{
        Algorithm, Ban, Count, FailMode, Identity, IdentityPart, Limit, Policy, RouteHeaders,
        RoutePolicy, SharedBudget, TierPolicy, Window,
    },
    registry::{CostFrom, RouteDeclaration},
};
