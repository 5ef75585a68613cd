//! Concurrent checks of one key sharing one script call.
//!
//! The first check of a key runs alone, as usual (its algorithm's own script). Checks of
//! the same key (and the same injected time) that arrive while it is in flight wait in its
//! lane; when it is answered, the first of them leads the next call for all of them at once
//! (`scripts/batch.lua`: `n` waiting, the script answers how many pass), and hands the
//! others their answers: the first `k` pass, in the order they arrived, the rest are
//! refused. So a hot key costs one script call per round trip rather than one per request,
//! and the count stays what single checks in a row would have made it.
//!
//! Only a check of one limit that counts every request and has no lockout shares a call
//! (a failures-only limit needs each request's own receipt, a lockout starts on the
//! refusal itself, a stack decides several limits together). A check that waits longer
//! than its timeout fails as a timeout; one that gave up after its batch was sent may still
//! be counted (the strict side, as for any timed-out check).

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use super::{
    link::{self, Linked},
    script::BatchOutcome,
    CheckRequest, Decision, LimitState, StoreError, StoreErrorKind,
};
use crate::policy::{Count, Limit};

/// Checks waiting for a lane's next call.
type Queue = Vec<oneshot::Sender<Turn>>;

/// What a waiting check is told.
enum Turn {
    /// Its answer, from a call another check led.
    Decided(Result<Decision, StoreError>),
    /// It leads the next call, for itself and these.
    Lead(Queue),
}

/// The lanes of one store (one actix worker's): a key with a call in flight has a lane,
/// where checks of it that arrive meanwhile wait.
#[derive(Default)]
pub(crate) struct Coalescer {
    lanes: Mutex<HashMap<String, Queue>>,
}

impl Coalescer {
    /// Whether `request` may share a call with concurrent checks of its key.
    pub(crate) fn shares(request: &CheckRequest<'_>) -> bool {
        matches!(request.limits, [limit] if limit.block().is_none() && limit.count() == Count::Requests)
    }

    /// Decides `request` (see [`Coalescer::shares`]) on `store` within `timeout`, alone or
    /// with the checks of its key waiting meanwhile.
    pub(crate) async fn check<S: Linked>(
        &self,
        store: &S,
        request: CheckRequest<'_>,
        timeout: Duration,
    ) -> Result<Decision, StoreError> {
        let started = Instant::now();
        let limit = request.limits[0];
        // The key names the limit's algorithm and window; its max (an override may change
        // it while checks are in flight) and the injected time complete the lane.
        let mut lane = request.key.limit_key(&limit);
        lane.push('#');
        lane.push_str(itoa::Buffer::new().format(limit.max()));
        if let Some(now) = request.now_millis {
            lane.push('@');
            lane.push_str(itoa::Buffer::new().format(now));
        }
        let waiting = {
            let mut lanes = lock(&self.lanes);
            match lanes.get_mut(&lane) {
                None => {
                    lanes.insert(lane.clone(), Vec::new());
                    None
                }
                Some(queue) => {
                    let (turn, told) = oneshot::channel();
                    queue.push(turn);
                    Some(told)
                }
            }
        };
        let followers = match waiting {
            None => Vec::new(),
            Some(told) => match tokio::time::timeout(timeout, told).await {
                Err(_) => return Err(StoreError::timeout(timeout)),
                Ok(Err(_)) => {
                    return Err(StoreError::new(
                        StoreErrorKind::Timeout,
                        "the check this one waited for was given up",
                    ))
                }
                Ok(Ok(Turn::Decided(decided))) => return decided,
                Ok(Ok(Turn::Lead(followers))) => followers,
            },
        };
        let mut lead = Lead {
            coalescer: self,
            lane,
            followers,
            answered: false,
        };
        lead.followers.retain(|follower| !follower.is_closed());
        let left = timeout.saturating_sub(started.elapsed());
        if lead.followers.is_empty() {
            let decided = link::check(store, request, left).await;
            lead.answered = true;
            return decided;
        }
        let units = u32::try_from(lead.followers.len() + 1).unwrap_or(u32::MAX);
        let outcome = link::check_batch(store, request, units, left).await;
        lead.answered = true;
        for (index, follower) in std::mem::take(&mut lead.followers).into_iter().enumerate() {
            let decided = outcome
                .as_ref()
                .map(|outcome| decision_at(limit, outcome, index + 1))
                .map_err(Clone::clone);
            let _ = follower.send(Turn::Decided(decided));
        }
        outcome.map(|outcome| decision_at(limit, &outcome, 0))
    }
}

/// The decision for the `index`-th (from 0) of a batch's checks, in the order they arrived.
fn decision_at(limit: Limit, outcome: &BatchOutcome, index: usize) -> Decision {
    let passed = outcome.passed as usize;
    let state = if index < passed {
        let after = u32::try_from(passed - 1 - index).unwrap_or(u32::MAX);
        LimitState::new(
            limit,
            true,
            outcome.remaining.saturating_add(after),
            Duration::ZERO,
            outcome.reset_after,
        )
    } else {
        LimitState::new(limit, false, 0, outcome.retry_after, outcome.reset_after)
    };
    Decision::new(vec![state])
}

/// A check leading its lane's call. When it ends, answered or given up, the next check
/// waiting leads the next call; given up, the checks of its own batch are told it timed out.
struct Lead<'a> {
    coalescer: &'a Coalescer,
    lane: String,
    followers: Queue,
    answered: bool,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.answered {
            for follower in self.followers.drain(..) {
                let _ = follower.send(Turn::Decided(Err(StoreError::new(
                    StoreErrorKind::Timeout,
                    "the check that led this one's call was given up",
                ))));
            }
        }
        let mut lanes = lock(&self.coalescer.lanes);
        let Some(queue) = lanes.get_mut(&self.lane) else {
            return;
        };
        let mut queue = std::mem::take(queue);
        loop {
            if queue.is_empty() {
                lanes.remove(&self.lane);
                return;
            }
            let next = queue.remove(0);
            match next.send(Turn::Lead(queue)) {
                Ok(()) => return,
                // It gave up waiting: the one after it leads.
                Err(Turn::Lead(rest)) => queue = rest,
                Err(Turn::Decided(_)) => return,
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
