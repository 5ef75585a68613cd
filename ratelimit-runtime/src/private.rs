//! Paths the `#[rate_limit]` expansion names. Not public API.

pub use actix_web;
pub use inventory;

pub use crate::{
    middleware::{RouteEntry, RouteGuard},
    policy::{Algorithm, FailMode, Identity, IdentityPart, Limit, Policy, RoutePolicy, Window},
    registry::RouteDeclaration,
};
