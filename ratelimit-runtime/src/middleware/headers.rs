//! Rate-limit response headers: the conventional `X-RateLimit-*` family and the IETF draft
//! fields `RateLimit-Policy` / `RateLimit` (draft-ietf-httpapi-ratelimit-headers).

use actix_web::{
    http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER},
    web::Bytes,
};

pub use super::header_families::HeaderFamilies;
use super::route_info::RouteInfo;
use crate::store::LimitState;

const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Whole seconds, rounded up (a client that waits this long is allowed again).
pub(crate) fn ceil_secs(millis: u64) -> u64 {
    millis.div_ceil(1000)
}

/// Sets the headers of a limited response: every stacked limit in `RateLimit-Policy`, and
/// the binding limit's state (`index` into the route's limits) in the others.
///
/// The values that change per request are written into one buffer of their exact length
/// and handed out as slices of it: two allocations for all of them, on the path every
/// allowed request takes.
pub(crate) fn insert(
    headers: &mut HeaderMap,
    families: HeaderFamilies,
    route: &RouteInfo,
    (index, binding): (usize, &LimitState),
) {
    let mut remaining = itoa::Buffer::new();
    let remaining = remaining.format(binding.remaining).as_bytes();
    let mut reset = itoa::Buffer::new();
    let reset = reset
        .format(ceil_secs(binding.reset_after.as_millis() as u64))
        .as_bytes();
    let name = route
        .policy_names
        .get(index)
        .filter(|_| families.ietf_draft)
        .map(String::as_bytes);
    let mut len = 0;
    if families.x_ratelimit {
        len += remaining.len() + reset.len();
    }
    if let Some(name) = name {
        len += name.len() + ";r=".len() + remaining.len() + ";t=".len() + reset.len();
    }
    let mut text = Vec::with_capacity(len);
    if families.x_ratelimit {
        text.extend_from_slice(remaining);
        text.extend_from_slice(reset);
    }
    if let Some(name) = name {
        for part in [name, b";r=", remaining, b";t=", reset] {
            text.extend_from_slice(part);
        }
    }
    // Exactly as long as it was made, so it becomes `Bytes` without another allocation.
    let text = Bytes::from(text);
    let value = |start: usize, len: usize| {
        HeaderValue::from_maybe_shared(text.slice(start..start + len)).ok()
    };
    let mut at = 0;
    if families.x_ratelimit {
        if let Some(limit) = route.limit_headers.get(index) {
            headers.insert(X_LIMIT, limit.clone());
        }
        if let Some(value) = value(at, remaining.len()) {
            headers.insert(X_REMAINING, value);
        }
        at += remaining.len();
        if let Some(value) = value(at, reset.len()) {
            headers.insert(X_RESET, value);
        }
        at += reset.len();
    }
    if families.ietf_draft {
        if let Some(policy) = &route.policy_header {
            headers.insert(POLICY, policy.clone());
        }
        // A policy name that is no header text leaves the field out.
        if let Some(value) = value(at, text.len() - at).filter(|_| name.is_some()) {
            headers.insert(RATELIMIT, value);
        }
    }
}

pub(crate) fn retry_after(headers: &mut HeaderMap, seconds: u64) {
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
}
