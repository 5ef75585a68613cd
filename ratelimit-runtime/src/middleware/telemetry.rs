//! Logs and spans (`tracing`) and metrics (`metrics` facade) of every decision. Nothing here
//! ever sees a raw identity value: only its kind (`ip`, `user_id`, `ip+username`, ...), and
//! a banned client's fingerprint ([`identity_fingerprint`](crate::key::identity_fingerprint)).

use std::{
    cell::Cell,
    time::{Duration, Instant},
};

use metrics::{Key, Label, Level, Metadata, SharedString, Unit};
use tracing::{field, Span};

use crate::{
    identity::ClientIdentity,
    policy::{FailMode, Limit},
    store::{LimitState, StoreError, StoreErrorKind},
};

const DECISIONS: &str = "ratelimit_decisions_total";
const STORE_ERRORS: &str = "ratelimit_store_errors_total";
const STORE_DURATION: &str = "ratelimit_store_duration_seconds";
const IN_FLIGHT: &str = "ratelimit_in_flight";
const BANS: &str = "ratelimit_bans_total";
pub(crate) const FALLBACK_SWITCHES: &str = "ratelimit_fallback_switches_total";
pub(crate) const LISTED: &str = "ratelimit_listed_total";
pub(crate) const OVERRIDES_APPLIED: &str = "ratelimit_overrides_applied_total";
pub(crate) const OVERRIDES_REFUSED: &str = "ratelimit_overrides_refused_total";

/// Describes every metric the limiter records (its kind, unit and what it counts) to the
/// `metrics` recorder installed now, so that an exporter can say what each is (the
/// Prometheus exporter's `# HELP` lines).
///
/// The limiter calls it itself once an App's routes are known: as each worker builds its App
/// when [`coverage::require_coverage`](crate::coverage::require_coverage) or
/// [`coverage::route_table`](crate::coverage::route_table) has read them (at startup), else on
/// a worker's first request. Call it after installing a recorder later than that. A recorder keeps
/// one description per metric, so calling it again changes nothing.
/// [`guide::observability`](crate::guide::observability) lists the metrics.
pub fn describe_metrics() {
    metrics::describe_counter!(
        DECISIONS,
        Unit::Count,
        "Rate-limit decisions by route, policy and decision (allowed, rejected, shadow_rejected, failed_open, failed_closed)."
    );
    metrics::describe_counter!(
        STORE_ERRORS,
        Unit::Count,
        "Requests whose rate-limit store call failed (timeout, connection, Redis error, unexpected answer), by route and policy."
    );
    metrics::describe_histogram!(
        STORE_DURATION,
        Unit::Seconds,
        "Time one rate-limit store call took, by route and policy."
    );
    metrics::describe_gauge!(
        IN_FLIGHT,
        Unit::Count,
        "Requests holding a place in their route's concurrency limit on this instance, by route and policy."
    );
    metrics::describe_counter!(
        BANS,
        Unit::Count,
        "Bans started (a client refused a ban's count of times), by route, policy and scope (route: the route's own ban; limiter: RateLimiter::ban)."
    );
    metrics::describe_counter!(
        FALLBACK_SWITCHES,
        Unit::Count,
        "Switches of a route that fails `local` to the in-process limit (to=local) and back to the store (to=store)."
    );
    metrics::describe_counter!(
        LISTED,
        Unit::Count,
        "Requests the allow list passed or the deny list refused, by route, list and kind of entry."
    );
    metrics::describe_counter!(
        OVERRIDES_APPLIED,
        Unit::Count,
        "Rate-limit overrides read from a source (file, redis) and put in force."
    );
    metrics::describe_counter!(
        OVERRIDES_REFUSED,
        Unit::Count,
        "Rate-limit overrides refused as a whole (the previous ones stay in force), by source."
    );
}

/// A route's store errors are logged at `error` at most once per this long on one worker
/// (the others at `debug`); the counter metric counts every one.
pub(crate) const STORE_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);

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
    /// `ratelimit_in_flight{route, policy}`: the requests holding a concurrency place.
    in_flight: Key,
    /// Per error kind ([`kind_index`]): when a store error of the route was last logged at
    /// `error` on this worker, and how many have been logged at `debug` only since.
    store_errors_logged: [Cell<Option<Instant>>; 4],
    store_errors_unlogged: [Cell<u64>; 4],
    /// The `policy` label, for log lines too (the default policy and a declaration may
    /// apply to one path with the same limits).
    pub(crate) policy: String,
    /// `METHOD /pattern`, for log lines.
    label: String,
    /// The route's limits as log lines show them (`10 per 5m (sliding_log) + ...`).
    limits_text: String,
    /// The algorithms of the route's limits, each once (`sliding_window+gcra`), for spans.
    algorithms: String,
    /// The route's failure policy, for store-error log lines.
    fail: FailMode,
}

impl RouteMetrics {
    /// The keys of the route labelled `route` (`METHOD /pattern`) under the policy labelled
    /// `policy` (the declaring handler's name, or `default`): a request on a path where the
    /// default policy applies besides a declaration is counted by both, and two declarations
    /// of one path count apart, so the label tells their figures apart.
    pub(crate) fn new(route: &str, policy: &str, limits: &[Limit], fail: FailMode) -> Self {
        let limits_text = limits
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" + ");
        let mut algorithms: Vec<&str> = Vec::with_capacity(limits.len());
        for limit in limits {
            let algorithm = limit.algorithm().as_str();
            if !algorithms.contains(&algorithm) {
                algorithms.push(algorithm);
            }
        }
        let policy_text = policy.to_owned();
        let label = route.to_owned();
        let route = SharedString::from(route.to_owned());
        let policy = SharedString::from(policy.to_owned());
        let labels = || {
            vec![
                Label::new("route", route.clone()),
                Label::new("policy", policy.clone()),
            ]
        };
        RouteMetrics {
            decisions: Outcome::LABELS.map(|decision| {
                let mut labels = labels();
                labels.push(Label::new("decision", decision));
                Key::from_parts(DECISIONS, labels)
            }),
            store_errors: Key::from_parts(STORE_ERRORS, labels()),
            store_duration: Key::from_parts(STORE_DURATION, labels()),
            in_flight: Key::from_parts(IN_FLIGHT, labels()),
            store_errors_logged: Default::default(),
            store_errors_unlogged: Default::default(),
            policy: policy_text,
            label,
            limits_text,
            algorithms: algorithms.join("+"),
            fail,
        }
    }

    /// The gauge of the route's requests holding a concurrency place on this instance.
    pub(crate) fn in_flight(&self) -> metrics::Gauge {
        metrics::with_recorder(|recorder| recorder.register_gauge(&self.in_flight, &METADATA))
    }

    /// Registers the route's counters that alerts watch, at zero: its decisions of every
    /// kind, its store errors and, for a route that fails `local`, its switches each way. A
    /// rule reading an absent series sees no data rather than no errors; with the series
    /// there from the start, an increase from zero is one.
    pub(crate) fn register_at_zero(&self) {
        metrics::with_recorder(|recorder| {
            for key in self.decisions.iter().chain([&self.store_errors]) {
                recorder.register_counter(key, &METADATA).increment(0);
            }
        });
        if self.fail == FailMode::Local {
            for to in ["local", "store"] {
                metrics::counter!(FALLBACK_SWITCHES, "route" => self.label.clone(), "to" => to)
                    .increment(0);
            }
        }
    }

    /// Whether a store error of `kind` met `now` is logged at `error`: the first of its kind,
    /// then one per [`STORE_ERROR_LOG_EVERY`] (each kind on its own pace, so a configuration
    /// error is not hidden behind a timeout's); with how many of its kind were logged at
    /// `debug` only before it.
    fn store_error_logged_at_error(&self, now: Instant, kind: StoreErrorKind) -> Option<u64> {
        let (logged, unlogged) = (
            &self.store_errors_logged[kind_index(kind)],
            &self.store_errors_unlogged[kind_index(kind)],
        );
        match logged.get() {
            Some(last) if now.saturating_duration_since(last) < STORE_ERROR_LOG_EVERY => {
                unlogged.set(unlogged.get() + 1);
                None
            }
            _ => {
                logged.set(Some(now));
                Some(unlogged.replace(0))
            }
        }
    }
}

fn kind_index(kind: StoreErrorKind) -> usize {
    match kind {
        StoreErrorKind::Timeout => 0,
        StoreErrorKind::Connection => 1,
        StoreErrorKind::Redis => 2,
        StoreErrorKind::Protocol => 3,
    }
}

/// A store error's kind as a span's `error.type` shows it.
fn kind_label(kind: StoreErrorKind) -> &'static str {
    match kind {
        StoreErrorKind::Timeout => "timeout",
        StoreErrorKind::Connection => "connection",
        StoreErrorKind::Redis => "redis",
        StoreErrorKind::Protocol => "protocol",
    }
}

/// The span of one decision: target `ratelimit`, name `ratelimit.decision`, level `INFO`,
/// fields named as OpenTelemetry's conventions name them where they have a name
/// (`http.route`, `http.request.method`, `error.type`, `otel.status_code`), so that
/// tracing-opentelemetry exports it as it is. Opened before the flood shield and the store
/// are asked, closed when the decision is made, so its duration is the decision's. The
/// fields known before are set here, the others as they are known; none holds an identity
/// value (the identity's kind only). It is never entered: the decision's log events stay
/// outside it, as a subscriber without spans shows them.
///
/// With no subscriber interested (none installed, or `ratelimit` filtered out below
/// `INFO`), the macro returns a disabled span without evaluating any field, and recording
/// into it does nothing.
pub(crate) fn decision_span(
    route: &RouteMetrics,
    method: &str,
    pattern: &str,
    store: &'static str,
    counting: &'static str,
) -> Span {
    tracing::info_span!(
        target: "ratelimit::decision",
        "ratelimit.decision",
        route = route.label.as_str(),
        policy = route.policy.as_str(),
        "http.request.method" = method,
        "http.route" = pattern,
        algorithm = route.algorithms.as_str(),
        store = store,
        counting = counting,
        identity = field::Empty,
        identity_fallback_from = field::Empty,
        outcome = field::Empty,
        decided_by = field::Empty,
        limit = field::Empty,
        retry_after_ms = field::Empty,
        store_duration_ms = field::Empty,
        wait_ms = field::Empty,
        ban = field::Empty,
        "error.type" = field::Empty,
        "otel.status_code" = field::Empty,
        "otel.status_description" = field::Empty,
    )
}

/// Records who decided (`store`, `flood_shield`, `local`) into a decision's span.
pub(crate) fn decided_by(span: &Span, by: &'static str) {
    // A span no subscriber takes records nothing (every request's path).
    if !span.is_disabled() {
        span.record("decided_by", by);
    }
}

/// Records the client's identity kind (never its value) into a decision's span.
fn record_client(span: &Span, client: &Client<'_>) {
    span.record("identity", client.kind().as_str());
    if let Some(part) = client.identity.fell_back_from {
        span.record("identity_fallback_from", field::display(part));
    }
}

/// The decision label of the `ratelimit_decisions_total` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Rejected,
    /// Rejected from the flood shield, without a store call.
    Shielded,
    /// Served before the limiter saw it (another resource on the path), and over the limit
    /// when counted after the fact: the client got its answer, so it counts as allowed.
    ServedOverLimit,
    ShadowRejected,
    FailedOpen,
    FailedClosed,
    /// The store failed and the route is limited in this process (`fail = "local"`): the
    /// local decision is counted as `allowed` or `rejected` on its own.
    FailedLocal,
    /// Rejected in this process while the store fails: counted as `rejected`, logged at
    /// `debug` (the outage itself is logged at `error`, the switch at `warn`), so a flood
    /// during an outage is not one warning per request.
    LocalRejected,
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

    /// This outcome's `decision` label, as an index into [`Outcome::LABELS`]; none for a
    /// store failure met by a local decision, which counts as `allowed` or `rejected`.
    fn index(self) -> Option<usize> {
        match self {
            Outcome::Allowed | Outcome::ServedOverLimit => Some(0),
            Outcome::Rejected | Outcome::Shielded | Outcome::LocalRejected => Some(1),
            Outcome::ShadowRejected => Some(2),
            Outcome::FailedOpen => Some(3),
            Outcome::FailedClosed => Some(4),
            Outcome::FailedLocal => None,
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

fn count(route: &RouteMetrics, outcome: Outcome) {
    if let Some(index) = outcome.index() {
        let key = &route.decisions[index];
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
    }
}

/// The limit a rejection applied, for a log line.
fn applied(limit: Option<&Limit>) -> String {
    limit.map_or_else(|| "none".to_owned(), ToString::to_string)
}

/// One decision; `applied` is the limit that decided it (the one whose budget comes back
/// last), when one did.
pub(crate) fn decision(
    route: &RouteMetrics,
    span: &Span,
    client: &Client<'_>,
    outcome: Outcome,
    retry_ms: u64,
    applied: Option<&Limit>,
) {
    count(route, outcome);
    if !span.is_disabled() {
        record_client(span, client);
        if let Some(index) = outcome.index() {
            span.record("outcome", Outcome::LABELS[index]);
        }
        if let Some(limit) = applied {
            span.record("limit", field::display(limit));
        }
        if outcome != Outcome::Allowed {
            span.record("retry_after_ms", retry_ms);
        }
    }
    match outcome {
        Outcome::Allowed | Outcome::FailedOpen | Outcome::FailedClosed | Outcome::FailedLocal => {}
        Outcome::Rejected => tracing::warn!(
            target: "ratelimit",
            route = %route.label,
            policy = %route.policy,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limit = %self::applied(applied),
            limits = %route.limits_text,
            retry_after_ms = retry_ms,
            "request rejected: rate limit exceeded"
        ),
        // Every further request of a shielded key, and a refusal in this process while the
        // store fails (the outage itself is logged at error): events too, at debug level, so a
        // flood does not become one warning per request.
        Outcome::Shielded | Outcome::LocalRejected => tracing::debug!(
            target: "ratelimit",
            route = %route.label,
            policy = %route.policy,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limit = %self::applied(applied),
            limits = %route.limits_text,
            retry_after_ms = retry_ms,
            "{}",
            if outcome == Outcome::Shielded {
                "request rejected by the flood shield: rate limit exceeded"
            } else {
                "request rejected in this process while the store fails: rate limit exceeded"
            }
        ),
        Outcome::ServedOverLimit => tracing::info!(
            target: "ratelimit",
            route = %route.label,
            policy = %route.policy,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limit = %self::applied(applied),
            limits = %route.limits_text,
            "request served before the limiter saw it, over the limit: counted after the fact, not refused"
        ),
        Outcome::ShadowRejected => tracing::info!(
            target: "ratelimit",
            route = %route.label,
            policy = %route.policy,
            identity = %client.kind(),
            identity_fallback_from = %client.fallback(),
            limit = %self::applied(applied),
            limits = %route.limits_text,
            retry_after_ms = retry_ms,
            "shadow limit exceeded: request allowed (shadow mode)"
        ),
    }
}

/// A ban that refused a request (`ban`, its state): recorded into the decision's span as
/// `ban` = `started` or `holds`; a ban that started with this request is counted
/// (`ratelimit_bans_total`) and logged at `warn` with the client's `fingerprint`, never its
/// identity.
pub(crate) fn banned(route: &RouteMetrics, span: &Span, fingerprint: &str, ban: &LimitState) {
    let started = ban.remaining == 1;
    span.record("ban", if started { "started" } else { "holds" });
    if !started {
        return;
    }
    let scope = if ban.limit.is_app_ban() {
        "limiter"
    } else {
        "route"
    };
    metrics::counter!(
        BANS,
        "route" => route.label.clone(),
        "policy" => route.policy.clone(),
        "scope" => scope
    )
    .increment(1);
    tracing::warn!(
        target: "ratelimit",
        route = %route.label,
        policy = %route.policy,
        client = fingerprint,
        scope,
        ban = %ban.limit,
        retry_after_ms = ban.retry_after.as_millis() as u64,
        "client banned: refused too often"
    );
}

/// A store call that failed, as one request's decision under one policy met it.
pub(crate) struct StoreFailure<'a> {
    pub(crate) error: &'a StoreError,
    /// The request's earlier store error, met again by a second policy without a store call:
    /// counted as that policy's decision, not as another store error, and logged at `debug`.
    pub(crate) repeated: bool,
    /// The request was answered before its route's guard saw it (counted after the fact):
    /// the client got that answer, neither a 503 nor a pass.
    pub(crate) answered: bool,
}

pub(crate) fn store_error(
    route: &RouteMetrics,
    span: &Span,
    client: &Client<'_>,
    outcome: Outcome,
    failure: &StoreFailure<'_>,
) {
    count(route, outcome);
    let request = if outcome == Outcome::FailedLocal {
        "limited in this process (fail local)"
    } else if failure.answered {
        "already answered, not counted"
    } else if outcome == Outcome::FailedOpen {
        "allowed (fail open)"
    } else {
        "refused with 503 (fail closed)"
    };
    if !span.is_disabled() {
        record_client(span, client);
        // A store failure met by a local decision gets its outcome from that decision.
        if let Some(index) = outcome.index() {
            span.record("outcome", Outcome::LABELS[index]);
        }
        let kind = kind_label(failure.error.kind());
        span.record("error.type", kind);
        span.record("otel.status_code", "ERROR");
        span.record(
            "otel.status_description",
            field::display(format_args!(
                "rate-limit store error ({kind}): request {request}"
            )),
        );
    }
    // One event, at the level the caller names, with the fields every store-error line has.
    macro_rules! store_error_event {
        ($level:ident, $($rest:tt)+) => {
            tracing::$level!(
                target: "ratelimit",
                route = %route.label,
                policy = %route.policy,
                identity = %client.kind(),
                identity_fallback_from = %client.fallback(),
                limits = %route.limits_text,
                fail = %route.fail,
                error = %failure.error,
                $($rest)+
            )
        };
    }
    if failure.repeated {
        store_error_event!(
            debug,
            "rate-limit store error met again by another policy of the request: request {request}"
        );
        return;
    }
    let key = &route.store_errors;
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
    // An outage fails every request: one `error` line per route and worker every ten
    // seconds, saying how many it stands for, rather than one per request.
    match route.store_error_logged_at_error(Instant::now(), failure.error.kind())
    {
        Some(not_logged_at_error) => store_error_event!(
            error,
            at_debug_since_last = not_logged_at_error,
            "rate-limit store error: request {request}"
        ),
        None => store_error_event!(
            debug,
            "rate-limit store error: request {request} (at error level once per 10 s per route, kind of error and worker)"
        ),
    }
}

pub(crate) fn store_latency(route: &RouteMetrics, span: &Span, elapsed: Duration) {
    if !span.is_disabled() {
        span.record("store_duration_ms", elapsed.as_secs_f64() * 1000.0);
    }
    let key = &route.store_duration;
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(key, &METADATA)
            .record(elapsed.as_secs_f64());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routes_store_errors_reach_error_level_once_per_ten_seconds() {
        let metrics = RouteMetrics::new("GET /x", "x", &[], FailMode::Open);
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let timeout = |now| metrics.store_error_logged_at_error(now, StoreErrorKind::Timeout);
        assert_eq!(timeout(t0), Some(0));
        assert_eq!(timeout(at(1)), None);
        assert_eq!(timeout(at(9)), None);
        // Ten seconds on: the next is at error, with the two at debug since.
        assert_eq!(timeout(at(10)), Some(2));
        assert_eq!(timeout(at(11)), None);
        assert_eq!(timeout(at(25)), Some(1));
        // An earlier instant (another task's) is within the pace, not a panic.
        assert_eq!(timeout(t0), None);
        // Another kind is at error at once (a configuration error is not hidden behind a
        // timeout's pace), each kind on its own pace.
        let redis = |now| metrics.store_error_logged_at_error(now, StoreErrorKind::Redis);
        assert_eq!(redis(at(26)), Some(0));
        assert_eq!(redis(at(27)), None);
        assert_eq!(timeout(at(28)), None);
        assert_eq!(timeout(at(35)), Some(2));
    }
}
