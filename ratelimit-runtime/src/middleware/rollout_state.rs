//! What a limiter is told about its rollout (`rollout.rs` has the settings that tell it):
//! the App's shadow switch, declarations in code and the
//! problems its settings have; and the warning for forwarding headers no trusted proxy
//! reads.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex,
};

use actix_web::{
    dev::ServiceRequest,
    http::header::{FORWARDED, X_FORWARDED_FOR},
};

use crate::registry::RouteDeclaration;

/// The app's function that weighs a request of one route
/// ([`RateLimiter::cost_of`](super::RateLimiter::cost_of)).
pub(crate) type CostFn = Arc<dyn Fn(&ServiceRequest) -> u32 + Send + Sync>;

/// How often, at most, the forwarding-header warning is logged.
pub(crate) const FORWARDED_WARNING_EVERY_MILLIS: u64 = 60_000;

/// What a limiter is told about its rollout: the shadow switch, code declarations, and the
/// problems its settings have, which refuse startup.
#[derive(Clone, Default)]
pub(crate) struct Rollout {
    /// The App's shadow switch: every limit counts and logs but never refuses, except on
    /// routes that say `enforce = true`.
    pub(crate) shadow: bool,
    /// The routes declared in code, each once.
    pub(crate) declared: Vec<&'static RouteDeclaration>,
    /// The app's cost functions, by route label (`RateLimiter::cost_of`).
    pub(crate) costs: Vec<(String, CostFn)>,
    /// Bad settings, each naming the setting: the coverage check fails on them and the
    /// middleware refuses to start.
    pub(crate) problems: Vec<String>,
    /// Problems found once the App's routes are known (a declaration in code naming no
    /// route), by the coverage check or the first request; shared by every clone.
    found: Arc<Mutex<Vec<String>>>,
    /// When the forwarding-header warning was last logged (milliseconds on the limiter's
    /// local clock, plus one; 0: never); shared by every clone.
    forwarded_warned: Arc<AtomicU64>,
}

impl Rollout {
    /// Every problem known so far: the settings' own, then those found against the App.
    pub(crate) fn problems(&self) -> Vec<String> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        self.problems.iter().chain(found.iter()).cloned().collect()
    }

    /// Records problems found against the App's routes (once each).
    pub(crate) fn found(&self, problems: &[String]) {
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        for problem in problems {
            if !found.contains(problem) {
                found.push(problem.clone());
            }
        }
    }

    /// Logs, at most once a minute per limiter, that `req` carries a forwarding header while
    /// the limiter trusts no proxy: behind a load balancer every client then shares its
    /// address. Cheap on every request: a header lookup, and one atomic load when one is
    /// there.
    /// `trusted_hops`: the limiter's; `now`: its local clock, in milliseconds.
    pub(crate) fn warn_forwarded(
        &self,
        req: &ServiceRequest,
        trusted_hops: usize,
        now: impl FnOnce() -> u64,
    ) {
        if trusted_hops != 0 {
            return;
        }
        let headers = req.headers();
        let header = if headers.contains_key(X_FORWARDED_FOR) {
            "X-Forwarded-For"
        } else if headers.contains_key(FORWARDED) {
            "Forwarded"
        } else {
            return;
        };
        let now = now();
        let last = self.forwarded_warned.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last - 1) < FORWARDED_WARNING_EVERY_MILLIS {
            return;
        }
        // One worker logs; the others see the new time.
        if self
            .forwarded_warned
            .compare_exchange(last, now + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        tracing::warn!(
            target: "ratelimit",
            header,
            "requests carry `{header}` while the limiter trusts no proxy: limits count by the peer address, so behind a load balancer or reverse proxy every client shares one budget (the proxy's); if you run such proxies, give the limiter `.identity(Identities::new().trusted_proxies(TrustedProxies::hops(n)))` (n: how many you run), else ignore this (logged at most once a minute)"
        );
    }
}
