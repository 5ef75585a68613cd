use std::time::Duration;

use crate::policy::Limit;

/// What one limit said about one request. A store of your own builds it with
/// [`LimitState::new`]; fields may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitState {
    /// The limit this state belongs to.
    pub limit: Limit,
    /// Whether this limit alone would allow the request.
    pub allowed: bool,
    /// Units left in the window after this one (requests, unless the limit has a
    /// [cost](crate::policy::Limit::cost)); 0 when rejected.
    pub remaining: u32,
    /// How long until a request would be allowed again (zero when allowed).
    pub retry_after: Duration,
    /// How long until the budget is fully restored.
    pub reset_after: Duration,
}

/// The outcome of one check over all stacked limits. A store of your own builds it with
/// [`Decision::new`]; fields may be added.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether every limit allowed the request (and so every limit counted it).
    pub allowed: bool,
    /// Whether a ban refused the request (its wait is the ban's, whatever limit reports it).
    pub(crate) banned: bool,
    /// Whether the request was decided from the instance's share of the budget, without a
    /// store call (a route that syncs).
    pub(crate) from_share: bool,
    /// One state per stacked limit, in declaration order.
    pub limits: Vec<LimitState>,
    /// What the store needs to give this request's units back
    /// ([`Adjustment::GiveBack`](super::Adjustment::GiveBack)), when it counted them and
    /// says so; `None` when it did not say (a unit is then given back from what counts at
    /// that time).
    pub receipt: Option<Receipt>,
}

/// Where a check counted its request, for giving the unit back exactly there: the time of
/// the check on the store's clock (which window counter), and the sliding-log member it
/// logged, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    counted_at_millis: u64,
    member: Option<String>,
    /// Good for concurrency places only (its member): a check split across Cluster slots
    /// counted at more than one time, so units go back from what counts then.
    places_only: bool,
    /// How far ahead of the check's own time the request was counted, in milliseconds: a
    /// reservation's turn ([`Decision::delay`]). Kept here, beside the flag, so that a
    /// decision is no larger for it.
    ahead_millis: u32,
}

impl Receipt {
    /// A check counted at `counted_at_millis` on the store's clock, logging `member` in its
    /// sliding logs.
    pub fn new(counted_at_millis: u64, member: Option<String>) -> Self {
        Receipt {
            counted_at_millis,
            member,
            places_only: false,
            ahead_millis: 0,
        }
    }

    /// This receipt good for concurrency places only (a check split across Cluster slots,
    /// whose parts counted at their own times): a give-back with it takes from what counts.
    pub(crate) fn places_only(mut self) -> Self {
        self.places_only = true;
        self
    }

    /// Where a give-back of units may go by this receipt: `None` for one good for
    /// concurrency places only.
    pub(crate) fn for_units(receipt: Option<&Receipt>) -> Option<&Receipt> {
        receipt.filter(|r| !r.places_only)
    }

    /// The time of the check on the store's clock, in milliseconds.
    pub fn counted_at_millis(&self) -> u64 {
        self.counted_at_millis
    }

    /// The member the check logged in its sliding logs, if it logged one.
    pub fn member(&self) -> Option<&str> {
        self.member.as_deref()
    }
}

impl LimitState {
    /// What `limit` said: whether it `allowed` the request, the requests `remaining` in the
    /// window after it, how long until one is allowed again (`retry_after`, zero when
    /// allowed) and until the budget is whole again (`reset_after`).
    pub const fn new(
        limit: Limit,
        allowed: bool,
        remaining: u32,
        retry_after: Duration,
        reset_after: Duration,
    ) -> Self {
        LimitState {
            limit,
            allowed,
            remaining,
            retry_after,
            reset_after,
        }
    }
}

/// `states` (one per limit, gathered part by part) in the order of `limits`; `None` when a
/// limit has no state.
pub(crate) fn in_order(limits: &[Limit], mut states: Vec<LimitState>) -> Option<Vec<LimitState>> {
    limits
        .iter()
        .map(|limit| {
            let at = states.iter().position(|state| state.limit == *limit)?;
            Some(states.swap_remove(at))
        })
        .collect()
}

impl Decision {
    /// A decision from one state per stacked limit, in declaration order: allowed when
    /// every limit allowed.
    pub fn new(limits: Vec<LimitState>) -> Self {
        Decision {
            allowed: limits.iter().all(|state| state.allowed),
            banned: false,
            from_share: false,
            limits,
            receipt: None,
        }
    }

    /// How long an allowed request waits for its turn before it runs
    /// ([`Store::reserve`](super::Store::reserve) counted it at that time, as if it arrived
    /// then, and its receipt names that time); zero for a check, for a reservation whose
    /// turn was now, and for a decision without a receipt.
    pub fn delay(&self) -> Duration {
        self.receipt.as_ref().map_or(Duration::ZERO, |r| {
            Duration::from_millis(u64::from(r.ahead_millis))
        })
    }

    /// This decision with the request's turn `delay` from now (see [`delay`](Self::delay)),
    /// at most `u32::MAX` ms; on a decision with a receipt
    /// ([`with_receipt`](Self::with_receipt) first), which a turn is given back by: without
    /// one the request does not wait.
    #[must_use]
    pub fn waiting(mut self, delay: Duration) -> Self {
        if let Some(receipt) = &mut self.receipt {
            receipt.ahead_millis = u32::try_from(delay.as_millis()).unwrap_or(u32::MAX);
        }
        self
    }

    /// This decision with the receipt of where it counted the request.
    #[must_use]
    pub fn with_receipt(mut self, receipt: Receipt) -> Self {
        self.receipt = Some(receipt);
        self
    }

    /// The longest wait among the limits that rejected (zero when allowed).
    pub fn retry_after(&self) -> Duration {
        self.limits
            .iter()
            .filter(|l| !l.allowed)
            .map(|l| l.retry_after)
            .max()
            .unwrap_or_default()
    }

    /// The limit to report in headers, with its index: a rejecting one with the longest
    /// wait, else the one with the fewest requests left (units left over the limit's
    /// [cost](crate::policy::Limit::cost): 10 units at 10 a request is one request, fewer
    /// than 2 at 1 a request), and of those the one whose budget
    /// comes back last (with a per-second and a per-minute limit both spent, the per-minute
    /// one's reset is the one to report: a client that waits out only the per-second one's
    /// is still refused).
    pub fn binding(&self) -> Option<(usize, &LimitState)> {
        self.binding_among(|_| true)
    }

    /// [`binding`](Self::binding) among the limits whose state `keep` keeps.
    pub(crate) fn binding_among(
        &self,
        keep: impl Fn(&LimitState) -> bool,
    ) -> Option<(usize, &LimitState)> {
        let states = self.limits.iter().enumerate().filter(|(_, l)| keep(l));
        if self.allowed {
            states.min_by_key(|(_, l)| {
                let requests_left = l.remaining / l.limit.cost().max(1);
                (requests_left, std::cmp::Reverse(l.reset_after))
            })
        } else {
            states
                .filter(|(_, l)| !l.allowed)
                .max_by_key(|(_, l)| l.retry_after)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Algorithm, Window};

    fn state(max: u32, window_ms: u64, remaining: u32, reset_ms: u64) -> LimitState {
        LimitState {
            limit: Limit::new(max, Window::from_millis(window_ms), Algorithm::Gcra),
            allowed: true,
            remaining,
            retry_after: Duration::ZERO,
            reset_after: Duration::from_millis(reset_ms),
        }
    }

    #[test]
    fn of_limits_equally_spent_the_one_back_last_is_reported() {
        let per_second = state(2, 1_000, 0, 1_000);
        let per_minute = state(2, 60_000, 0, 60_000);
        for (limits, index) in [
            (vec![per_second, per_minute], 1),
            (vec![per_minute, per_second], 0),
        ] {
            let decision = Decision::new(limits);
            let (at, binding) = decision.binding().unwrap();
            assert_eq!((at, binding.reset_after), (index, Duration::from_secs(60)));
        }
        // Fewer left still wins over a later reset.
        let decision = Decision::new(vec![state(5, 1_000, 1, 1_000), state(5, 60_000, 3, 60_000)]);
        assert_eq!(decision.binding().unwrap().0, 0);
    }

    #[test]
    fn requests_left_are_units_left_over_the_cost() {
        // 10 units left at 10 a request is one request: fewer than 2 left at 1 a request.
        let mut costly = state(600, 3_600_000, 10, 3_600_000);
        costly.limit = costly.limit.costing(10);
        let decision = Decision::new(vec![state(2, 1_000, 2, 1_000), costly]);
        assert_eq!(decision.binding().unwrap().0, 1);
        // 19 units at 10 a request is still one request, fewer than 2.
        let mut costly = state(600, 3_600_000, 19, 3_600_000);
        costly.limit = costly.limit.costing(10);
        let decision = Decision::new(vec![costly, state(2, 1_000, 2, 1_000)]);
        assert_eq!(decision.binding().unwrap().0, 0);
    }
}
