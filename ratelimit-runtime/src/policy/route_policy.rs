use std::fmt;

use super::{Count, FailMode, Identity, Limit, RouteHeaders, TierPolicy, Window, MAX_STACKED};

/// What a route declared: limits, or an exemption with its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// One or more stacked limits; a request must pass all of them.
    Limited(RoutePolicy),
    /// Deliberately unlimited, with the reason the declaration gave.
    Exempt {
        /// Why the route needs no limit (never empty).
        reason: &'static str,
    },
}

impl Policy {
    /// An exemption.
    ///
    /// # Panics
    ///
    /// When `reason` is empty or only white space.
    pub const fn exempt(reason: &'static str) -> Self {
        let bytes = reason.as_bytes();
        let mut i = 0;
        let mut blank = true;
        while i < bytes.len() {
            if !bytes[i].is_ascii_whitespace() {
                blank = false;
            }
            i += 1;
        }
        assert!(!blank, "an exemption needs a reason");
        Policy::Exempt { reason }
    }

    /// The limits, when the route is limited.
    pub const fn limited(&self) -> Option<&RoutePolicy> {
        match self {
            Policy::Limited(policy) => Some(policy),
            Policy::Exempt { .. } => None,
        }
    }

    /// The policy a request of tier `tier` is limited by: the tier's own limits when the
    /// route gives it some ([`RoutePolicy::tier`]), else the route's default; `None` for an
    /// exempt route.
    pub fn for_tier(&self, tier: &str) -> Option<RoutePolicy> {
        let policy = self.limited()?;
        Some(policy.tier(tier).unwrap_or(*policy))
    }
}

/// Stacked limits sharing one fail mode and shadow flag, and by default one identity (a
/// limit may count by its own, [`Limit::identified_by`]); a route may give tiers of its
/// requests limits of their own ([`with_tiers`](Self::with_tiers)).
///
/// Limits on one identity keep their keys in one Redis Cluster slot, decided in one call; a
/// limit on another identity has its keys in another slot (see `guide::deployments`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutePolicy {
    limits: &'static [Limit],
    identity: Identity,
    fail: FailMode,
    shadow: bool,
    headers: RouteHeaders,
    /// Whether the route refuses (`true`) or only logs (`false`) whatever the App's shadow
    /// switch says; `None` follows the switch.
    enforce: Option<bool>,
    /// The limits of the tiers with limits of their own; the limits above are the default,
    /// for every other request.
    tiers: &'static [TierPolicy],
    /// How long a request over the limits waits for its turn (`wait = "2s"`); `None`:
    /// refused at once.
    wait: Option<Window>,
    /// A ban after repeated refusals on this route (`ban = "20 in 10m for 1h"`).
    ban: Option<super::Ban>,
    /// How often an instance deciding from a local share reconciles it with the store, in
    /// milliseconds (`sync = "100ms"`, at most 10 s); 0: every request is checked in the
    /// store. Four bytes rather than a window's sixteen: every request moves a policy.
    sync: u32,
}

/// Why a request on `limits` cannot wait for its turn ([`RoutePolicy::waiting`]), if it
/// cannot: the one rule the policy's assertion and an override's check share.
pub(crate) const fn why_cannot_wait(limits: &[Limit]) -> Option<&'static str> {
    let mut i = 0;
    while i < limits.len() {
        let limit = &limits[i];
        if limit.block().is_some() {
            return Some(
                "`wait` cannot go with a limit with a block: a lockout refuses until it ends",
            );
        }
        if matches!(limit.count(), Count::Failures) {
            return Some("`wait` cannot go with a limit that counts failures only: it counts a request after it ran");
        }
        if limit.is_concurrency() {
            return Some(
                "`wait` cannot go with a concurrency limit: a place is taken now or not at all",
            );
        }
        if limit.identity().is_some() || limit.budget().is_some() {
            return Some("`wait` cannot go with a limit of another identity or a shared budget: a turn is counted in the route's own keys");
        }
        i += 1;
    }
    None
}

/// Why `limits` cannot be decided from shares reconciled every `sync` ([`RoutePolicy::syncing`]),
/// if they cannot: the one rule the policy's assertion and an override's check share (the
/// grammar's [`check_sync`](ratelimit_grammar::check_sync) words it for the attribute).
pub(crate) const fn why_cannot_sync(limits: &[Limit], sync: Window) -> Option<&'static str> {
    let sync = sync.as_millis();
    if sync < ratelimit_grammar::MIN_SYNC_MILLIS || sync > ratelimit_grammar::MAX_SYNC_MILLIS {
        return Some("`sync` is from 10ms to 10s");
    }
    let [limit] = limits else {
        return Some(ratelimit_grammar::sync_stacked());
    };
    if limit.block().is_some() {
        return Some("`sync` cannot go with a limit with a block: a lockout starts on one refusal in the store");
    }
    if matches!(limit.count(), Count::Failures) {
        return Some("`sync` cannot go with a limit that counts failures only: a share is counted before the request runs");
    }
    if limit.is_concurrency() || limit.is_ban() || limit.budget().is_some() {
        return Some("`sync` decides a rate limit of the route's own: not a concurrency limit or a shared budget");
    }
    if matches!(limit.algorithm(), super::Algorithm::SlidingLog) {
        return Some("`sync` cannot go with a sliding log: it keeps one entry per request");
    }
    let window = limit.window().as_millis();
    if sync.saturating_mul(10) > window {
        return Some("`sync` is at most a tenth of the limit's window");
    }
    if ratelimit_grammar::share_of(limit.max(), window, sync) < ratelimit_grammar::MIN_SHARE {
        return Some("`sync` needs a limit of at least 10 requests per interval");
    }
    None
}

/// Panics unless `limits` can be decided from shares ([`why_cannot_sync`]).
const fn assert_can_sync(limits: &[Limit], sync: Window) {
    if let Some(why) = why_cannot_sync(limits, sync) {
        panic!("{}", why);
    }
}

/// Panics unless a request on `limits` can wait for its turn ([`why_cannot_wait`]).
const fn assert_can_wait(limits: &[Limit]) {
    if let Some(why) = why_cannot_wait(limits) {
        panic!("{}", why);
    }
}

/// Whether two limits count under the same shared budget (or both under the route's keys).
const fn same_budget(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_name(a, b),
        _ => false,
    }
}

/// Why `limits` cannot be stacked on one route, if they cannot: none, more than 8, or two
/// sharing an algorithm and a window (they would count in one Redis key).
pub(crate) const fn limits_problem(limits: &[Limit]) -> Option<&'static str> {
    if limits.is_empty() {
        return Some("a limited route needs at least one limit");
    }
    if limits.len() > MAX_STACKED {
        return Some("a route may stack at most 8 limits");
    }
    let mut i = 0;
    while i < limits.len() {
        let mut j = i + 1;
        while j < limits.len() {
            // Keys are named by algorithm and window under the route (or the shared budget):
            // two limits of one route sharing both would count in one key.
            if limits[i].algorithm() as u8 == limits[j].algorithm() as u8
                && limits[i].window().as_millis() == limits[j].window().as_millis()
                && same_budget(limits[i].budget(), limits[j].budget())
            {
                return Some("two stacked limits use the same algorithm and window");
            }
            j += 1;
        }
        i += 1;
    }
    None
}

impl RoutePolicy {
    /// Stacked `limits` (at least one, at most 8) on one identity.
    ///
    /// # Panics
    ///
    /// When `limits` is empty or longer than 8, or two of them share an algorithm and a
    /// window; when `identity` has no part, names one twice or names a header that cannot
    /// exist; when `shadow` goes with `FailMode::Closed` (a shadow limit never rejects, so it
    /// fails open, as the attribute says).
    pub const fn new(
        limits: &'static [Limit],
        identity: Identity,
        fail: FailMode,
        shadow: bool,
    ) -> Self {
        if let Some(problem) = limits_problem(limits) {
            panic!("{}", problem);
        }
        identity.assert_valid();
        assert!(
            !(shadow && matches!(fail, FailMode::Closed | FailMode::Local)),
            "a shadow limit fails open: `FailMode::Closed` or `FailMode::Local` cannot go with `shadow = true`"
        );
        RoutePolicy {
            limits,
            identity,
            fail,
            shadow,
            headers: RouteHeaders::All,
            enforce: None,
            tiers: &[],
            wait: None,
            ban: None,
            sync: 0,
        }
    }

    /// The policy with `tiers`, the limits of the requests whose
    /// [`Tier`](crate::overrides::Tier) names one of them (`#[rate_limit(tier = "pro", ..)]`),
    /// counted in keys of their own; this policy's own limits are the default, for requests
    /// of no tier or of another. Each tier counts by its own limits and identity, and follows
    /// the route's fail mode, shadow flag, headers and `enforce`.
    ///
    /// ```
    /// use ratelimit_runtime::{policy::TierPolicy, Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};
    ///
    /// const FREE: &[Limit] = &[Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow)];
    /// const PRO: &[Limit] = &[Limit::new(1000, Window::from_secs(60), Algorithm::SlidingWindow)];
    /// const TIERS: &[TierPolicy] = &[TierPolicy::new("pro", PRO, Identity::UserIdElseIp)];
    /// const POLICY: RoutePolicy =
    ///     RoutePolicy::new(FREE, Identity::UserIdElseIp, FailMode::Open, false).with_tiers(TIERS);
    /// assert_eq!(POLICY.tier("pro").unwrap().limits()[0].max(), 1000);
    /// assert!(POLICY.tier("team").is_none());
    /// ```
    ///
    /// # Panics
    ///
    /// When two of `tiers` share a name, or one of them has tiers of its own.
    #[must_use]
    pub const fn with_tiers(self, tiers: &'static [TierPolicy]) -> Self {
        let mut i = 0;
        while i < tiers.len() {
            let mut j = i + 1;
            while j < tiers.len() {
                assert!(
                    !same_name(tiers[i].name(), tiers[j].name()),
                    "two tiers of one route share a name"
                );
                j += 1;
            }
            i += 1;
        }
        if self.wait.is_some() {
            let mut i = 0;
            while i < tiers.len() {
                assert_can_wait(tiers[i].limits());
                i += 1;
            }
        }
        if self.sync > 0 {
            let sync = Window::from_millis(self.sync as u64);
            let mut i = 0;
            while i < tiers.len() {
                assert_can_sync(tiers[i].limits(), sync);
                i += 1;
            }
        }
        RoutePolicy { tiers, ..self }
    }

    /// The tiers with limits of their own, in declaration order (none for most routes).
    pub const fn tiers(&self) -> &'static [TierPolicy] {
        self.tiers
    }

    /// The policy of the requests of tier `name`, when the route gives the tier limits of
    /// its own: the tier's limits and identity, with the route's fail mode, shadow flag,
    /// headers and `enforce`.
    pub fn tier(&self, name: &str) -> Option<RoutePolicy> {
        let tier = self.tiers.iter().find(|t| t.name() == name)?;
        Some(RoutePolicy {
            limits: tier.limits(),
            identity: tier.identity(),
            tiers: &[],
            ..*self
        })
    }

    /// Whether a limit of the route, or of one of its tiers, counts the username a request's
    /// body submits: the body is read before the tier is known.
    pub(crate) fn any_reads_username(&self) -> bool {
        self.reads_username()
            || self
                .tiers
                .iter()
                .filter_map(|t| self.tier(t.name()))
                .any(|p| p.reads_username())
    }

    /// The policy with `enforce` set, as `enforce = true` or `false` on the attribute:
    /// `true` refuses over the limit while the App is in shadow
    /// ([`RateLimiter::shadow`](crate::RateLimiter::shadow)); `false` only counts and logs
    /// while the App enforces. Without it a route follows the App.
    ///
    /// # Panics
    ///
    /// On a shadow policy: a shadow limit never refuses, whatever the App says.
    #[must_use]
    pub const fn enforcing(self, enforce: bool) -> Self {
        assert!(
            !self.shadow,
            "`enforce` cannot go with `shadow = true`: a shadow limit never refuses"
        );
        RoutePolicy {
            enforce: Some(enforce),
            ..self
        }
    }

    /// The policy with requests over its limits waiting up to `wait` for their turn instead
    /// of being refused, as `wait = "2s"` on the attribute: one store call finds the
    /// earliest time within `wait` at which every limit lets the request in and counts it
    /// then; the request sleeps until then (no polling of the store) and runs. A request
    /// whose turn is further off is refused as without `wait`, counting nothing. The tiers
    /// wait as the route does.
    ///
    /// ```
    /// use ratelimit_runtime::{Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};
    ///
    /// const LIMITS: &[Limit] = &[Limit::new(10, Window::from_secs(1), Algorithm::Gcra)];
    /// const POLICY: RoutePolicy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false)
    ///     .waiting(Window::from_secs(2));
    /// assert_eq!(POLICY.wait(), Some(std::time::Duration::from_secs(2)));
    /// ```
    ///
    /// # Panics
    ///
    /// When `wait` is longer than a minute
    /// ([`MAX_WAIT_MILLIS`](ratelimit_grammar::MAX_WAIT_MILLIS)); on a shadow policy (it
    /// never refuses, so has nothing to wait for); when a limit, the route's or a tier's,
    /// has a block (a lockout refuses until it ends), counts failures only (counted after
    /// its request ran), is a concurrency limit (a place is taken now or not at all), or
    /// counts another identity or a shared budget (a turn is counted in the route's own
    /// keys: one counted ahead elsewhere would hold back requests that do not wait).
    /// [`with_tiers`](Self::with_tiers) after it panics on such a tier too.
    #[must_use]
    pub const fn waiting(self, wait: Window) -> Self {
        assert!(
            wait.as_millis() <= ratelimit_grammar::MAX_WAIT_MILLIS,
            "a request waits at most a minute for its turn"
        );
        assert!(
            !self.shadow,
            "`wait` cannot go with `shadow = true`: a shadow limit never refuses"
        );
        assert!(
            self.ban.is_none(),
            "`wait` cannot go with `ban`: a route that waits serves late rather than refusing"
        );
        assert!(
            self.sync == 0,
            "`wait` cannot go with `sync`: a turn is the store's to give per request"
        );
        assert_can_wait(self.limits);
        let mut i = 0;
        while i < self.tiers.len() {
            assert_can_wait(self.tiers[i].limits());
            i += 1;
        }
        RoutePolicy {
            wait: Some(wait),
            ..self
        }
    }

    /// The policy with a ban after repeated refusals, as `ban = "20 in 10m for 1h"` on the
    /// attribute: a client this route refused `ban.times()` times within `ban.within()` is
    /// refused every request of the route for `ban.duration()`, by one key check (see
    /// [`Ban`](super::Ban)). The ban counts by the route's identity; the tiers share it.
    ///
    /// ```
    /// use ratelimit_runtime::{policy::Ban, Algorithm, FailMode, Identity, IdentityPart, Limit, RoutePolicy, Window};
    ///
    /// const LOGIN: &[Limit] = &[Limit::new(10, Window::from_secs(300), Algorithm::SlidingWindow)];
    /// const BY_IP: Identity = Identity::Parts(&[IdentityPart::Ip]);
    /// const POLICY: RoutePolicy = RoutePolicy::new(LOGIN, BY_IP, FailMode::Closed, false)
    ///     .banning(Ban::new(20, Window::from_secs(600), Window::from_secs(3600)));
    /// assert_eq!(POLICY.ban().unwrap().times(), 20);
    /// assert!(POLICY.to_string().ends_with(", ban 20 in 10m for 1h"));
    /// ```
    ///
    /// # Panics
    ///
    /// On a shadow policy (it never refuses, so has nothing to count), one that waits (it
    /// serves late rather than refusing), or a ban with an identity of its own (a route's ban
    /// counts by the route's; [`Ban::identified_by`](super::Ban::identified_by) is for the
    /// limiter's).
    #[must_use]
    pub const fn banning(self, ban: super::Ban) -> Self {
        assert!(
            !self.shadow,
            "`ban` cannot go with `shadow = true`: a shadow limit never refuses"
        );
        assert!(
            self.wait.is_none(),
            "`ban` cannot go with `wait`: a route that waits serves late rather than refusing"
        );
        assert!(
            self.sync == 0,
            "`ban` cannot go with `sync`: a ban counts refusals in the store"
        );
        assert!(
            ban.identity().is_none(),
            "a route's ban counts by the route's identity; `Ban::identified_by` is for `RateLimiter::ban`"
        );
        RoutePolicy {
            ban: Some(ban),
            ..self
        }
    }

    /// The policy deciding its limit from local shares reconciled with the store every
    /// `sync`, as `sync = "100ms"` on the attribute: for a large limit on a hot key (one API
    /// key's quota, a tenant, a route's global limit), which every instance would otherwise
    /// check in one Redis shard per request.
    ///
    /// Each instance takes a share of the client's budget from the store in one call, the
    /// budget the limit grants in one interval (`max × sync ÷ window` units,
    /// [`share_of`](ratelimit_grammar::share_of)), counted there at once, and decides
    /// requests from it in memory. It calls again when the share is spent, or on the first
    /// request after a whole `sync` in which none spent from it: its rest then goes back (a
    /// call of its own, off the request path) and a new share is taken, as large as the
    /// instance spent in its last interval, at least one request's cost and at most a whole
    /// share. A share still being spent from is kept past its interval, without a call. A
    /// store that refuses refuses locally until `sync` has passed; what the store answered
    /// then is what the 429 says. A call that fails answers the requests of that client
    /// that need a call, for one `sync`, with its error (the route's `fail` applies).
    ///
    /// **What holds** (the store's count is exact; the instances' view of it lags by up
    /// to `sync`): units are counted in the store before they are spent, and an instance
    /// holds at most one share (or one request's cost, if larger) at a time, so the
    /// requests admitted are at most what the algorithm admits plus one share per instance
    /// (units counted before a window's edge spent after it), and fewer while shares held
    /// by other instances are unspent. The store is called once per
    /// share, once per `sync` per instance while the budget is spent, and once per share
    /// left idle. Headers report the remaining the store
    /// answered at the last call plus the share left. Only requests the route decides as
    /// they come are decided from shares: those counted after the fact, a shadow route's,
    /// and a store that takes no shares ([`Store::take_share`](crate::store::Store::take_share),
    /// the memory store: it decides in the process anyway) check every request, as do the
    /// routes a limiter's ban ([`RateLimiter::ban`](crate::RateLimiter::ban)) covers: a ban
    /// counts refusals in the store. The tiers sync as the route does.
    ///
    /// ```
    /// use ratelimit_runtime::{Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};
    ///
    /// const LIMITS: &[Limit] = &[Limit::new(100_000, Window::from_secs(60), Algorithm::SlidingWindow)];
    /// const POLICY: RoutePolicy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false)
    ///     .syncing(Window::from_millis(100));
    /// assert_eq!(POLICY.sync(), Some(std::time::Duration::from_millis(100)));
    /// assert!(POLICY.to_string().ends_with(", sync 100ms"));
    /// ```
    ///
    /// # Panics
    ///
    /// When `sync` is under 10 ms or over 10 s; when the route, or a tier, stacks more than
    /// one limit, or its limit has a block, counts failures only, is a concurrency limit or
    /// a shared budget, or is a sliding log; when `sync` is longer than a tenth of the
    /// limit's window, or the limit grants fewer than
    /// [`MIN_SHARE`](ratelimit_grammar::MIN_SHARE) requests per `sync`; on a policy that
    /// waits or bans (the store gives turns and counts refusals per request).
    /// [`with_tiers`](Self::with_tiers) after it panics on such a tier too.
    #[must_use]
    pub const fn syncing(self, sync: Window) -> Self {
        assert!(
            self.wait.is_none(),
            "`sync` cannot go with `wait`: a turn is the store's to give per request"
        );
        assert!(
            self.ban.is_none(),
            "`sync` cannot go with `ban`: a ban counts refusals in the store"
        );
        assert_can_sync(self.limits, sync);
        let mut i = 0;
        while i < self.tiers.len() {
            assert_can_sync(self.tiers[i].limits(), sync);
            i += 1;
        }
        RoutePolicy {
            // At most 10 s: `assert_can_sync` checked it.
            sync: sync.as_millis() as u32,
            ..self
        }
    }

    /// How often the route reconciles its local shares with the store (`sync` on the
    /// attribute); `None`: every request is checked in the store.
    pub const fn sync(&self) -> Option<std::time::Duration> {
        match self.sync {
            0 => None,
            millis => Some(std::time::Duration::from_millis(millis as u64)),
        }
    }

    /// The route's ban after repeated refusals (`ban` on the attribute), if any.
    pub const fn ban(&self) -> Option<super::Ban> {
        self.ban
    }

    /// How long a request over the limits waits for its turn (`wait` on the attribute);
    /// `None`: refused at once.
    pub const fn wait(&self) -> Option<std::time::Duration> {
        match self.wait {
            Some(wait) => Some(std::time::Duration::from_millis(wait.as_millis())),
            None => None,
        }
    }

    /// What the route says about the App's shadow switch: `Some(true)` refuses while the
    /// App is in shadow, `Some(false)` only logs while it enforces, `None` follows it.
    pub const fn enforce(&self) -> Option<bool> {
        self.enforce
    }

    /// Whether the route only counts and logs (never refuses) while the App's shadow switch
    /// is `app_shadow`: a shadow limit always; else as `enforce` says, else as the App.
    pub(crate) const fn shadowed(&self, app_shadow: bool) -> bool {
        match (self.shadow, self.enforce) {
            (true, _) => true,
            (false, Some(enforce)) => !enforce,
            (false, None) => app_shadow,
        }
    }

    /// This policy with its answers carrying the rate-limit headers or not
    /// (`headers = "none"` in the attribute: [`RouteHeaders::Hidden`]).
    #[must_use]
    pub const fn with_headers(mut self, headers: RouteHeaders) -> Self {
        self.headers = headers;
        self
    }

    /// Whether the route's answers carry the rate-limit headers.
    pub const fn headers(&self) -> RouteHeaders {
        self.headers
    }

    /// Whether the route hides its limits from clients (`headers = "none"`).
    pub(crate) const fn hides_headers(&self) -> bool {
        matches!(self.headers, RouteHeaders::Hidden)
    }

    /// This policy with `limits` in place of its own (shared budgets in force in place of
    /// their declarations), everything else kept.
    pub(crate) const fn with_limits(self, limits: &'static [Limit]) -> Self {
        RoutePolicy { limits, ..self }
    }

    /// The stacked limits, in declaration order.
    pub const fn limits(&self) -> &'static [Limit] {
        self.limits
    }

    /// Who the limits count.
    pub const fn identity(&self) -> Identity {
        self.identity
    }

    /// The identity `limit` counts by: its own, else the route's.
    pub fn identity_of(&self, limit: &Limit) -> Identity {
        limit.identity().unwrap_or(self.identity)
    }

    /// Whether any of the route's limits counts the username a request's body submits.
    pub fn reads_username(&self) -> bool {
        let counts_names =
            |identity: Identity| identity.parts().contains(&super::IdentityPart::Username);
        counts_names(self.identity)
            || self
                .limits
                .iter()
                .any(|limit| limit.identity().is_some_and(counts_names))
    }

    /// Every identity the route's limits count by, the route's first, each once.
    pub fn identities(&self) -> Vec<Identity> {
        let mut identities = vec![self.identity];
        for limit in self.limits {
            let identity = self.identity_of(limit);
            if !identities.contains(&identity) {
                identities.push(identity);
            }
        }
        identities
    }

    /// The effective failure policy (declared, or derived from the route's methods).
    pub const fn fail(&self) -> FailMode {
        self.fail
    }

    /// Decide, log and count, but never reject.
    pub const fn shadow(&self) -> bool {
        self.shadow
    }
}

/// Whether two names (tiers, shared budgets) are the same (`==` on `str` is not `const`).
const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl fmt::Display for RoutePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limit) in self.limits.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{limit}")?;
        }
        write!(f, " by {}, fail {}", self.identity, self.fail)?;
        if self.shadow {
            f.write_str(", shadow")?;
        }
        if self.hides_headers() {
            f.write_str(", headers none")?;
        }
        if let Some(enforce) = self.enforce {
            write!(f, ", enforce = {enforce}")?;
        }
        if let Some(wait) = self.wait {
            write!(f, ", wait {wait}")?;
        }
        if let Some(ban) = self.ban {
            write!(f, ", ban {ban}")?;
        }
        if self.sync > 0 {
            write!(f, ", sync {}", Window::from_millis(self.sync as u64))?;
        }
        for tier in self.tiers {
            write!(f, "; {tier}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Algorithm, Window};

    #[test]
    fn enforce_overrides_the_apps_switch_and_a_shadow_limit_never_refuses() {
        const LIMITS: &[Limit] = &[Limit::new(5, Window::from_secs(60), Algorithm::Gcra)];
        let plain = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Closed, false);
        assert!(!plain.shadowed(false));
        assert!(plain.shadowed(true));
        assert!(!plain.enforcing(true).shadowed(true));
        assert!(plain.enforcing(false).shadowed(false));
        let shadow = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, true);
        assert!(shadow.shadowed(false));
        assert_eq!(
            plain.enforcing(true).to_string(),
            "5 per 1m (gcra) by user_id, else ip, fail closed, enforce = true"
        );
    }

    #[test]
    fn a_tier_counts_by_its_own_limits_and_follows_the_routes_switches() {
        const FREE: &[Limit] = &[Limit::new(10, Window::from_secs(60), Algorithm::Gcra)];
        const PRO: &[Limit] = &[
            Limit::new(100, Window::from_secs(60), Algorithm::Gcra),
            Limit::new(1000, Window::from_secs(3600), Algorithm::Gcra),
        ];
        const TIERS: &[TierPolicy] = &[TierPolicy::new(
            "pro",
            PRO,
            Identity::Parts(&[crate::policy::IdentityPart::ApiKey]),
        )];
        let route = RoutePolicy::new(FREE, Identity::UserIdElseIp, FailMode::Closed, false)
            .with_headers(RouteHeaders::Hidden)
            .enforcing(true)
            .with_tiers(TIERS);
        let pro = route.tier("pro").expect("declared");
        assert_eq!(pro.limits(), PRO);
        assert_eq!(pro.identity().to_string(), "api_key");
        assert_eq!(
            (pro.fail(), pro.headers(), pro.enforce()),
            (FailMode::Closed, RouteHeaders::Hidden, Some(true))
        );
        assert!(pro.tiers().is_empty());
        assert_eq!(route.tier("team"), None);
        let policy = Policy::Limited(route);
        assert_eq!(policy.for_tier("pro"), Some(pro));
        assert_eq!(policy.for_tier("team"), Some(route));
        assert_eq!(Policy::exempt("health").for_tier("pro"), None);
        assert!(route
            .to_string()
            .ends_with("; tier pro: 100 per 1m (gcra) + 1000 per 1h (gcra) by api_key"));
    }

    #[test]
    #[should_panic(expected = "share a name")]
    fn two_tiers_of_one_name_cannot_be_declared() {
        const ONE: &[Limit] = &[Limit::new(10, Window::from_secs(60), Algorithm::Gcra)];
        static TIERS: [TierPolicy; 2] = [
            TierPolicy::new("pro", ONE, Identity::UserIdElseIp),
            TierPolicy::new("pro", ONE, Identity::UserIdElseIp),
        ];
        let _ =
            RoutePolicy::new(ONE, Identity::UserIdElseIp, FailMode::Open, false).with_tiers(&TIERS);
    }

    #[test]
    #[should_panic(expected = "lower-case")]
    fn a_tier_is_named_as_requests_name_it() {
        const ONE: &[Limit] = &[Limit::new(10, Window::from_secs(60), Algorithm::Gcra)];
        let _ = TierPolicy::new("Pro", ONE, Identity::UserIdElseIp);
    }

    #[test]
    #[should_panic(expected = "same algorithm and window")]
    fn two_limits_sharing_a_key_cannot_be_stacked() {
        static LIMITS: [Limit; 2] = [
            Limit::new(10, Window::from_secs(60), Algorithm::SlidingWindow),
            Limit::new(20, Window::from_secs(60), Algorithm::SlidingWindow),
        ];
        let _ = RoutePolicy::new(&LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
    }
}
