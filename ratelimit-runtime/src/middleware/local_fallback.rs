//! `fail = "local"`: while the store fails a route, the route is limited in this process by
//! a memory store, with the same algorithm at a share of the limit, and goes back to the
//! store as soon as it answers.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::Instant,
};

use ratelimit_grammar::check_limit;

use super::telemetry::{FALLBACK_SWITCHES, STORE_ERROR_LOG_EVERY};
use crate::{
    key::RouteKey,
    policy::{Algorithm, Limit},
    store::{CheckRequest, Decision, LimitState, MemoryStore, Store, StoreError},
};

/// Where one route (and policy) is counted now, and when a switch each way was last logged
/// at its own level.
struct RouteState {
    local: bool,
    logged_local: Option<Instant>,
    logged_store: Option<Instant>,
}

/// The process's local limiter for routes that fail `local`, shared by every worker.
pub(crate) struct LocalFallback {
    store: MemoryStore,
    instances: u32,
    /// Routes by `METHOD /pattern` and policy label, once they have been limited here.
    routes: Mutex<HashMap<(String, String), RouteState>>,
    /// Whether any route is limited here now: the store's answers skip the lock otherwise.
    any_local: AtomicBool,
}

impl LocalFallback {
    /// The store of this process's decisions while the store fails: a concurrency place
    /// taken here is given back here.
    pub(crate) fn store(&self) -> &MemoryStore {
        &self.store
    }

    pub(crate) fn new(instances: u32, capacity: usize) -> Self {
        LocalFallback {
            store: MemoryStore::builder().capacity(capacity).build(),
            instances,
            routes: Mutex::default(),
            any_local: AtomicBool::new(false),
        }
    }

    /// This process's share of `limits`: `ceil(max / instances)` each, with the same window
    /// and, where it can count the share, the same algorithm; else a sliding window, else a
    /// fixed window (which counts any share). Each share keeps its limit's identity and
    /// block. Shares that would count in one key (same identity, algorithm and window) keep
    /// the stricter one.
    pub(crate) fn share(&self, limits: &[Limit]) -> Vec<Limit> {
        let mut shares: Vec<Limit> = Vec::with_capacity(limits.len());
        for limit in limits {
            let max = limit.max().div_ceil(self.instances);
            let window = limit.window();
            if limit.is_concurrency() {
                // Each instance lets its share of the places run while the store is away.
                let mut share = Limit::concurrent(max, window);
                if let Some(identity) = limit.identity() {
                    share = share.identified_by(identity);
                }
                shares.push(share);
                continue;
            }
            let algorithm = [
                limit.algorithm(),
                Algorithm::SlidingWindow,
                Algorithm::FixedWindow,
            ]
            .into_iter()
            .find(|algorithm| check_limit(max, window.as_millis(), *algorithm).is_ok())
            .unwrap_or(Algorithm::FixedWindow);
            // The limit's own identity and lockout stay: a per-username share still counts
            // names, not addresses.
            let mut share = Limit::new(max, window, algorithm);
            if let Some(identity) = limit.identity() {
                share = share.identified_by(identity);
            }
            if let Some(block) = limit.block() {
                share = share.blocking(block);
            }
            // A request weighs what it weighs in the limit, at most a whole share: a share
            // smaller than the cost would refuse the request on every instance.
            share = share.costing(limit.cost().min(share.max()));
            if let Some(budget) = limit.budget() {
                share = share.in_budget(budget);
            }
            match shares.iter_mut().find(|s| {
                !s.is_concurrency()
                    && s.algorithm() == algorithm
                    && s.window() == window
                    && s.identity() == limit.identity()
                    && s.budget() == limit.budget()
            }) {
                Some(same_key) if same_key.max() > max => *same_key = share,
                Some(_) => {}
                None => shares.push(share),
            }
        }
        shares
    }

    /// Decides one request in this process; the route's switch to local limiting is logged
    /// when it starts (at most once per route and direction every ten seconds at `warn`, the
    /// others at `debug`) and counted.
    pub(crate) async fn decide(
        &self,
        route: &str,
        policy: &str,
        key: &RouteKey,
        limits: &[Limit],
        now_millis: Option<u64>,
        error: &StoreError,
    ) -> Decision {
        let share = self.share(limits);
        let log_switch = {
            let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
            self.any_local.store(true, Ordering::SeqCst);
            let state = match routes.get_mut(&(route.to_owned(), policy.to_owned())) {
                Some(state) => state,
                None => routes
                    .entry((route.to_owned(), policy.to_owned()))
                    .or_insert(RouteState {
                        local: false,
                        logged_local: None,
                        logged_store: None,
                    }),
            };
            if state.local {
                None
            } else {
                state.local = true;
                Some(paced(&mut state.logged_local))
            }
        };
        if let Some(at_warn) = log_switch {
            let shares: Vec<String> = share.iter().map(ToString::to_string).collect();
            let shares = shares.join(" + ");
            if at_warn {
                tracing::warn!(
                    target: "ratelimit",
                    route = %route,
                    policy = %policy,
                    %error,
                    instances = self.instances,
                    local_limits = %shares,
                    "rate-limit store failing: limiting this route in this process until it answers"
                );
            } else {
                tracing::debug!(
                    target: "ratelimit",
                    route = %route,
                    policy = %policy,
                    %error,
                    local_limits = %shares,
                    "rate-limit store failing again: limiting this route in this process"
                );
            }
            switched(route, "local");
        }
        let request = CheckRequest {
            key,
            limits: &share,
            now_millis,
        };
        match self.store.check(request).await {
            Ok(decision) => decision,
            // The memory store answers every check; were it ever not to, the route would
            // refuse rather than pass.
            Err(_) => Decision::new(share.iter().map(|limit| refused(*limit)).collect()),
        }
    }

    /// The store answered a check of `route` under `policy`: it goes back to the store if
    /// it was limited here (logged as the switch there is).
    pub(crate) fn answered(&self, route: &str, policy: &str) {
        if !self.any_local.load(Ordering::SeqCst) {
            return;
        }
        let log_switch = {
            let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
            let back = match routes.get_mut(&(route.to_owned(), policy.to_owned())) {
                Some(state) if state.local => {
                    state.local = false;
                    Some(paced(&mut state.logged_store))
                }
                _ => None,
            };
            if !routes.values().any(|state| state.local) {
                self.any_local.store(false, Ordering::SeqCst);
            }
            back
        };
        match log_switch {
            Some(true) => tracing::info!(
                target: "ratelimit",
                route = %route,
                policy = %policy,
                "rate-limit store answering again: this route is limited by the store again"
            ),
            Some(false) => tracing::debug!(
                target: "ratelimit",
                route = %route,
                policy = %policy,
                "rate-limit store answering again: this route is limited by the store again"
            ),
            None => return,
        }
        switched(route, "store");
    }
}

/// Whether a switch is logged at its own level: the first, then one every
/// [`STORE_ERROR_LOG_EVERY`] per route (a store that fails one check in two would otherwise
/// log two lines a request); records the time when it is.
fn paced(logged: &mut Option<Instant>) -> bool {
    let now = Instant::now();
    match logged {
        Some(at) if now.saturating_duration_since(*at) < STORE_ERROR_LOG_EVERY => false,
        _ => {
            *logged = Some(now);
            true
        }
    }
}

fn refused(limit: Limit) -> LimitState {
    let window = limit.window().as_duration();
    LimitState::new(limit, false, 0, window, window)
}

/// Counts a switch of `route` to `to` (`local` or `store`).
fn switched(route: &str, to: &'static str) {
    metrics::counter!(FALLBACK_SWITCHES, "route" => route.to_owned(), "to" => to).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Window;

    #[test]
    fn each_process_gets_its_share_of_the_limit() {
        let fallback = LocalFallback::new(4, 1000);
        let share = fallback.share(&[
            Limit::new(100, Window::from_secs(60), Algorithm::SlidingLog),
            Limit::new(10, Window::from_secs(1), Algorithm::Gcra),
            Limit::new(1, Window::from_secs(1), Algorithm::FixedWindow),
        ]);
        assert_eq!(share[0].max(), 25);
        assert_eq!(share[0].algorithm(), Algorithm::SlidingLog);
        // 10 / 4 rounds up to 3 per second: 333 µs apart, within 1 %, still a GCRA.
        assert_eq!((share[1].max(), share[1].algorithm()), (3, Algorithm::Gcra));
        assert_eq!(share[2].max(), 1);
        // 1,000 per ms over 3 instances: 334 per ms, which a GCRA would space 2 µs apart (a
        // third too fast): a sliding window counts it instead.
        let fast = LocalFallback::new(3, 1000).share(&[Limit::new(
            1000,
            Window::from_millis(1),
            Algorithm::Gcra,
        )]);
        assert_eq!(fast[0].max(), 334);
        assert_eq!(fast[0].algorithm(), Algorithm::SlidingWindow);
    }

    /// A concurrency limit's share stays one: a sliding log of its lease's length beside it
    /// is another key, never merged with it.
    #[test]
    fn a_concurrency_share_is_its_own() {
        let minute = Window::from_secs(60);
        let share = LocalFallback::new(2, 1000).share(&[
            Limit::concurrent(5, minute),
            Limit::new(30, minute, Algorithm::SlidingLog),
        ]);
        assert_eq!(
            share,
            [
                Limit::concurrent(3, minute),
                Limit::new(15, minute, Algorithm::SlidingLog)
            ]
        );
    }

    #[test]
    fn a_share_keeps_its_limits_identity_and_block() {
        use crate::policy::{Identity, IdentityPart};
        let by_name = Identity::Parts(&[IdentityPart::Username]);
        let per_name = Limit::new(10, Window::from_secs(300), Algorithm::SlidingWindow)
            .identified_by(by_name)
            .blocking(Window::from_secs(900));
        let per_ip = Limit::new(100, Window::from_secs(300), Algorithm::SlidingWindow);
        let share = LocalFallback::new(2, 1000).share(&[per_ip, per_name]);
        // Same algorithm and window, different identities: two keys, both kept.
        assert_eq!(share.len(), 2);
        assert_eq!((share[1].max(), share[1].identity()), (5, Some(by_name)));
        assert_eq!(share[1].block(), Some(Window::from_secs(900)));
        assert_eq!(share[0].identity(), None);
    }

    /// A GCRA the attribute accepts whose share neither a GCRA nor a sliding window can
    /// count exactly: a fixed window counts it, and nothing panics.
    #[test]
    fn every_share_can_be_counted() {
        let huge = Limit::new(4_000_000_000, Window::from_secs(8000), Algorithm::Gcra);
        let share = LocalFallback::new(3, 1000).share(&[huge]);
        assert_eq!(share[0].max(), 1_333_333_334);
        assert_eq!(share[0].algorithm(), Algorithm::FixedWindow);
        for instances in 1..=16 {
            for max in [1, 2, 3, 7, 999, 1000, 3_362_902, u32::MAX / 2] {
                for algorithm in Algorithm::ALL {
                    for window in [
                        Window::from_millis(1),
                        Window::from_secs(1),
                        Window::from_secs(31 * 86_400),
                    ] {
                        if ratelimit_grammar::check_limit(max, window.as_millis(), algorithm)
                            .is_ok()
                        {
                            let limit = Limit::new(max, window, algorithm);
                            let _ = LocalFallback::new(instances, 10).share(&[limit]);
                        }
                    }
                }
            }
        }
    }

    /// Two limits whose shares would count in one key keep the stricter share.
    #[test]
    fn shares_that_would_share_a_key_keep_the_stricter() {
        let share = LocalFallback::new(3, 1000).share(&[
            Limit::new(100_000, Window::from_secs(1), Algorithm::Gcra),
            Limit::new(50_000, Window::from_secs(1), Algorithm::SlidingWindow),
        ]);
        assert_eq!(share.len(), 1, "{share:?}");
        assert_eq!(
            (share[0].max(), share[0].algorithm()),
            (16_667, Algorithm::SlidingWindow)
        );
    }
}
