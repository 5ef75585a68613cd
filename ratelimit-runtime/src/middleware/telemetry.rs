//! Logs (`tracing`) and metrics (`metrics` facade) of every decision. Nothing here ever sees
//! a raw identity value: only its kind (`ip`, `user_id`, `ip+username`, ...).

use std::time::Duration;

use crate::{policy::RoutePolicy, store::StoreError};

/// The decision label of the `ratelimit_decisions_total` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Rejected,
    /// Rejected from the flood shield, without a store call.
    Shielded,
    ShadowRejected,
    FailedOpen,
    FailedClosed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Rejected => "rejected",
            Outcome::Shielded => "rejected",
            Outcome::ShadowRejected => "shadow_rejected",
            Outcome::FailedOpen => "failed_open",
            Outcome::FailedClosed => "failed_closed",
        }
    }
}

/// What a log line says about the route and client.
pub(crate) struct Context<'a> {
    pub(crate) route: &'a str,
    pub(crate) policy: &'a RoutePolicy,
    pub(crate) identity_kind: &'a str,
    pub(crate) fell_back_from: Option<String>,
}

pub(crate) fn decision(cx: &Context<'_>, outcome: Outcome, retry_ms: u64) {
    metrics::counter!(
        "ratelimit_decisions_total",
        "route" => cx.route.to_owned(),
        "decision" => outcome.label(),
    )
    .increment(1);
    let limits = describe_limits(cx.policy);
    let fallback = cx.fell_back_from.as_deref().unwrap_or("");
    match outcome {
        Outcome::Allowed => {}
        Outcome::Rejected | Outcome::Shielded => tracing::warn!(
            target: "ratelimit",
            route = cx.route,
            identity = cx.identity_kind,
            identity_fallback_from = fallback,
            limits = %limits,
            retry_after_ms = retry_ms,
            shielded = outcome == Outcome::Shielded,
            "request rejected: rate limit exceeded"
        ),
        Outcome::ShadowRejected => tracing::info!(
            target: "ratelimit",
            route = cx.route,
            identity = cx.identity_kind,
            identity_fallback_from = fallback,
            limits = %limits,
            retry_after_ms = retry_ms,
            "shadow limit exceeded: request allowed (shadow mode)"
        ),
        Outcome::FailedOpen | Outcome::FailedClosed => {}
    }
}

pub(crate) fn store_error(cx: &Context<'_>, outcome: Outcome, error: &StoreError) {
    metrics::counter!(
        "ratelimit_decisions_total",
        "route" => cx.route.to_owned(),
        "decision" => outcome.label(),
    )
    .increment(1);
    metrics::counter!("ratelimit_store_errors_total", "route" => cx.route.to_owned()).increment(1);
    tracing::error!(
        target: "ratelimit",
        route = cx.route,
        identity = cx.identity_kind,
        limits = %describe_limits(cx.policy),
        fail = %cx.policy.fail(),
        error = %error,
        "rate-limit store error: request {}",
        if outcome == Outcome::FailedOpen { "allowed (fail open)" } else { "refused with 503 (fail closed)" }
    );
}

pub(crate) fn store_latency(route: &str, elapsed: Duration) {
    metrics::histogram!("ratelimit_store_duration_seconds", "route" => route.to_owned())
        .record(elapsed.as_secs_f64());
}

fn describe_limits(policy: &RoutePolicy) -> String {
    policy
        .limits()
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(" + ")
}
