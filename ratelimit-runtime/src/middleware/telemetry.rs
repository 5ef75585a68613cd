//! Logs (`tracing`) and metrics (`metrics` facade) of every decision. Nothing here ever sees
//! a raw identity value: only its kind (`ip`, `user_id`, `ip+username`, ...).

use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, SharedString};

use super::route_info::RouteInfo;
use crate::{identity::ClientIdentity, store::StoreError};

const DECISIONS: &str = "ratelimit_decisions_total";
const STORE_ERRORS: &str = "ratelimit_store_errors_total";
const STORE_DURATION: &str = "ratelimit_store_duration_seconds";

/// What the `metrics` macros would attach: this module as target, level INFO.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The metric keys of one route, built once: the macros would build (and allocate) a key
/// with its labels on every request, recorder or not. The recorder is still looked up on
/// every use, so one installed later sees every later request.
pub(crate) struct RouteMetrics {
    /// `ratelimit_decisions_total{route, decision}`, by [`Outcome::index`].
    decisions: [Key; Outcome::LABELS.len()],
    store_errors: Key,
    store_duration: Key,
}

impl RouteMetrics {
    /// The keys of the route labelled `route` (`METHOD /pattern`).
    pub(crate) fn new(route: &str) -> Self {
        let route = SharedString::from(route.to_owned());
        let route_label = || Label::new("route", route.clone());
        RouteMetrics {
            decisions: Outcome::LABELS.map(|decision| {
                Key::from_parts(
                    DECISIONS,
                    vec![route_label(), Label::new("decision", decision)],
                )
            }),
            store_errors: Key::from_parts(STORE_ERRORS, vec![route_label()]),
            store_duration: Key::from_parts(STORE_DURATION, vec![route_label()]),
        }
    }
}

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
    /// The `decision` label values.
    const LABELS: [&'static str; 5] = [
        "allowed",
        "rejected",
        "shadow_rejected",
        "failed_open",
        "failed_closed",
    ];

    /// This outcome's `decision` label, as an index into [`Outcome::LABELS`].
    fn index(self) -> usize {
        match self {
            Outcome::Allowed => 0,
            Outcome::Rejected | Outcome::Shielded => 1,
            Outcome::ShadowRejected => 2,
            Outcome::FailedOpen => 3,
            Outcome::FailedClosed => 4,
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
    let key = &route.metrics.decisions[outcome.index()];
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
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
    let key = &route.metrics.store_errors;
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
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
    let key = &route.metrics.store_duration;
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(key, &METADATA)
            .record(elapsed.as_secs_f64());
    });
}
