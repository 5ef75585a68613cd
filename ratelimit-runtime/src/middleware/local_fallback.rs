//! `fail = "local"`: while the store fails a route, the route is limited in this process by
//! a memory store, with the same algorithm at a share of the limit, and goes back to the
//! store as soon as it answers.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
};

use ratelimit_grammar::check_limit;

use crate::{
    key::RouteKey,
    policy::{Algorithm, Limit},
    store::{CheckRequest, Decision, MemoryStore, Store, StoreError},
};

const SWITCHES: &str = "ratelimit_fallback_switches_total";

/// The process's local limiter for routes that fail `local`, shared by every worker.
pub(crate) struct LocalFallback {
    store: MemoryStore,
    instances: u32,
    /// Routes (`METHOD /pattern`) limited here now, so each switch is logged once.
    local: Mutex<HashSet<String>>,
    /// Whether any route is limited here now: the store's answers skip the lock otherwise.
    any_local: AtomicBool,
}

impl LocalFallback {
    pub(crate) fn new(instances: u32, capacity: usize) -> Self {
        LocalFallback {
            store: MemoryStore::builder().capacity(capacity).build(),
            instances,
            local: Mutex::default(),
            any_local: AtomicBool::new(false),
        }
    }

    /// This process's share of `limits`: `ceil(max / instances)` each, with the same
    /// algorithm and window. A share a GCRA cannot keep within 1 % (its spacing in whole
    /// microseconds) is counted by a sliding window instead.
    pub(crate) fn share(&self, limits: &[Limit]) -> Vec<Limit> {
        limits
            .iter()
            .map(|limit| {
                let max = limit.max().div_ceil(self.instances);
                let window = limit.window();
                let algorithm = match check_limit(max, window.as_millis(), limit.algorithm()) {
                    Ok(()) => limit.algorithm(),
                    Err(_) => Algorithm::SlidingWindow,
                };
                Limit::new(max, window, algorithm)
            })
            .collect()
    }

    /// Decides one request in this process, and logs the route's switch to local limiting
    /// when it is the first since the store last answered.
    pub(crate) async fn decide(
        &self,
        route: &str,
        key: &RouteKey,
        limits: &[Limit],
        now_millis: Option<u64>,
        error: &StoreError,
    ) -> Decision {
        let newly_local = {
            let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            self.any_local.store(true, Ordering::Relaxed);
            local.insert(route.to_owned())
        };
        let share = self.share(limits);
        if newly_local {
            let shares: Vec<String> = share.iter().map(ToString::to_string).collect();
            tracing::warn!(
                target: "ratelimit",
                route = %route,
                %error,
                instances = self.instances,
                local_limits = %shares.join(" + "),
                "rate-limit store failing: limiting this route in this process until it answers"
            );
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

    /// The store answered a check of `route`: it goes back to the store if it was limited
    /// here (logged once).
    pub(crate) fn answered(&self, route: &str) {
        if !self.any_local.load(Ordering::Relaxed) {
            return;
        }
        let back = {
            let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            let back = local.remove(route);
            if local.is_empty() {
                self.any_local.store(false, Ordering::Relaxed);
            }
            back
        };
        if back {
            tracing::info!(
                target: "ratelimit",
                route = %route,
                "rate-limit store answering again: this route is limited by the store again"
            );
            switched(route, "store");
        }
    }
}

fn refused(limit: Limit) -> crate::store::LimitState {
    let window = limit.window().as_duration();
    crate::store::LimitState::new(limit, false, 0, window, window)
}

/// Counts a switch of `route` to `to` (`local` or `store`).
fn switched(route: &str, to: &'static str) {
    metrics::counter!(SWITCHES, "route" => route.to_owned(), "to" => to).increment(1);
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
}
