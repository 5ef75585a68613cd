//! The store trait and what one check asks of it.

use std::{future::Future, pin::Pin};

use super::{Decision, Receipt, StoreError, StoreErrorKind};
use crate::{key::RouteKey, policy::Limit};

/// A boxed future returned by [`Store::check`].
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send + 'a>>;

/// A boxed future returned by [`Store::adjust`]: the units given back.
pub type AdjustFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, StoreError>> + Send + 'a>>;

/// A boxed future returned by [`Store::take_share`].
pub type ShareFuture<'a> = Pin<Box<dyn Future<Output = Result<Share, StoreError>> + Send + 'a>>;

/// What [`Store::take_share`] answers: the units of one client's budget counted at once for
/// an instance to decide from (what as many single checks in a row would have counted), and
/// the figures around them. Fields may be added; a store of your own builds it with
/// [`Share::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Share {
    /// The units counted, from 0 to those asked.
    pub granted: u32,
    /// When some were granted: each limit's figures after them (what the last of as many
    /// single checks would be told), with the [`Receipt`] of where they were counted.
    pub passed: Option<Decision>,
    /// When fewer than asked were granted: what a check arriving after them is told
    /// (refused, with its wait).
    pub refused: Option<Decision>,
}

impl Share {
    /// `granted` units, the figures after them (`passed`), and what a check after them is
    /// told (`refused`).
    pub fn new(granted: u32, passed: Option<Decision>, refused: Option<Decision>) -> Self {
        Share {
            granted,
            passed,
            refused,
        }
    }
}

/// A change to one client's budget on one route, outside a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Adjustment<'a> {
    /// `units` back to every limit of the request (never past a whole budget): where the check
    /// with `receipt` counted them, or, without one, from what counts at the time. With a
    /// receipt, a window's unit goes back to the counter of the receipt's window while that
    /// window still counts (a fixed window: the current one; a sliding window: the current or
    /// the previous one), else nothing goes back; a sliding log gets back one request logged at
    /// the receipt's time (the check's own member, or one of the same time when a give-back
    /// without a receipt took it) while that time is in the window; GCRA, one emission
    /// interval. With a receipt, `units` counts checks like the receipt's: a limit with a
    /// [cost](crate::policy::Limit::costing) gets back `units` × its cost, what each such
    /// check counted.
    GiveBack {
        /// How many units each limit gets back (with a receipt, how many checks' worth).
        units: u32,
        /// Where the check that counted them did.
        receipt: Option<&'a Receipt>,
    },
    /// The budget whole again: every limit's count and lockout gone.
    Reset,
    /// `units` counted now in every limit of the request, after the fact and never refused
    /// (what a request turned out to cost once its handler ran): a budget may go below
    /// nothing, at most one whole budget below (a limit's count up to twice its `max`, GCRA's
    /// arrival time up to two windows ahead), and the next requests wait until it is back.
    Charge {
        /// How many units each limit counts.
        units: u32,
    },
    /// The places the check with `receipt` took in the request's
    /// [concurrency limits](crate::policy::Limit::concurrent) given back: its request
    /// ended. Other limits are left alone. A place is found by the receipt's member (the
    /// Redis stores), else by the time it counts from: the receipt's time, which after a
    /// renewal is the renewal's (the memory store). Answers the places given back (0 when
    /// the lease had expired, or was reset). Give a receipt back once: places of one time are
    /// alike in the memory store, so a second release there gives back another request's.
    Release {
        /// Where the check took the places.
        receipt: &'a Receipt,
    },
    /// The places the check with `receipt` took in the request's concurrency limits held
    /// for another lease from now: its request still runs. Other limits are left alone.
    /// Answers when the lease now ends, in milliseconds on the store's clock (the earliest
    /// of the limits'), so that the lease counts from that minus the lease; 0 when a place
    /// was gone (expired, or reset), which is then not taken again.
    Renew {
        /// Where the check took the places (for the memory store, with the time of the
        /// last renewal).
        receipt: &'a Receipt,
    },
}

/// A change to one client's budget on one route: what [`Store::adjust`] is asked.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AdjustRequest<'a> {
    /// The route-and-identity key, as for the check.
    pub key: &'a RouteKey,
    /// The limits to change (the route's, or those counting failures only).
    pub limits: &'a [Limit],
    /// The injected time in milliseconds, or `None` for the store's own clock.
    pub now_millis: Option<u64>,
    /// What to change.
    pub change: Adjustment<'a>,
}

impl<'a> AdjustRequest<'a> {
    /// A change to the budget at `key` for `limits`.
    pub fn new(
        key: &'a RouteKey,
        limits: &'a [Limit],
        now_millis: Option<u64>,
        change: Adjustment<'a>,
    ) -> Self {
        AdjustRequest {
            key,
            limits,
            now_millis,
            change,
        }
    }
}

/// One check: every stacked limit of one route for one client.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    /// The route-and-identity key (the Redis Cluster hash tag).
    pub key: &'a RouteKey,
    /// The stacked limits; all are decided together, all-or-nothing.
    pub limits: &'a [Limit],
    /// The injected time in milliseconds, or `None` for the store's own clock.
    pub now_millis: Option<u64>,
}

/// The latest injected time a store accepts, in milliseconds since the Unix epoch (in the
/// year 2255): the scripts count GCRA's arrival times in microseconds with Lua numbers,
/// which hold whole numbers exactly up to 2^53, and a GCRA arrival time runs up to two
/// windows ahead of the time it is computed at (a stored one up to a window, plus one
/// interval); so the latest time is two of the longest windows short of 2^53 µs.
pub const MAX_INJECTED_MILLIS: u64 = (1 << 53) / 1000 - 2 * crate::policy::MAX_WINDOW_MILLIS;

impl CheckRequest<'_> {
    /// The error every store answers for an injected time past [`MAX_INJECTED_MILLIS`].
    pub(crate) fn time_out_of_range(&self) -> Option<StoreError> {
        time_out_of_range(self.now_millis)
    }
}

impl AdjustRequest<'_> {
    /// The error every store answers for an injected time past [`MAX_INJECTED_MILLIS`].
    pub(crate) fn time_out_of_range(&self) -> Option<StoreError> {
        time_out_of_range(self.now_millis)
    }
}

fn time_out_of_range(now_millis: Option<u64>) -> Option<StoreError> {
    let now = now_millis.filter(|now| *now > MAX_INJECTED_MILLIS)?;
    Some(StoreError::new(
        StoreErrorKind::Protocol,
        format!(
            "injected time {now} ms is past the latest a store accepts, {MAX_INJECTED_MILLIS} ms"
        ),
    ))
}

/// A counter store. Every implementation decides all limits of one request so that a
/// request rejected by one limit consumes none of the others: the stores of this crate in
/// one atomic call, but for [`RedisClusterStore`](super::RedisClusterStore) with stacked
/// limits on two identities (whose keys are in two slots), which sends one call per
/// identity at once and gives back what one counted when another refuses (one more round
/// trip).
pub trait Store: Send + Sync + 'static {
    /// Decides one request. Errors (timeouts, connection loss, script errors) are never
    /// turned into decisions here: the caller applies the route's failure policy.
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a>;

    /// A short name for logs and metrics (`redis`, `redis-cluster`, `memory`).
    fn kind(&self) -> &'static str;

    /// The longest one check may take, when the store bounds its calls itself. The limiter
    /// then adds no timer of its own (unless the deprecated `RateLimiter::timeout` is set).
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// The settings this store was built with and refused, one line each naming the
    /// setting: [`RateLimiter::check_settings`](crate::RateLimiter::check_settings) reports
    /// them with the limiter's own, and an App wrapped with such a limiter does not start.
    /// The default: none.
    fn refused_settings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Decides one request within `timeout` instead of the store's own timeout: what the
    /// limiter calls when the deprecated `RateLimiter::timeout` is set, which may be longer than the
    /// store's. A store that bounds its calls itself must use `timeout` here; the default
    /// runs [`check`](Self::check), which the limiter's own timer then bounds.
    fn check_within<'a>(
        &'a self,
        request: CheckRequest<'a>,
        timeout: std::time::Duration,
    ) -> CheckFuture<'a> {
        let _ = timeout;
        self.check(request)
    }

    /// Decides one request that may wait up to `wait` for its turn (a route's `wait`):
    /// allowed, with [`Decision::delay`] saying how long it waits, when every limit lets it
    /// in at some time within `wait` from now; it is then counted at that time, as if it
    /// arrived then (a window's counter of that time, a log entry of that time, GCRA's
    /// arrival time), and its [`Receipt`](super::Receipt) names that time, so that
    /// [`Adjustment::GiveBack`] with it takes back what it reserved. Refused, it counts
    /// nothing and its `retry_after` says when it could have been counted, however long
    /// that is.
    ///
    /// The limiter asks it only for limits without a block that are no concurrency
    /// limits. The default checks without waiting ([`check`](Self::check)): a store of your
    /// own that does not implement it refuses what would have waited.
    fn reserve<'a>(
        &'a self,
        request: CheckRequest<'a>,
        wait: std::time::Duration,
    ) -> CheckFuture<'a> {
        let _ = wait;
        self.check(request)
    }

    /// [`reserve`](Self::reserve) within `timeout` instead of the store's own timeout, as
    /// [`check_within`](Self::check_within) is for a check: what the limiter calls when the
    /// deprecated `RateLimiter::timeout` is set. The default runs `reserve`, which the
    /// limiter's own timer then bounds.
    fn reserve_within<'a>(
        &'a self,
        request: CheckRequest<'a>,
        wait: std::time::Duration,
        timeout: std::time::Duration,
    ) -> CheckFuture<'a> {
        let _ = timeout;
        self.reserve(request, wait)
    }

    /// Gives units back to one client's budget, or resets it, in one round trip (the
    /// count of units given back). The default answers that the store cannot: a store of
    /// your own that serves `count = "failures"` routes, `Budget` or `RateLimiter::reset`
    /// implements it.
    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        let _ = request;
        Box::pin(std::future::ready(Err(StoreError::new(
            StoreErrorKind::Protocol,
            format!(
                "the `{}` store cannot give units back or reset a budget",
                self.kind()
            ),
        ))))
    }

    /// What a check of `request` would answer now, counting nothing (the client's state,
    /// for an operator's view; never on the request path). The default answers that the
    /// store cannot.
    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        let _ = request;
        Box::pin(std::future::ready(Err(StoreError::new(
            StoreErrorKind::Protocol,
            format!(
                "the `{}` store cannot show a budget without counting",
                self.kind()
            ),
        ))))
    }

    /// Whether this store keeps bans ([`Limit::is_ban`]): a ban's pseudo-limit comes first
    /// in a check's stack, and the check answers as `scripts/check.lua` does: a ban that
    /// holds refuses every limit of the stack at once with the ban's wait (the other bans
    /// letting it through); a refusal, or a ban that [counts one decided
    /// elsewhere](Limit::counts_a_refusal), counts toward each ban, which starts at its max and then answers `remaining` 1. The
    /// stores of this crate do. The default, `false`, makes the limiter send this store no
    /// ban: its routes are checked without their bans, which a warning says once.
    fn bans(&self) -> bool {
        false
    }

    /// Counts up to `units` units of one client's budget at once, as that many single checks
    /// of one unit in a row would (each limit's cost is not applied: a share is in units),
    /// for an instance that decides requests from them (a route's
    /// [`sync`](crate::RoutePolicy::syncing)); the limiter gives back what it does not
    /// spend ([`Adjustment::GiveBack`] with the share's receipt). Limits without a block
    /// that count every request, on one identity.
    ///
    /// `None` (the default) says the store takes no shares: the limiter then checks every
    /// request. The Redis stores take them in one call of `scripts/batch.lua`; the memory
    /// store does not (it decides in the process anyway).
    fn take_share<'a>(&'a self, request: CheckRequest<'a>, units: u32) -> Option<ShareFuture<'a>> {
        let _ = (request, units);
        None
    }

    /// The store one actix worker should use, asked once per worker when its App starts, on
    /// that worker's thread; `None` (the default) makes the worker share this store.
    ///
    /// The Redis stores answer a copy with connections of its own, driven by the worker's
    /// runtime: a check then never hands its command to another thread and back (two
    /// cross-thread wake-ups per request, a large share of a check's CPU).
    fn worker_store(&self) -> Option<std::sync::Arc<dyn Store>> {
        None
    }
}

/// Whether a request on `limits` can wait for its turn: there is a limit, and none has a
/// block, is a concurrency limit (a lockout and a place in flight are taken now or never)
/// or counts failures only (counted after the request ran).
pub(crate) fn reservable(limits: &[Limit]) -> bool {
    !limits.is_empty()
        && limits.iter().all(|limit| {
            limit.block().is_none()
                && !limit.is_concurrency()
                && limit.count() != crate::policy::Count::Failures
        })
}

/// `request` put to `store`, bounded as a check is: by the limiter's `timeout` when set,
/// else by the store's own, else by the default.
pub(crate) async fn adjust_within(
    store: &dyn Store,
    timeout: Option<std::time::Duration>,
    request: AdjustRequest<'_>,
) -> Result<u64, StoreError> {
    let timeout = timeout
        .or_else(|| store.timeout())
        .unwrap_or(super::DEFAULT_TIMEOUT);
    super::within(timeout, store.adjust(request))
        .await
        .unwrap_or_else(|_| Err(StoreError::timeout(timeout)))
}
