//! Bans after repeated refusals: `ban = "20 in 10m for 1h"`.

use std::{fmt, num::NonZeroU32};

use super::{Count, Identity, Limit, Window};

/// A ban: a client refused [`times`](Self::times) times within [`within`](Self::within) is
/// refused every request for [`duration`](Self::duration), on every route the ban covers,
/// by one key check (and the flood shield), never a check of each limit.
///
/// A route's own ban (`#[rate_limit(.., ban = "20 in 10m for 1h")]`,
/// [`RoutePolicy::banning`](crate::RoutePolicy::banning)) counts the route's refusals by the
/// route's identity and bans on that route; the limiter's
/// ([`RateLimiter::ban`](crate::RateLimiter::ban)) counts refusals on every limited route
/// by its own identity ([`identified_by`](Self::identified_by), the client address unless
/// set) and bans on all of them. On a route with a limit that counts failures only
/// (`count = "failures"`) every failure counts toward a ban too, once its handler ran.
///
/// Refusals are counted in fixed windows of `within` (as a fixed-window limit counts
/// requests): up to twice `times` − 2 refusals across a window's edge start no ban.
///
/// ```
/// use ratelimit_runtime::policy::{Ban, Window};
///
/// const SIGN_IN: Ban = Ban::new(20, Window::from_secs(600), Window::from_secs(3600));
/// assert_eq!(SIGN_IN.to_string(), "20 in 10m for 1h");
/// assert_eq!(SIGN_IN.times(), 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ban {
    times: NonZeroU32,
    within: Window,
    duration: Window,
    identity: Option<Identity>,
}

/// How a ban's limit is keyed: the route's, or the limiter's (under a tag of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BanScope {
    Route,
    App,
}

impl Ban {
    /// A ban of `duration` after `times` refusals within `within`.
    ///
    /// # Panics
    ///
    /// When `times` is zero or over [`MAX_BAN_TIMES`](ratelimit_grammar::MAX_BAN_TIMES), or
    /// a window is over 31 days (in a `const`, a compile error).
    pub const fn new(times: u32, within: Window, duration: Window) -> Self {
        let Some(times) = NonZeroU32::new(times) else {
            panic!("a ban starts after at least one refusal");
        };
        assert!(
            times.get() <= ratelimit_grammar::MAX_BAN_TIMES,
            "a ban starts after at most 1,000,000 refusals"
        );
        assert!(
            within.as_millis() <= super::MAX_WINDOW_MILLIS
                && duration.as_millis() <= super::MAX_WINDOW_MILLIS,
            "a ban counts over at most 31 days and lasts at most 31 days"
        );
        Ban {
            times,
            within,
            duration,
            identity: None,
        }
    }

    /// The ban counting and banning by `identity`: for the limiter's ban
    /// ([`RateLimiter::ban`](crate::RateLimiter::ban)), which counts by the client address
    /// unless set. A route's ban counts by the route's identity.
    ///
    /// # Panics
    ///
    /// When `identity` is one the attribute could not have written.
    #[must_use]
    pub const fn identified_by(mut self, identity: Identity) -> Self {
        identity.assert_valid();
        self.identity = Some(identity);
        self
    }

    /// How many refusals start the ban.
    pub const fn times(&self) -> u32 {
        self.times.get()
    }

    /// The window the refusals are counted in.
    pub const fn within(&self) -> Window {
        self.within
    }

    /// How long the ban lasts.
    pub const fn duration(&self) -> Window {
        self.duration
    }

    /// The identity the ban counts by, when set.
    pub const fn identity(&self) -> Option<Identity> {
        self.identity
    }

    /// A route's ban as the pseudo-limit a store keeps it in, first in a check's stack
    /// ([`Limit::is_ban`]): its refusals counted in a fixed window of `within` under the
    /// route's key, the ban a lockout of `duration` beside it; failures counted too, after
    /// the fact, when `count` is [`Count::Failures`].
    ///
    /// ```
    /// use ratelimit_runtime::{policy::{Ban, Window}, Count};
    ///
    /// let ban = Ban::new(3, Window::from_secs(60), Window::from_secs(600)).limit(Count::Requests);
    /// assert!(ban.is_ban());
    /// assert_eq!((ban.max(), ban.block()), (3, Some(Window::from_secs(600))));
    /// ```
    pub const fn limit(self, count: Count) -> Limit {
        self.limit_in(BanScope::Route, count)
    }

    /// The limiter's ban as the pseudo-limit a store keeps it in: as
    /// [`limit`](Self::limit), under the client's key of its own
    /// ([`RouteKey::with_limiter_ban`](crate::key::RouteKey::with_limiter_ban)), the same on
    /// every route.
    pub const fn limiter_limit(self, count: Count) -> Limit {
        self.limit_in(BanScope::App, count)
    }

    const fn limit_in(self, scope: BanScope, count: Count) -> Limit {
        Limit::ban_of(self.times.get(), self.within, self.duration, scope, count)
    }

    /// A ban as the grammar reads it.
    pub(crate) const fn from_spec(spec: ratelimit_grammar::BanSpec) -> Self {
        Ban::new(
            spec.times,
            Window::from_millis(spec.within_millis),
            Window::from_millis(spec.for_millis),
        )
    }
}

impl fmt::Display for Ban {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {} for {}", self.times, self.within, self.duration)?;
        if let Some(identity) = self.identity {
            write!(f, " by {identity}")?;
        }
        Ok(())
    }
}
