use std::time::Duration;

use crate::policy::Limit;

/// What one limit said about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitState {
    /// The limit this state belongs to.
    pub limit: Limit,
    /// Whether this limit alone would allow the request.
    pub allowed: bool,
    /// Requests left in the window after this one (0 when rejected).
    pub remaining: u32,
    /// How long until a request would be allowed again (zero when allowed).
    pub retry_after: Duration,
    /// How long until the budget is fully restored.
    pub reset_after: Duration,
}

/// The outcome of one check over all stacked limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether every limit allowed the request (and so every limit counted it).
    pub allowed: bool,
    /// One state per stacked limit, in declaration order.
    pub limits: Vec<LimitState>,
}

impl Decision {
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
    /// wait, else the one with the fewest requests left.
    pub fn binding(&self) -> Option<(usize, &LimitState)> {
        let states = self.limits.iter().enumerate();
        if self.allowed {
            states.min_by_key(|(_, l)| l.remaining)
        } else {
            states
                .filter(|(_, l)| !l.allowed)
                .max_by_key(|(_, l)| l.retry_after)
        }
    }
}
