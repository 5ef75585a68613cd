//! Concurrent checks of one key sharing one script call.
//!
//! A check of a key with fewer than two calls in flight runs alone, as usual (its
//! algorithm's own script). Checks of the same key (and the same injected time) that arrive
//! while two are in flight wait in its lane; when one is answered, all of them (at most
//! [`MAX_BATCH`]) go in the next call at once (`scripts/batch.lua`: `n` waiting, the script
//! answers how many pass), and each is handed its answer: the first `k` pass, in the order
//! they arrived, the rest are refused. So a hot key costs at most two script calls per
//! round trip rather than one per request (two, not one, so that the worker decides one
//! call's checks while the other is on its way instead of idling), and the count stays what
//! single checks in a row would have made it: each call is atomic, and one connection's
//! calls run in the order sent. A check that could not expect a call in flight and one
//! more to be answered within its timeout, at the last round trip measured and with half of
//! one to spare (a slow Redis: over 2/5 of the timeout), is decided alone at once instead:
//! waiting could fail it where a call of its own would not.
//!
//! A shared call runs in a task of its own, not in any one check's future: a check that
//! gives up (its client gone, its timeout) never takes the others' call with it, so each
//! of them is counted once, and the call is given the latest deadline of the checks it
//! decides, each of which stops waiting at its own. A check that gave up after its call
//! was sent may still be counted (the strict side, as for any timed-out check).
//!
//! A check shares a call when every limit of it counts every request, none has a lockout,
//! and all count one identity (failures-only limits and lockouts are decided one request
//! at a time, a lockout starting on the refusal itself; a stack over two identities is two
//! keys, on a Cluster two calls). A stack shares as a whole: `k` pass when every limit lets
//! `k` pass. A passed check carries the receipt of where it was counted.

use std::{
    cell::RefCell,
    collections::{HashMap, VecDeque},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use super::{
    script::BatchOutcome, timer, CheckRequest, Decision, LimitState, StoreError, StoreErrorKind,
};
use crate::{
    key::{algorithm_code, RouteKey},
    policy::{Algorithm, Count, Limit},
};

/// A check waiting for its lane's next call: when it stops waiting, and where its answer
/// goes.
struct Waiter {
    deadline: Instant,
    answer: oneshot::Sender<Result<Decision, StoreError>>,
}

/// Checks waiting for a lane's next call, in the order they arrived.
type Queue = VecDeque<Waiter>;

/// The most checks one call decides (the batch script's own bound); more wait for the next.
const MAX_BATCH: usize = 100_000;

/// The most calls of one key in flight at once from one store (one worker): while one is
/// on its way, the worker decides the answers of the other, so it never idles for a round
/// trip with every check of a hot key waiting. One call more than that would only split
/// batches (more calls, no less idle time).
const CALLS_IN_FLIGHT: usize = 2;

/// What a lane's shared calls decide, owned (the key, the limits, the injected time), so
/// that a call runs in a task of its own.
struct Shared {
    key: RouteKey,
    limits: Vec<Limit>,
    now_millis: Option<u64>,
}

/// A key with calls in flight: its name, how many calls, the checks waiting for the next,
/// and what that call decides (kept by the first check that waited).
struct Lane {
    name: Arc<str>,
    in_flight: usize,
    waiting: Queue,
    shared: Option<Arc<Shared>>,
}

/// How a check entered its key's lane.
enum Joined {
    /// Room for a call of its own: it makes one alone, in the lane named.
    Alone(Arc<str>),
    /// It waits for the next shared call's answer.
    Waiting(oneshot::Receiver<Result<Decision, StoreError>>),
    /// Its turn would come too late: it is decided alone, outside the lane.
    Not,
}

/// A store whose checks can share a call: one check alone, or `units` checks of one key
/// together. Clones share the connections and the [`Coalescer`], so a shared call runs on
/// a clone in a task of its own.
pub(crate) trait Sharing: Clone + Send + Sync + 'static {
    /// The lanes of this store's keys.
    fn coalescer(&self) -> &Coalescer;

    fn check_alone<'a>(
        &'a self,
        request: CheckRequest<'a>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Decision, StoreError>> + Send + 'a;

    fn check_together<'a>(
        &'a self,
        request: CheckRequest<'a>,
        units: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<BatchOutcome, StoreError>> + Send + 'a;
}

/// `units` (at most [`MAX_BATCH`]) of one client's budget counted at once by `store`'s batch
/// call, as a [`Share`](super::Share): what [`Store::take_share`](super::Store::take_share)
/// answers for the Redis stores.
pub(crate) fn take_share<'a, S: Sharing>(
    store: &'a S,
    request: CheckRequest<'a>,
    units: u32,
    timeout: Duration,
) -> super::ShareFuture<'a> {
    let units = units.clamp(1, MAX_BATCH as u32);
    Box::pin(async move {
        let outcome = store.check_together(request, units, timeout).await?;
        let states = |passed: bool| {
            let states = request
                .limits
                .iter()
                .zip(&outcome.limits)
                .map(|(limit, b)| {
                    if passed {
                        super::LimitState::new(
                            *limit,
                            true,
                            b.remaining,
                            Duration::ZERO,
                            b.reset_after,
                        )
                    } else {
                        let (allowed, remaining, retry_after, reset_after) = b.then;
                        super::LimitState::new(*limit, allowed, remaining, retry_after, reset_after)
                    }
                });
            Decision::new(states.collect())
        };
        let passed = (outcome.passed > 0).then(|| states(true).with_receipt(outcome.receipt(0)));
        let refused = (outcome.passed < units).then(|| states(false));
        Ok(super::Share::new(outcome.passed, passed, refused))
    })
}

/// The lanes of one store (one actix worker's): a key with calls in flight has a lane,
/// where checks of it that arrive while [`CALLS_IN_FLIGHT`] are in flight wait.
#[derive(Default)]
pub(crate) struct Coalescer {
    lanes: Mutex<HashMap<Arc<str>, Lane, foldhash::fast::RandomState>>,
    /// How long the last call measured took, in µs (0 before any): what a check joining a
    /// lane expects the call in flight and its own to take. Measured on shared calls, on
    /// checks decided alone for not waiting, and on one lone check in [`SAMPLED_EVERY`] (the
    /// usual call at low concurrency, which so reads no clock), so it follows Redis both
    /// ways.
    round_trip_micros: AtomicU64,
    /// Lone checks so far, for sampling their round trips.
    lone: AtomicU64,
}

/// One lone check in this many has its round trip measured.
const SAMPLED_EVERY: u64 = 64;

thread_local! {
    /// Where a check writes its lane's name to look it up: a name is allocated only for a
    /// lane that opens, not for each check that joins one.
    static LANE_NAME: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Coalescer {
    /// Whether `request` may share a call with concurrent checks of its key.
    pub(crate) fn shares(request: &CheckRequest<'_>) -> bool {
        !request.limits.is_empty()
            && request.limits.iter().all(|limit| {
                limit.block().is_none()
                    && limit.count() == Count::Requests
                    && limit.cost() == 1
                    && !limit.is_concurrency()
            })
            && !request.key.spans_identities(request.limits)
    }

    /// Decides `request` (see [`Coalescer::shares`]) on `store` (whose coalescer this is)
    /// within `timeout`, alone or with the checks of its key waiting meanwhile. The store
    /// calls are boxed: most checks of a hot key only wait, and their futures stay small.
    pub(crate) async fn check<S: Sharing>(
        &self,
        store: &S,
        request: CheckRequest<'_>,
        timeout: Duration,
    ) -> Result<Decision, StoreError> {
        let limits = request.limits;
        let joined = LANE_NAME.with_borrow_mut(|lane| {
            // The key, and each limit's algorithm, window and max (an override may change
            // a policy while checks are in flight); the injected time completes the lane.
            lane.clear();
            lane.push_str(request.key.as_str());
            let mut numbers = itoa::Buffer::new();
            for limit in limits {
                lane.push(':');
                lane.push_str(algorithm_code(limit.algorithm()));
                lane.push_str(numbers.format(limit.window().as_millis()));
                lane.push('#');
                lane.push_str(numbers.format(limit.max()));
            }
            if let Some(now) = request.now_millis {
                lane.push('@');
                lane.push_str(numbers.format(now));
            }
            let mut lanes = lock(&self.lanes);
            match lanes.get_mut(lane.as_str()) {
                None => {
                    let name: Arc<str> = Arc::from(lane.as_str());
                    let opened = Lane {
                        name: Arc::clone(&name),
                        in_flight: 1,
                        waiting: VecDeque::new(),
                        shared: None,
                    };
                    lanes.insert(Arc::clone(&name), opened);
                    Joined::Alone(name)
                }
                Some(entry) if entry.in_flight < CALLS_IN_FLIGHT && entry.waiting.is_empty() => {
                    entry.in_flight += 1;
                    Joined::Alone(Arc::clone(&entry.name))
                }
                // Waiting for a call in flight, then for one more, could outlast the
                // timeout (a slow Redis): decided alone at once, as without a lane.
                Some(_) if !self.can_wait(timeout) => Joined::Not,
                Some(entry) => {
                    let (answer, told) = oneshot::channel();
                    entry.waiting.push_back(Waiter {
                        deadline: Instant::now() + timeout,
                        answer,
                    });
                    entry.shared.get_or_insert_with(|| {
                        Arc::new(Shared {
                            key: request.key.clone(),
                            limits: limits.to_vec(),
                            now_millis: request.now_millis,
                        })
                    });
                    Joined::Waiting(told)
                }
            }
        });
        match joined {
            Joined::Not => {
                let started = Instant::now();
                let decided = Box::pin(store.check_alone(request, timeout)).await;
                if decided.is_ok() {
                    self.measured(started);
                }
                decided
            }
            Joined::Waiting(told) => match timer::within(timeout, told).await {
                Err(_) => Err(StoreError::timeout(timeout)),
                Ok(Ok(decided)) => decided,
                Ok(Err(_)) => Err(StoreError::new(
                    StoreErrorKind::Timeout,
                    "the shared call this check waited for was dropped",
                )),
            },
            Joined::Alone(lane) => {
                let sampled = self.round_trip_micros.load(Ordering::Relaxed) == 0
                    || self
                        .lone
                        .fetch_add(1, Ordering::Relaxed)
                        .is_multiple_of(SAMPLED_EVERY);
                let started = sampled.then(Instant::now);
                // Answered or given up, its place in the lane goes to the checks waiting.
                let _call = Call { store, lane: &lane };
                let decided = Box::pin(store.check_alone(request, timeout)).await;
                if let (Ok(_), Some(started)) = (&decided, started) {
                    self.measured(started);
                }
                decided
            }
        }
    }

    /// Whether a check with `timeout` joining a lane can expect the next call, its own,
    /// answered in time: the call in flight (at most one round trip more) and one more, at
    /// the last round trip measured, with half a round trip to spare.
    fn can_wait(&self, timeout: Duration) -> bool {
        let round_trip = Duration::from_micros(self.round_trip_micros.load(Ordering::Relaxed));
        round_trip * 5 / 2 <= timeout
    }

    /// Records the round trip of a call answered, started at `started`.
    fn measured(&self, started: Instant) {
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.round_trip_micros.store(micros, Ordering::Relaxed);
    }

    /// Hands on the place of one call of `lane` that ended: the checks still waiting in the
    /// lane, at most [`MAX_BATCH`] of them, go in the next call, in a task of its own on
    /// `store` (a clone of the store this coalescer serves); the rest wait for the call
    /// after. With none waiting and no other call in flight, the lane goes.
    fn hand_over<S: Sharing>(&self, store: &S, lane: &str) {
        let mut lanes = lock(&self.lanes);
        let Some(entry) = lanes.get_mut(lane) else {
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        entry.waiting.retain(|waiting| !waiting.answer.is_closed());
        let next = match (&entry.shared, entry.waiting.is_empty()) {
            (Some(shared), false) => tokio::runtime::Handle::try_current()
                .ok()
                .map(|runtime| (runtime, Arc::clone(shared))),
            _ => None,
        };
        let Some((runtime, shared)) = next else {
            // None waits (or, outside any runtime, no call can be made: the waiting are
            // told that their call was dropped).
            entry.waiting.clear();
            if entry.in_flight == 0 {
                lanes.remove(lane);
            }
            return;
        };
        let rest = entry.waiting.split_off(entry.waiting.len().min(MAX_BATCH));
        let batch = std::mem::replace(&mut entry.waiting, rest);
        entry.in_flight += 1;
        let lane = Arc::clone(&entry.name);
        drop(lanes);
        runtime.spawn(call_together(store.clone(), lane, shared, batch));
    }
}

/// One shared call of `lane` for `batch`, in the order they arrived, given the latest
/// deadline among them; then the lane's next. The task stays small (its store call is
/// boxed, and the arguments are held once, as an `async fn` would hold them twice): a task
/// of over about 1 KB would take glibc's `malloc` down its slow path for large blocks,
/// which consolidates the free lists every request's small blocks come from.
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` holds each argument twice in its future; this block, once"
)]
fn call_together<S: Sharing>(
    store: S,
    lane: Arc<str>,
    shared: Arc<Shared>,
    batch: Queue,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    async move {
        let _call = Call {
            store: &store,
            lane: &lane,
        };
        let started = Instant::now();
        let latest = batch.iter().map(|waiting| waiting.deadline).max();
        let left = latest.map_or(Duration::ZERO, |latest| {
            latest.saturating_duration_since(started)
        });
        let units = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        let request = CheckRequest {
            key: &shared.key,
            limits: &shared.limits,
            now_millis: shared.now_millis,
        };
        let outcome = Box::pin(store.check_together(request, units, left)).await;
        if outcome.is_ok() {
            store.coalescer().measured(started);
        }
        for (index, waiting) in batch.into_iter().enumerate() {
            let decided = outcome
                .as_ref()
                .map(|outcome| decision_at(&shared.limits, outcome, index))
                .map_err(Clone::clone);
            let _ = waiting.answer.send(decided);
        }
    }
}

/// The decision on `limits` for the `index`-th (from 0) of a batch's checks, in the order
/// they arrived: a passed one is told what is left after it (with the receipt of where it
/// was counted, for an exact give-back), a refused one what each limit tells a check after
/// the passed ones.
fn decision_at(limits: &[Limit], outcome: &BatchOutcome, index: usize) -> Decision {
    let passed = outcome.passed as usize;
    let after = u32::try_from(passed.saturating_sub(index + 1)).unwrap_or(u32::MAX);
    let states = limits.iter().zip(&outcome.limits).map(|(limit, figures)| {
        if index < passed {
            LimitState::new(
                *limit,
                true,
                figures.remaining.saturating_add(after),
                Duration::ZERO,
                passed_reset(limit, figures.reset_after, after),
            )
        } else {
            let (allowed, remaining, retry_after, reset_after) = figures.then;
            LimitState::new(*limit, allowed, remaining, retry_after, reset_after)
        }
    });
    let mut states: Vec<LimitState> = states.collect();
    if index < passed {
        return Decision::new(states).with_receipt(outcome.receipt(index));
    }
    if states.iter().all(|state| state.allowed) {
        // A refused check is never let through: were no limit to say why (a reply at odds
        // with itself), the first refuses it.
        if let Some(first) = states.first_mut() {
            first.allowed = false;
            first.remaining = 0;
        }
    }
    Decision::new(states)
}

/// The reset a passed check of `limit` is told when `after` passed checks follow it in its
/// call, whose last was told `last` (for GCRA in µs, exact): a GCRA's theoretical arrival
/// time moves on by one interval per check, so each is told its own, in ms rounded up as
/// `scripts/gcra.lua` tells a check alone; the other algorithms tell every check of one
/// call the same reset.
fn passed_reset(limit: &Limit, last: Duration, after: u32) -> Duration {
    if limit.algorithm() != Algorithm::Gcra {
        return last;
    }
    let micros = u64::try_from(last.as_micros()).unwrap_or(u64::MAX);
    let own = micros.saturating_sub(u64::from(after).saturating_mul(limit.gcra_interval_micros()));
    Duration::from_millis(own.div_ceil(1000))
}

/// A call of a lane in flight. When it ends, answered or given up, the checks waiting in
/// its lane go in the next.
struct Call<'a, S: Sharing> {
    store: &'a S,
    lane: &'a str,
}

impl<S: Sharing> Drop for Call<'_, S> {
    fn drop(&mut self) {
        self.store.coalescer().hand_over(self.store, self.lane);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
