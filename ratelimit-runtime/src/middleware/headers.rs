//! Rate-limit response headers: the conventional `X-RateLimit-*` family and the IETF fields
//! `RateLimit-Policy` / `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11, or the older
//! reading, [`IetfDraft`]).

use actix_web::{
    http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER},
    web::Bytes,
};
use base64::Engine as _;

pub use super::header_families::{HeaderFamilies, IetfDraft};
use super::route_info::RouteInfo;
use crate::{
    key::{PartitionKey, PARTITION_KEY_LEN},
    policy::{gcra_interval_micros, Algorithm},
    store::LimitState,
};

const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `pk` as written in the field: `;pk=:` base64 `:` (12 bytes are 16 characters, unpadded).
const PK_TEXT_LEN: usize = ";pk=:".len() + PARTITION_KEY_LEN.div_ceil(3) * 4 + 1;

/// Whole seconds, rounded up (a client that waits this long is allowed again).
pub(crate) fn ceil_secs(millis: u64) -> u64 {
    millis.div_ceil(1000)
}

/// `t` of `RateLimit` in milliseconds, before it is rounded up to whole seconds.
///
/// Draft 11: the effective window, within which the client can use no more than the quota
/// available now (`remaining`), from the figures every store returns:
///
/// - refused: until a request is allowed again (`retry_after`, as `Retry-After` says);
/// - budget whole: the window (GCRA: one emission interval; a sliding window: the window and
///   a unit's decay), since what is sent now counts that long;
/// - `fixed_window`: until the window ends, when the whole quota comes back;
/// - `gcra`: until the next unit comes back, `reset_after` modulo the emission interval
///   (the arrival time lies that far past the last whole interval);
/// - `sliding_log`: until the request just logged leaves the window (`reset_after`): the
///   reply carries no older entry's time, so this is an upper bound;
/// - a concurrency limit: a second (places come back as requests end);
/// - `sliding_window`: until this window ends, plus `window / limit`: a client that spends
///   `r` now fills this window's count, which then frees its first unit that long into the
///   next window (the estimate never decays faster). Exact when the previous window counted
///   nothing, else an upper bound (its weight frees units sooner).
///
/// Draft 10: `reset_after`, until the budget is whole again.
pub(crate) fn effective_window_ms(state: &LimitState, draft: IetfDraft) -> u64 {
    let reset = u64::try_from(state.reset_after.as_millis()).unwrap_or(u64::MAX);
    if draft == IetfDraft::Draft10 {
        return reset;
    }
    if !state.allowed {
        return u64::try_from(state.retry_after.as_millis()).unwrap_or(u64::MAX);
    }
    // A concurrency limit has no window: its places come back as requests end.
    if state.limit.is_concurrency() {
        return 1000;
    }
    let limit = state.limit;
    let max = u64::from(limit.max());
    let window = limit.window().as_millis();
    let used = max.saturating_sub(u64::from(state.remaining));
    match limit.algorithm() {
        Algorithm::Gcra => {
            let interval = gcra_interval_micros(max, window);
            let ahead = reset.saturating_mul(1000) % interval;
            let next = if used == 0 || ahead == 0 {
                interval
            } else {
                ahead
            };
            next.div_ceil(1000)
        }
        Algorithm::SlidingWindow => {
            // `reset_after` is `2 * window - e` once this window counts anything: `e`, the
            // time into it, is what the store's figures leave room to know.
            let to_window_end = if used == 0 {
                window
            } else {
                reset.saturating_sub(window)
            };
            to_window_end.saturating_add(window.div_ceil(max))
        }
        _ if used == 0 => window,
        _ => reset,
    }
}

/// Sets the headers of a limited response: every stacked limit in `RateLimit-Policy`, and
/// the binding limit's state (`index` into the route's limits) in the others, with the
/// client's partition key when there is one. A route that hides its limits gets none.
///
/// The values that change per request are written into one buffer of their exact length
/// and handed out as slices of it: two allocations for all of them, on the path every
/// allowed request takes.
pub(crate) fn insert(
    headers: &mut HeaderMap,
    families: HeaderFamilies,
    route: &RouteInfo,
    (index, binding): (usize, &LimitState),
    partition: Option<&PartitionKey>,
) {
    if route.policy.hides_headers() {
        return;
    }
    let mut remaining = itoa::Buffer::new();
    let remaining = remaining.format(binding.remaining).as_bytes();
    let reset_secs = ceil_secs(binding.reset_after.as_millis() as u64);
    let mut reset = itoa::Buffer::new();
    let reset = reset.format(reset_secs).as_bytes();
    let window_secs = ceil_secs(effective_window_ms(binding, families.draft));
    let mut window = itoa::Buffer::new();
    let window = window.format(window_secs).as_bytes();
    let name = route
        .policy_names
        .get(index)
        .filter(|_| families.ietf_draft)
        .map(String::as_bytes);
    let mut pk = [0u8; PK_TEXT_LEN];
    let pk: &[u8] = match partition.filter(|_| name.is_some()) {
        Some(key) => {
            pk[..5].copy_from_slice(b";pk=:");
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(key, &mut pk[5..])
                .unwrap_or(0);
            pk[5 + written] = b':';
            &pk[..5 + written + 1]
        }
        None => &[],
    };
    let mut len = 0;
    if families.x_ratelimit {
        len += remaining.len() + reset.len();
    }
    if let Some(name) = name {
        len += name.len() + ";r=".len() + remaining.len() + ";t=".len() + window.len() + pk.len();
    }
    let mut text = Vec::with_capacity(len);
    if families.x_ratelimit {
        text.extend_from_slice(remaining);
        text.extend_from_slice(reset);
    }
    if let Some(name) = name {
        for part in [name, b";r=", remaining, b";t=", window, pk] {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{Limit, Window};

    fn state(
        algorithm: Algorithm,
        (max, window_ms): (u32, u64),
        remaining: u32,
        reset_ms: u64,
    ) -> LimitState {
        LimitState::new(
            Limit::new(max, Window::from_millis(window_ms), algorithm),
            true,
            remaining,
            Duration::ZERO,
            Duration::from_millis(reset_ms),
        )
    }

    #[test]
    fn the_effective_window_follows_each_algorithm() {
        let t = |s: LimitState| effective_window_ms(&s, IetfDraft::Draft11);
        // Fixed window: the window's end.
        assert_eq!(
            t(state(Algorithm::FixedWindow, (10, 60_000), 3, 12_000)),
            12_000
        );
        // GCRA, 120 per minute (one unit every 500 ms): 1,250 ms ahead is 250 ms past two
        // whole intervals, so the next unit is back in 250 ms.
        assert_eq!(t(state(Algorithm::Gcra, (120, 60_000), 117, 1_250)), 250);
        assert_eq!(t(state(Algorithm::Gcra, (120, 60_000), 118, 1_000)), 500);
        // Sliding log: the entry just logged leaves after the window.
        assert_eq!(
            t(state(Algorithm::SlidingLog, (5, 900_000), 3, 900_000)),
            900_000
        );
        // Sliding window of 10 a minute, 40 s into it: 20 s to the window's end, then 6 s for
        // a full count to decay by one.
        assert_eq!(
            t(state(Algorithm::SlidingWindow, (10, 60_000), 6, 80_000)),
            26_000
        );
        // A budget whole again counts for a window (GCRA: an interval).
        assert_eq!(t(state(Algorithm::SlidingLog, (5, 60_000), 5, 0)), 60_000);
        assert_eq!(t(state(Algorithm::Gcra, (120, 60_000), 120, 0)), 500);
        // Refused: until allowed again.
        let mut refused = state(Algorithm::FixedWindow, (10, 60_000), 0, 12_000);
        refused.allowed = false;
        refused.retry_after = Duration::from_millis(12_000);
        assert_eq!(t(refused), 12_000);
        // The older reading: until the budget is whole.
        let gcra = state(Algorithm::Gcra, (120, 60_000), 117, 1_250);
        assert_eq!(effective_window_ms(&gcra, IetfDraft::Draft10), 1_250);
    }
}
