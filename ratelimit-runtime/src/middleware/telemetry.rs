//! Logs (`tracing`) and metrics (`metrics` facade) of every decision. Nothing here ever sees
//! a raw identity value: only its kind (`ip`, `user_id`, `ip+username`, ...).

use std::time::Duration;

use super::route_info::RouteInfo;
use crate::{identity::ClientIdentity, store::StoreError};

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
            Outcome::Rejected | Outcome::Shielded => "rejected",
            Outcome::ShadowRejected => "shadow_rejected",
            Outcome::FailedOpen => "failed_open",
            Outcome::FailedClosed => "failed_closed",
        }
    }
}

/// What a log line says about the client: kinds only, never values.
pub(crate) struct Client<'a> {
    pub(crate) identity: &'a ClientIdentity,
}

impl Client<'_> {
    /// `ip`, `user_id`, `ip+username`, ... (built only when a log line is written).
    fn kind(&self) -> String {
        self.identity.kind()
    }

    /// The identity part that was missing when the identity fell back to the client IP.
    fn fallback(&self) -> String {
        self.identity
            .fell_back_from
            .map_or_else(|| "none".to_owned(), |part| part.to_string())
    }
}

fn count(route: &RouteInfo, outcome: Outcome) {
    metrics::counter!(
        "ratelimit_decisions_total",
        "route" => route.metric_label.clone(),
        "decision" => outcome.label(),
    )
    .increment(1);
}

pub(crate) fn decision(route: &RouteInfo, client: &Client<'_>, outcome: Outcome, retry_ms: u64) {
    count(route, outcome);
    match outcome {
        Outcome::Allowed | Outcome::FailedOpen | Outcome::FailedClosed => {}
        Outcome::Rejected => tracing::warn!(
            target: "ratelimit",
            route = %route.label,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limits = %route.limits_text,
            retry_after_ms = retry_ms,
            "request rejected: rate limit exceeded"
        ),
        // Every further request of a shielded key: an event too, at debug level, so a flood
        // does not become one warning per request.
        Outcome::Shielded => tracing::debug!(
            target: "ratelimit",
            route = %route.label,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limits = %route.limits_text,
            retry_after_ms = retry_ms,
            "request rejected by the flood shield: rate limit exceeded"
        ),
        Outcome::ShadowRejected => tracing::info!(
            target: "ratelimit",
            route = %route.label,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limits = %route.limits_text,
            retry_after_ms = retry_ms,
            "shadow limit exceeded: request allowed (shadow mode)"
        ),
    }
}

pub(crate) fn store_error(
    route: &RouteInfo,
    client: &Client<'_>,
    outcome: Outcome,
    error: &StoreError,
) {
    count(route, outcome);
    metrics::counter!("ratelimit_store_errors_total", "route" => route.metric_label.clone())
        .increment(1);
    tracing::error!(
        target: "ratelimit",
        route = %route.label,
        identity = %client.kind(),
        limits = %route.limits_text,
        fail = %route.policy.fail(),
        error = %error,
        "rate-limit store error: request {}",
        if outcome == Outcome::FailedOpen { "allowed (fail open)" } else { "refused with 503 (fail closed)" }
    );
}

pub(crate) fn store_latency(route: &RouteInfo, elapsed: Duration) {
    metrics::histogram!("ratelimit_store_duration_seconds", "route" => route.metric_label.clone())
        .record(elapsed.as_secs_f64());
}
