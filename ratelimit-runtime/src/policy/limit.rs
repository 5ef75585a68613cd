use std::{fmt, num::NonZeroU32, time::Duration};

use ratelimit_grammar::{check_limit, check_window};

use super::{Algorithm, Count, Identity};

pub use ratelimit_grammar::{MAX_EXACT_SLIDING_PRODUCT, MAX_SLIDING_LOG_LIMIT, MAX_WINDOW_MILLIS};

/// A window length: at least one millisecond, at most [`MAX_WINDOW_MILLIS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    millis: u64,
}

impl Window {
    /// A window of `millis` milliseconds.
    ///
    /// # Panics
    ///
    /// When `millis` is zero or above [`MAX_WINDOW_MILLIS`] (in a `const`, a compile error).
    pub const fn from_millis(millis: u64) -> Self {
        match check_window(millis) {
            Ok(()) => Window { millis },
            Err(problem) => panic!("{}", problem.summary()),
        }
    }

    /// A window of whole seconds.
    ///
    /// # Panics
    ///
    /// As [`from_millis`](Self::from_millis): when `secs` is zero or more than 31 days.
    pub const fn from_secs(secs: u64) -> Self {
        // Saturating: a number of seconds past u64's milliseconds must be refused as too
        // long, not wrap to a short window in a release build.
        Self::from_millis(secs.saturating_mul(1000))
    }

    /// The length in milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// The length as a [`Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_millis(self.millis)
    }

    /// The length in whole seconds, rounded up (for headers such as `RateLimit-Policy: w=`).
    pub const fn as_secs_ceil(self) -> u64 {
        self.millis.div_ceil(1000)
    }
}

impl fmt::Display for Window {
    /// Formats as humantime does (`5m`, `1h 30m`, `500ms`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 5] = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1000, "s"),
            (1, "ms"),
        ];
        let mut rest = self.millis;
        let mut first = true;
        for (size, unit) in UNITS {
            if rest >= size {
                if !first {
                    f.write_str(" ")?;
                }
                write!(f, "{}{unit}", rest / size)?;
                rest %= size;
                first = false;
            }
        }
        Ok(())
    }
}

/// One limit: at most `max` requests per `window`, counted by `algorithm`; every request,
/// or only failures ([`counting`](Self::counting)), and with a lockout once it refuses
/// ([`blocking`](Self::blocking)).
///
/// ```
/// use ratelimit_runtime::policy::{Algorithm, Count, Limit, Window};
///
/// // `#[rate_limit(limit = 10, window = "5m", count = "failures", block = "15m")]`
/// const SIGN_IN: Limit = Limit::new(10, Window::from_secs(300), Algorithm::SlidingWindow)
///     .counting(Count::Failures)
///     .blocking(Window::from_secs(900));
/// assert_eq!(SIGN_IN.to_string(), "10 per 5m (sliding_window), failures only, block 15m");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    max: NonZeroU32,
    window: Window,
    algorithm: Algorithm,
    count: Count,
    block: Option<Window>,
    identity: Option<Identity>,
    cost: NonZeroU32,
    budget: Option<&'static str>,
    /// A concurrency limit ([`concurrent`](Limit::concurrent)): `max` requests in flight,
    /// each holding a lease of `window`.
    in_flight: bool,
    /// A ban's pseudo-limit ([`Ban`](super::Ban)): 0 none, else [`BAN`] with [`LIMITER_BAN`]
    /// for the limiter's and [`COUNTING`] when it counts one refusal decided elsewhere.
    ban: u8,
}

impl Limit {
    /// A limit of `max` requests per `window`.
    ///
    /// # Panics
    ///
    /// When `max` is zero, when a sliding log would hold more than
    /// [`MAX_SLIDING_LOG_LIMIT`] entries, when a sliding window's `max` × window in
    /// milliseconds reaches [`MAX_EXACT_SLIDING_PRODUCT`] (its weighted count would no longer
    /// be exact), or when a GCRA limit's rate would change by more than 1 % with requests
    /// spaced a whole number of microseconds apart (in a `const`, a compile error).
    pub const fn new(max: u32, window: Window, algorithm: Algorithm) -> Self {
        if let Err(problem) = check_limit(max, window.as_millis(), algorithm) {
            panic!("{}", problem.summary());
        }
        let Some(max) = NonZeroU32::new(max) else {
            panic!("a rate limit must allow at least one request");
        };
        Limit {
            max,
            window,
            algorithm,
            count: Count::Requests,
            block: None,
            identity: None,
            cost: NonZeroU32::MIN,
            budget: None,
            in_flight: false,
            ban: 0,
        }
    }

    /// A concurrency limit: at most `max` requests of one client in flight at once, on
    /// every instance together (`#[rate_limit(concurrency = 3)]`). Each admitted request
    /// holds a place until its response body has been sent or its client went away; the
    /// place is a lease of `lease` in the store, renewed every third of it while the request
    /// runs, so that the places of an instance that died holding them (`kill -9`, a lost
    /// host) are free again at most `lease` after its last renewal. A refused request waits
    /// for nothing in the store: its `Retry-After` is a second at most, as places are given
    /// back when requests end, not at a window's edge.
    ///
    /// In the store a concurrency limit is a sliding log over `lease` whose entries are the
    /// leases, removed when their requests end: it stacks with the route's rate limits in
    /// the same script call, all-or-nothing.
    ///
    /// ```
    /// use ratelimit_runtime::policy::{Limit, Window};
    ///
    /// // `#[rate_limit(concurrency = 3, lease = "30s")]`
    /// const EXPORTS: Limit = Limit::concurrent(3, Window::from_secs(30));
    /// assert!(EXPORTS.is_concurrency());
    /// assert_eq!(EXPORTS.to_string(), "3 in flight (lease 30s)");
    /// ```
    ///
    /// # Panics
    ///
    /// When `max` is zero or above [`MAX_CONCURRENCY`](ratelimit_grammar::MAX_CONCURRENCY), or
    /// `lease` is under a second or over an hour (in a `const`, a compile error).
    pub const fn concurrent(max: u32, lease: Window) -> Self {
        if max == 0 || max > ratelimit_grammar::MAX_CONCURRENCY {
            panic!("a concurrency limit lets 1 to 1000 requests run at once");
        }
        let millis = lease.as_millis();
        if millis < ratelimit_grammar::MIN_LEASE_MILLIS
            || millis > ratelimit_grammar::MAX_LEASE_MILLIS
        {
            panic!("a concurrency limit's lease is from 1s to 1h");
        }
        let mut limit = Limit::new(max, lease, Algorithm::SlidingLog);
        limit.in_flight = true;
        limit
    }

    /// This limit counting `cost` units for each request instead of one: an export that
    /// weighs ten reads spends ten units of a `limit = 1000` budget, so a hundred exports
    /// spend it. A request passes only when its whole cost fits (a fixed window: `count +
    /// cost <= max`; a sliding window: the weighted estimate `+ cost <= max`; a sliding log
    /// logs `cost` entries; GCRA moves its arrival time on by `cost` emission intervals),
    /// and a refused request spends nothing. `remaining` and the rate-limit headers count
    /// units. The default is 1.
    ///
    /// ```
    /// use ratelimit_runtime::policy::{Algorithm, Limit, Window};
    ///
    /// // `#[rate_limit(limit = 1000, window = "1h", cost = 10)]`
    /// const EXPORT: Limit =
    ///     Limit::new(1000, Window::from_secs(3600), Algorithm::SlidingWindow).costing(10);
    /// assert_eq!(EXPORT.cost(), 10);
    /// assert_eq!(EXPORT.to_string(), "1000 per 1h (sliding_window), cost 10");
    /// ```
    ///
    /// # Panics
    ///
    /// When `cost` is zero or larger than the limit's `max` (a request that could never
    /// pass; in a `const`, a compile error).
    #[must_use]
    pub const fn costing(mut self, cost: u32) -> Self {
        if self.in_flight && cost != 1 {
            panic!("a concurrency limit counts requests in flight: it has no cost");
        }
        if let Err(problem) = ratelimit_grammar::check_cost(cost, self.max.get()) {
            panic!("{}", problem.summary());
        }
        let Some(cost) = NonZeroU32::new(cost) else {
            panic!("a cost must be at least one unit");
        };
        self.cost = cost;
        self
    }

    /// This limit counting clients by `identity` rather than by its route's identity: one
    /// route may then stack, say, a limit per address and a limit per username. A request
    /// passes only when every limit allows it, and a limit that allows it is not charged
    /// when another refuses it.
    ///
    /// # Panics
    ///
    /// When `identity` has no part, names one twice or names a header that cannot exist.
    #[must_use]
    pub const fn identified_by(mut self, identity: Identity) -> Self {
        identity.assert_valid();
        self.identity = Some(identity);
        self
    }

    /// This limit counting `count`: every request (the default), or only those that fail
    /// ([`Count::Failures`]: a request reserves its unit on the way in and gives it back when
    /// the handler answers with a success: a 2xx unless the handler marks its attempt, see
    /// `AttemptOutcome` and `Responses::success_statuses`).
    #[must_use]
    pub const fn counting(mut self, count: Count) -> Self {
        if self.in_flight && matches!(count, Count::Failures) {
            panic!("a concurrency limit counts every request in flight, not failures");
        }
        self.count = count;
        self
    }

    /// This limit locking a client out for `block` once it refuses one of its requests: every
    /// request of that client on the route is refused until the block ends (`Retry-After`
    /// says when), after which the limit's budget is whole. A block shorter than the time
    /// the refused budget needs to be whole again lasts that long instead, so that a short
    /// block never makes the limit weaker. The lockout lives in the store,
    /// beside the limit's key: in Redis it outlives a restart of the service and holds on
    /// every instance.
    #[must_use]
    pub const fn blocking(mut self, block: Window) -> Self {
        if self.in_flight {
            panic!("a concurrency limit locks nobody out: its places come back as requests end");
        }
        self.block = Some(block);
        self
    }

    /// This limit counting `cost` units per request, a cost already checked to be from 1 to
    /// its `max` (a request's own cost, [`RateLimiter::cost_of`](crate::RateLimiter::cost_of)).
    pub(crate) const fn with_cost(mut self, cost: u32) -> Self {
        // A request holds one place of a concurrency limit, whatever it weighs, and is one
        // refusal (or failure) toward a ban.
        if self.in_flight || self.ban != 0 {
            return self;
        }
        if let Some(cost) = NonZeroU32::new(cost) {
            if cost.get() <= self.max.get() {
                self.cost = cost;
            }
        }
        self
    }

    /// This limit without its lockout: what a route in shadow counts with, so that its
    /// would-be refusals lock nobody out when it starts to enforce.
    pub(crate) const fn without_block(mut self) -> Self {
        self.block = None;
        self
    }

    /// Whether this is a concurrency limit ([`concurrent`](Self::concurrent)): then
    /// [`max`](Self::max) is how many requests may be in flight and
    /// [`window`](Self::window) is the lease.
    pub const fn is_concurrency(&self) -> bool {
        self.in_flight
    }

    /// A ban's pseudo-limit: `times` refusals counted in a fixed window of `within`, the ban
    /// a lockout of `duration`; the limiter's ban is keyed under a tag of its own.
    pub(crate) const fn ban_of(
        times: u32,
        within: Window,
        duration: Window,
        scope: super::ban::BanScope,
        count: Count,
    ) -> Self {
        let mut limit = Limit::new(times, within, Algorithm::FixedWindow);
        limit.block = Some(duration);
        limit.count = count;
        limit.ban = match scope {
            super::ban::BanScope::Route => BAN,
            super::ban::BanScope::App => {
                limit.budget = Some(APP_BAN);
                BAN | LIMITER_BAN
            }
        };
        limit
    }

    /// Whether this is a ban ([`Ban`](super::Ban)) as a store is asked to keep it, first in a
    /// check's stack: [`max`](Self::max) refusals within a fixed [`window`](Self::window)
    /// start a lockout of [`block`](Self::block), which refuses the whole stack at once. A
    /// ban [counting failures](Count::Failures) counts those too, after the fact (the limiter
    /// asks the store to count one refusal with it). A store of one's own that keeps no bans
    /// answers [`Store::bans`](crate::store::Store::bans) `false`, and is never sent one.
    pub const fn is_ban(&self) -> bool {
        self.ban != 0
    }

    /// Whether this is the limiter's ban (keyed under a tag of its own, not the route's).
    pub(crate) const fn is_app_ban(&self) -> bool {
        self.ban & LIMITER_BAN != 0
    }

    /// This ban asked to count one refusal decided elsewhere (the route's limits in another
    /// Cluster slot, or a failure once its handler ran), as the limiter asks a store: a check
    /// of it counts a refusal toward it as if a limit of the stack had refused (`br` in
    /// `scripts/check.lua`). A limit that is no ban is returned as it is.
    pub const fn counting_a_refusal(mut self) -> Self {
        if self.ban != 0 {
            self.ban |= COUNTING;
        }
        self
    }

    /// Whether this ban is asked to count one refusal decided elsewhere (by another call of
    /// a check split across Cluster slots, or a failure once its handler ran): its check
    /// counts a refusal toward it as if a limit of the stack had refused.
    pub const fn counts_a_refusal(&self) -> bool {
        self.ban & COUNTING != 0
    }

    /// This ban as a check carries it (not counting a refusal decided elsewhere).
    pub(crate) const fn as_checked(mut self) -> Self {
        self.ban &= !COUNTING;
        self
    }

    /// A ban's code in `scripts/check.lua`: `bn` counts the refusals of its check, `br` one
    /// refusal decided elsewhere; `None` for a limit.
    pub(crate) const fn ban_code(&self) -> Option<&'static str> {
        if self.ban == 0 {
            None
        } else if self.ban & COUNTING != 0 {
            Some("br")
        } else {
            Some("bn")
        }
    }

    /// How many requests the window allows.
    pub const fn max(&self) -> u32 {
        self.max.get()
    }

    /// The window length.
    pub const fn window(&self) -> Window {
        self.window
    }

    /// The counting algorithm.
    pub const fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Which requests use the budget.
    pub const fn count(&self) -> Count {
        self.count
    }

    /// How long a client stays refused once this limit refuses it, if it does.
    pub const fn block(&self) -> Option<Window> {
        self.block
    }

    /// The identity this limit counts by, when it is not its route's.
    pub const fn identity(&self) -> Option<Identity> {
        self.identity
    }

    /// The units each request counts ([`costing`](Self::costing); 1 unless set).
    pub const fn cost(&self) -> u32 {
        self.cost.get()
    }

    /// The shared budget this limit is, by name, when it is one
    /// ([`SharedBudget`](crate::SharedBudget)): counted in one key per client across every
    /// route that names it, rather than in the route's own.
    pub const fn budget(&self) -> Option<&'static str> {
        self.budget
    }

    /// This limit as the shared budget `name` (its identity set).
    pub(crate) const fn in_budget(mut self, name: &'static str) -> Self {
        self.budget = Some(name);
        self
    }

    /// A GCRA limit's emission interval in microseconds (see [`gcra_interval_micros`]).
    pub(crate) const fn gcra_interval_micros(&self) -> u64 {
        gcra_interval_micros(self.max.get() as u64, self.window.as_millis())
    }
}

/// The GCRA's emission interval `T = max(1, floor(window_ms * 1000 / max))` µs, as
/// `scripts/parts/gcra_tat.lua` computes it: each request moves the theoretical arrival time
/// on by `T`, and the tolerance `T * max` lets a burst of `max` pass from idle.
pub(crate) const fn gcra_interval_micros(max: u64, window_millis: u64) -> u64 {
    let interval = window_millis * 1000 / max;
    if interval < 1 {
        1
    } else {
        interval
    }
}

/// [`Limit::ban`]: a ban.
const BAN: u8 = 1;
/// [`Limit::ban`]: the limiter's ban.
const LIMITER_BAN: u8 = 2;
/// [`Limit::ban`]: counting one refusal decided elsewhere.
const COUNTING: u8 = 4;

/// The name the limiter's ban is keyed under, in place of a shared budget's (no budget can
/// be named so).
pub(crate) const APP_BAN: &str = "!ban";

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ban != 0 {
            let block = match self.block {
                Some(block) => block,
                None => Window::from_millis(0),
            };
            return write!(f, "ban {} in {} for {block}", self.max, self.window);
        }
        if self.in_flight {
            write!(f, "{} in flight (lease {})", self.max, self.window)?;
            if let Some(identity) = self.identity {
                write!(f, ", by {identity}")?;
            }
            return Ok(());
        }
        write!(f, "{} per {} ({})", self.max, self.window, self.algorithm)?;
        if self.count == Count::Failures {
            f.write_str(", failures only")?;
        }
        if let Some(block) = self.block {
            write!(f, ", block {block}")?;
        }
        if let Some(identity) = self.identity {
            write!(f, ", by {identity}")?;
        }
        if self.cost.get() != 1 {
            write!(f, ", cost {}", self.cost)?;
        }
        if let Some(budget) = self.budget {
            write!(f, ", budget {budget}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_format_like_their_declaration() {
        assert_eq!(Window::from_millis(300_000).to_string(), "5m");
        assert_eq!(Window::from_millis(5_400_000).to_string(), "1h 30m");
        assert_eq!(Window::from_millis(500).to_string(), "500ms");
        assert_eq!(Window::from_millis(1500).as_secs_ceil(), 2);
    }

    #[test]
    #[should_panic(expected = "at least 1ms")]
    fn a_zero_window_cannot_be_built() {
        let _ = Window::from_millis(0);
    }

    /// Seconds whose milliseconds overflow are too long, never wrapped to a short window.
    #[test]
    #[should_panic(expected = "at most 31 days")]
    fn seconds_past_u64_milliseconds_are_too_long_not_short() {
        let _ = Window::from_secs(u64::MAX / 1000 + 1);
    }

    #[test]
    #[should_panic(expected = "at least one request")]
    fn a_zero_limit_cannot_be_built() {
        let _ = Limit::new(0, Window::from_secs(1), Algorithm::FixedWindow);
    }

    #[test]
    #[should_panic(expected = "sliding log allows at most 1000")]
    fn a_huge_sliding_log_cannot_be_built() {
        let _ = Limit::new(1001, Window::from_secs(1), Algorithm::SlidingLog);
    }

    /// GCRA spaces requests a whole number of microseconds apart: 5,000 per millisecond would
    /// silently be 1,000, 1,500 per 2 ms 2,000, 600,000 per second 1,000,000.
    #[test]
    fn a_gcra_whose_rate_rounding_would_change_cannot_be_built() {
        for (max, window) in [
            (5_000, Window::from_millis(1)),
            (1_500, Window::from_millis(2)),
            (1_001, Window::from_millis(2)),
            (600_000, Window::from_secs(1)),
        ] {
            let built = std::panic::catch_unwind(|| Limit::new(max, window, Algorithm::Gcra));
            let message = built
                .err()
                .and_then(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|m| m.to_string()))
                })
                .unwrap_or_else(|| panic!("{max} per {window} was built"));
            assert!(message.contains("within 1 %"), "{message}");
        }
    }

    #[test]
    fn a_gcra_whose_spacing_is_whole_or_close_can_be_built() {
        // Exact spacings (1 µs, 1 µs, 10 µs) and one 0.6 % off (142 µs for 142.86).
        for (max, window) in [
            (1_000, Window::from_millis(1)),
            (3_600_000_000, Window::from_secs(3_600)),
            (100_000, Window::from_secs(1)),
            (7, Window::from_millis(1)),
            (10, Window::from_secs(1)),
        ] {
            assert_eq!(Limit::new(max, window, Algorithm::Gcra).max(), max);
        }
    }
}
