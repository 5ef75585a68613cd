//! Local shares of a budget, for routes that sync (`sync = "100ms"`,
//! [`RoutePolicy::syncing`](crate::RoutePolicy::syncing)): one entry per client key, shared
//! by every worker of the process; each holds the units the store counted for this instance
//! at its last call and spends them on requests without calling again, until they are
//! spent or the interval has passed.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use quick_cache::sync::Cache;

use crate::{
    policy::Limit,
    store::{Decision, LimitState, Receipt, Share, StoreError},
};

/// The most client keys whose shares one process keeps; the least recently used beyond it
/// are dropped, and their unspent units stay counted in the store until their window ends
/// (fewer admitted, never more).
const CAPACITY: usize = 16_384;

/// The shares of one process, by client key.
pub(crate) struct Shares {
    entries: Cache<String, Arc<Entry>>,
}

/// One client key's share: its state, and the turn to call the store (one call per key at a
/// time from this process; the others wait for its answer and decide from it).
///
/// The turn is held by the call's own task (an owned guard), so that a request that gives up
/// while the call is on its way lets no other request call beside it.
#[derive(Default)]
pub(crate) struct Entry {
    state: Mutex<State>,
    pub(crate) turn: Arc<tokio::sync::Mutex<()>>,
}

/// What the last call for a key left, in local milliseconds.
#[derive(Default)]
struct State {
    /// The limit it was taken for, at a cost of one (a share is in units, whatever each
    /// request costs; an override that changes the limit starts afresh).
    limit: Option<Limit>,
    /// Until when it may be spent: the call's time plus the interval.
    until: u64,
    /// When it was taken.
    taken_at: u64,
    /// When its interval last started: when it was taken, or kept for another interval.
    renewed_at: u64,
    /// Units left to spend.
    left: u32,
    /// Units spent of it in its interval.
    spent: u32,
    /// The store's figures after the units it granted (`remaining`, `reset_after`), and
    /// where they were counted; `None` when it granted none.
    passed: Option<(LimitState, Option<Receipt>)>,
    /// What a request that finds the share spent is told until `until`, when the store
    /// granted fewer than asked; `None`: such a request calls again.
    refused: Option<LimitState>,
    /// The error of the last call, answered to the requests that find the share spent
    /// until the time beside it, instead of calling again one after another.
    failed: Option<(StoreError, u64)>,
}

/// What an entry asks of the store before its next call: the units to ask for, and the
/// unspent rest of its last share to give back: the limit it was counted in (at a cost of
/// one), the units, and where.
pub(crate) struct Next {
    pub(crate) ask: u32,
    pub(crate) give_back: Option<(Limit, u32, Option<Receipt>)>,
}

impl Shares {
    pub(crate) fn new() -> Self {
        Shares {
            entries: Cache::new(CAPACITY),
        }
    }

    /// The entry of `key`, made empty when there is none.
    pub(crate) fn entry(&self, key: &str) -> Arc<Entry> {
        self.entries
            .get_or_insert_with(key, || Ok::<_, std::convert::Infallible>(Arc::default()))
            .unwrap_or_else(|never| match never {})
    }
}

impl Entry {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The decision on a request of `units` of `limit` at `now` from what the entry holds,
    /// spending them; `None` when only a call can decide (no share for this limit, it has
    /// expired, or it is spent and the store was not out).
    pub(crate) fn decide(&self, limit: &Limit, units: u32, now: u64) -> Option<Decision> {
        let mut state = self.state();
        if state.limit != Some(limit.with_cost(1)) {
            return None;
        }
        if now >= state.until {
            // A share spent from in its interval is kept for another while it lasts (no call:
            // however long units are held, an instance holds at most one share); one left
            // unspent for a whole interval, or a refusal, is asked again.
            let interval = state.until.saturating_sub(state.renewed_at);
            let idle = state.spent == 0 || now >= state.until.saturating_add(interval);
            if idle || state.left < units || state.passed.is_none() {
                return None;
            }
            state.renewed_at = now;
            state.until = now.saturating_add(interval);
            state.spent = 0;
            // What the store refused was told for the last interval: once this share is
            // spent, it is asked again.
            state.refused = None;
        }
        let elapsed = Duration::from_millis(now.saturating_sub(state.taken_at));
        if state.left >= units {
            let (passed, receipt) = state.passed.as_ref()?;
            let (passed, receipt) = (*passed, receipt.clone());
            state.left -= units;
            state.spent += units;
            let remaining = passed.remaining.saturating_add(state.left);
            let reset_after = passed.reset_after.saturating_sub(elapsed);
            let allowed = LimitState::new(*limit, true, remaining, Duration::ZERO, reset_after);
            let mut decision = Decision::new(vec![allowed]);
            decision.from_share = true;
            return Some(match receipt {
                Some(receipt) => decision.with_receipt(receipt),
                None => decision,
            });
        }
        let refused = state.refused?;
        let retry_after = refused
            .retry_after
            .saturating_sub(elapsed)
            .max(Duration::from_millis(1));
        let reset_after = refused.reset_after.saturating_sub(elapsed).max(retry_after);
        let refused = LimitState::new(*limit, false, 0, retry_after, reset_after);
        let mut decision = Decision::new(vec![refused]);
        decision.from_share = true;
        Some(decision)
    }

    /// What to ask the store for `limit` with requests of `units`, shares at most `whole`:
    /// a whole share after one that was spent (or none), else as much as the last one spent
    /// (at least `units`); and the last share's unspent rest, taken out of the entry.
    pub(crate) fn next(&self, limit: &Limit, units: u32, whole: u32) -> Next {
        let mut state = self.state();
        let same = state.limit == Some(limit.with_cost(1));
        let spent_out = state.left < units;
        let ask = if same && !spent_out {
            state.spent.max(units)
        } else {
            whole
        };
        let counted_in = state.limit;
        let give_back = counted_in.filter(|_| state.left > 0).map(|counted_in| {
            let receipt = state.passed.as_ref().and_then(|(_, r)| r.clone());
            (counted_in, std::mem::take(&mut state.left), receipt)
        });
        Next {
            ask: ask.clamp(units.max(1), whole.max(units)),
            give_back,
        }
    }

    /// The error of the last call, while it answers for the entry at `now`.
    pub(crate) fn failure(&self, now: u64) -> Result<(), StoreError> {
        match &self.state().failed {
            Some((error, until)) if now < *until => Err(error.clone()),
            _ => Ok(()),
        }
    }

    /// Keeps the error of a call, to answer with until `until`.
    pub(crate) fn failed(&self, error: StoreError, until: u64) {
        self.state().failed = Some((error, until));
    }

    /// Keeps what the store answered for `unit` (the limit at a cost of one) at `now`, good
    /// until `until`.
    pub(crate) fn took(&self, unit: Limit, share: Share, now: u64, until: u64) {
        let mut state = self.state();
        *state = State {
            limit: Some(unit),
            until,
            taken_at: now,
            renewed_at: now,
            left: share.granted,
            spent: 0,
            passed: share.passed.and_then(|d| {
                let receipt = d.receipt.clone();
                d.limits.first().map(|s| (*s, receipt))
            }),
            refused: share
                .refused
                .and_then(|d| d.limits.first().copied())
                .filter(|s| !s.allowed),
            failed: None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Algorithm, Window};

    const LIMIT: Limit = Limit::new(6_000, Window::from_secs(60), Algorithm::FixedWindow);

    fn share(granted: u32, remaining: u32, refused: bool) -> Share {
        let passed = (granted > 0).then(|| {
            Decision::new(vec![LimitState::new(
                LIMIT,
                true,
                remaining,
                Duration::ZERO,
                Duration::from_secs(30),
            )])
            .with_receipt(Receipt::new(1_000, None))
        });
        let refused = refused.then(|| {
            Decision::new(vec![LimitState::new(
                LIMIT,
                false,
                0,
                Duration::from_secs(30),
                Duration::from_secs(30),
            )])
        });
        Share::new(granted, passed, refused)
    }

    #[test]
    fn a_share_is_spent_locally_then_asks_again() {
        let entry = Entry::default();
        assert!(entry.decide(&LIMIT, 1, 0).is_none(), "nothing taken yet");
        let next = entry.next(&LIMIT, 1, 10);
        assert_eq!((next.ask, next.give_back.is_none()), (10, true));
        entry.took(LIMIT, share(10, 90, false), 0, 100);
        for left in (0..10).rev() {
            let decision = entry.decide(&LIMIT, 1, 50).expect("from the share");
            assert!(decision.allowed && decision.from_share);
            assert_eq!(decision.limits[0].remaining, 90 + left);
            assert_eq!(
                decision.limits[0].reset_after,
                Duration::from_millis(29_950)
            );
            assert_eq!(decision.receipt.unwrap().counted_at_millis(), 1_000);
        }
        assert!(entry.decide(&LIMIT, 1, 50).is_none(), "spent: a call");
        assert_eq!(
            entry.next(&LIMIT, 1, 10).ask,
            10,
            "spent out: a whole share"
        );
    }

    #[test]
    fn a_share_spent_from_lasts_and_one_left_idle_goes_back() {
        let entry = Entry::default();
        entry.took(LIMIT, share(10, 90, false), 0, 100);
        for _ in 0..3 {
            entry.decide(&LIMIT, 1, 10).unwrap();
        }
        // Spent from in its interval: kept for the next one, without a call.
        assert!(entry.decide(&LIMIT, 1, 100).unwrap().allowed);
        // Left unspent for a whole interval since: asked again.
        assert!(
            entry.decide(&LIMIT, 1, 300).is_none(),
            "idle for an interval"
        );
        let next = entry.next(&LIMIT, 1, 10);
        assert_eq!(
            next.ask, 1,
            "as much as its last interval spent, at least a request"
        );
        let (counted_in, rest, receipt) = next.give_back.expect("the unspent rest");
        assert_eq!(counted_in, LIMIT);
        assert_eq!((rest, receipt.unwrap().counted_at_millis()), (6, 1_000));
        assert!(
            entry.next(&LIMIT, 1, 10).give_back.is_none(),
            "given back once"
        );
    }

    #[test]
    fn a_store_out_of_budget_refuses_locally_until_the_interval_ends() {
        let entry = Entry::default();
        entry.took(LIMIT, share(2, 0, true), 0, 100);
        assert!(entry.decide(&LIMIT, 1, 1).unwrap().allowed);
        assert!(entry.decide(&LIMIT, 1, 1).unwrap().allowed);
        let refused = entry.decide(&LIMIT, 1, 40).unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after(), Duration::from_millis(29_960));
        assert!(
            entry.decide(&LIMIT, 1, 100).is_none(),
            "asks again after the interval"
        );
        // A request of more units than are left is refused, as the store would.
        entry.took(LIMIT, share(2, 0, true), 200, 300);
        assert!(!entry.decide(&LIMIT, 3, 201).unwrap().allowed);
        // Another limit (an override changed it) starts afresh.
        let other = Limit::new(12_000, Window::from_secs(60), Algorithm::FixedWindow);
        assert!(entry.decide(&other, 1, 201).is_none());
    }

    #[test]
    fn requests_of_any_cost_spend_one_share() {
        let entry = Entry::default();
        entry.took(LIMIT, share(10, 90, false), 0, 100);
        let costly = LIMIT.with_cost(4);
        let decision = entry.decide(&costly, 4, 1).expect("the same share");
        assert_eq!(decision.limits[0].limit, costly);
        assert_eq!(decision.limits[0].remaining, 96);
        assert!(entry.decide(&LIMIT, 1, 1).unwrap().allowed);
        assert!(entry.decide(&costly, 4, 1).unwrap().allowed, "1 left");
        assert!(
            entry.decide(&costly, 4, 1).is_none(),
            "spent for a cost of 4"
        );
    }

    #[test]
    fn a_kept_share_forgets_the_refusal_and_a_failure_answers_for_its_interval() {
        let entry = Entry::default();
        entry.took(LIMIT, share(3, 0, true), 0, 100);
        assert!(entry.decide(&LIMIT, 1, 50).unwrap().allowed);
        // Kept into the next interval, then spent: asked again, not refused on the old
        // grant's word.
        assert!(entry.decide(&LIMIT, 1, 120).unwrap().allowed);
        assert!(entry.decide(&LIMIT, 1, 121).unwrap().allowed);
        assert!(entry.decide(&LIMIT, 1, 122).is_none());
        let error = StoreError::new(crate::store::StoreErrorKind::Redis, "down");
        entry.failed(error.clone(), 200);
        assert_eq!(entry.failure(150), Err(error));
        assert!(entry.failure(200).is_ok());
    }
}
