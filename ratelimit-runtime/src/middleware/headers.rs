//! Rate-limit response headers: the conventional `X-RateLimit-*` family and the IETF draft
//! fields `RateLimit-Policy` / `RateLimit` (draft-ietf-httpapi-ratelimit-headers).

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::{policy::Limit, store::LimitState};

/// Which header families limited responses carry. Both are on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFamilies {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds).
    pub x_ratelimit: bool,
    /// `RateLimit-Policy: "name";q=10;w=300` and `RateLimit: "name";r=3;t=120`.
    pub ietf_draft: bool,
}

impl Default for HeaderFamilies {
    fn default() -> Self {
        HeaderFamilies {
            x_ratelimit: true,
            ietf_draft: true,
        }
    }
}

/// Whole seconds, rounded up (a client that waits this long is allowed again).
pub(crate) fn ceil_secs(millis: u64) -> u64 {
    millis.div_ceil(1000)
}

/// The policy name of limit `index` of a route named `name` (stacked limits get a suffix).
fn policy_name(name: &str, index: usize, stacked: bool) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c == '"' || c == '\\' || !c.is_ascii_graphic() { '_' } else { c })
        .collect();
    if stacked {
        format!("{clean}.{index}")
    } else {
        clean
    }
}

/// Sets the headers of a limited response: every stacked limit in `RateLimit-Policy`, and
/// the binding limit's state (`index` into `limits`) in the others.
pub(crate) fn insert(
    headers: &mut HeaderMap,
    families: HeaderFamilies,
    name: &str,
    limits: &[Limit],
    (index, binding): (usize, &LimitState),
) {
    let stacked = limits.len() > 1;
    let reset = ceil_secs(binding.reset_after.as_millis() as u64);
    if families.x_ratelimit {
        set(headers, "x-ratelimit-limit", binding.limit.max().to_string());
        set(headers, "x-ratelimit-remaining", binding.remaining.to_string());
        set(headers, "x-ratelimit-reset", reset.to_string());
    }
    if families.ietf_draft {
        let policies: Vec<String> = limits
            .iter()
            .enumerate()
            .map(|(i, l)| {
                format!(
                    "\"{}\";q={};w={}",
                    policy_name(name, i, stacked),
                    l.max(),
                    l.window().as_secs_ceil()
                )
            })
            .collect();
        set(headers, "ratelimit-policy", policies.join(", "));
        set(
            headers,
            "ratelimit",
            format!(
                "\"{}\";r={};t={}",
                policy_name(name, index, stacked),
                binding.remaining,
                reset
            ),
        );
    }
}

pub(crate) fn retry_after(headers: &mut HeaderMap, seconds: u64) {
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
}

fn set(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}
