use super::{problems::line, Problems};
use crate::policy::{limits_problem, Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};

/// The default policy for undeclared routes: 120 per minute, sliding window.
const DEFAULT_LIMITS: &[Limit] = &[Limit::new(
    120,
    Window::from_secs(60),
    Algorithm::SlidingWindow,
)];

/// The policy of every request whose route has no declaration, so that no route is ever
/// silently unlimited. Given to [`RateLimiter::undeclared`](crate::RateLimiter::undeclared).
///
/// ```
/// use ratelimit_runtime::{
///     settings::Undeclared, store::MemoryStore, Algorithm, FailMode, Identity, IdentityPart, Limit,
///     RateLimiter, Window,
/// };
///
/// let limiter = RateLimiter::new(MemoryStore::new()).undeclared(
///     Undeclared::new()
///         .limits(vec![Limit::new(60, Window::from_secs(60), Algorithm::Gcra)])
///         .identity(Identity::Parts(&[IdentityPart::Ip]))
///         .fail(FailMode::Open),
/// );
/// assert!(limiter.check_settings().is_ok());
/// assert_eq!(limiter.default_policy("POST").fail(), FailMode::Open);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Undeclared {
    pub(crate) limits: &'static [Limit],
    pub(crate) identity: Identity,
    pub(crate) fail: Option<FailMode>,
    /// The default policy's `enforce`, as a route's; `None` follows the App's shadow switch.
    pub(crate) enforce: Option<bool>,
    problems: Problems,
}

impl Default for Undeclared {
    fn default() -> Self {
        Undeclared {
            limits: DEFAULT_LIMITS,
            identity: Identity::UserIdElseIp,
            fail: None,
            enforce: None,
            problems: Problems::default(),
        }
    }
}

impl Undeclared {
    /// The defaults: 120 per minute, sliding window, by user id, else IP; failing as
    /// declared routes do by default.
    pub fn new() -> Self {
        Undeclared::default()
    }

    /// The limits (default 120 per minute, sliding window). Meant for start-up: the limits
    /// live for the rest of the program. Refused
    /// ([`check_settings`](crate::RateLimiter::check_settings)) when empty, longer than 8,
    /// or when two share an algorithm and a window (they would count in one key).
    pub fn limits(mut self, limits: Vec<Limit>) -> Self {
        let setting = "`RateLimiter::undeclared(..).limits(..)`";
        match limits_problem(&limits) {
            None => {
                self.limits = Box::leak(limits.into_boxed_slice());
                self.problems.record(setting, Ok(()));
            }
            Some(why) => self.problems.record(setting, Err(line(setting, why))),
        }
        self
    }

    /// Who the limits count (default user id, else IP). Refused
    /// ([`check_settings`](crate::RateLimiter::check_settings)) when it has no part, names
    /// one twice or names a header that cannot exist (as [`RoutePolicy::new`]).
    pub fn identity(mut self, identity: Identity) -> Self {
        let setting = "`RateLimiter::undeclared(..).identity(..)`";
        match identity.problem() {
            None => {
                self.identity = identity;
                self.problems.record(setting, Ok(()));
            }
            Some(why) => self.problems.record(setting, Err(line(setting, why))),
        }
        self
    }

    /// The failure policy (default: open for `GET`, `HEAD`, `OPTIONS` and `QUERY`, closed
    /// otherwise, as for declared routes).
    pub fn fail(mut self, fail: FailMode) -> Self {
        self.fail = Some(fail);
        self
    }

    /// Whether the default policy refuses, as `enforce` on a route: `false` keeps undeclared
    /// routes in shadow while the App enforces (the way to enforce declared limits before the
    /// default one is tuned), `true` enforces them while the App is in shadow
    /// ([`RateLimiter::shadow`](crate::RateLimiter::shadow)). Without it they follow the
    /// App's switch.
    pub fn enforce(mut self, enforce: bool) -> Self {
        self.enforce = Some(enforce);
        self
    }

    /// The policy applied to an undeclared request with `method`.
    pub(crate) fn policy(&self, method: &str) -> RoutePolicy {
        let fail = self
            .fail
            .unwrap_or_else(|| FailMode::default_for_methods([method]));
        let policy = RoutePolicy::new(self.limits, self.identity, fail, false);
        match self.enforce {
            Some(enforce) => policy.enforcing(enforce),
            None => policy,
        }
    }

    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.problems.lines()
    }
}
