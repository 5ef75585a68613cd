//! Rate-limit response headers: the conventional `X-RateLimit-*` family and the IETF draft
//! fields `RateLimit-Policy` / `RateLimit` (draft-ietf-httpapi-ratelimit-headers).

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

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
pub(crate) fn insert(
    headers: &mut HeaderMap,
    families: HeaderFamilies,
    route: &RouteInfo,
    (index, binding): (usize, &LimitState),
) {
    let reset = ceil_secs(binding.reset_after.as_millis() as u64);
    if families.x_ratelimit {
        if let Some(limit) = route.limit_headers.get(index) {
            headers.insert(X_LIMIT, limit.clone());
        }
        headers.insert(X_REMAINING, HeaderValue::from(binding.remaining));
        headers.insert(X_RESET, HeaderValue::from(reset));
    }
    if families.ietf_draft {
        if let Some(policy) = &route.policy_header {
            headers.insert(POLICY, policy.clone());
        }
        if let Some(name) = route.policy_names.get(index) {
            let mut numbers = itoa::Buffer::new();
            let mut value = String::with_capacity(name.len() + 26);
            value.push_str(name);
            value.push_str(";r=");
            value.push_str(numbers.format(binding.remaining));
            value.push_str(";t=");
            value.push_str(numbers.format(reset));
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(RATELIMIT, value);
            }
        }
    }
}

pub(crate) fn retry_after(headers: &mut HeaderMap, seconds: u64) {
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
}
