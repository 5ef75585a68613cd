use std::{fmt, time::Duration};

use actix_web::http::StatusCode;

use crate::HeaderFamilies;

/// What limited answers carry and which answers are successes. Given to
/// [`RateLimiter::responses`](crate::RateLimiter::responses).
///
/// ```
/// use std::time::Duration;
///
/// use actix_web::http::StatusCode;
/// use ratelimit_runtime::{settings::Responses, store::MemoryStore, HeaderFamilies, RateLimiter};
///
/// let limiter = RateLimiter::new(MemoryStore::new()).responses(
///     Responses::new()
///         .headers(HeaderFamilies::none().ietf_draft(true))
///         .unavailable_retry_after(Duration::from_secs(5))
///         // Every redirect a success too, as the sign-ins of this app redirect only after a
///         // right password.
///         .success_statuses(|status: StatusCode| {
///             status.is_success() || status.is_redirection()
///         }),
/// );
/// assert!(limiter.check_settings().is_ok());
/// ```
#[derive(Clone)]
#[must_use]
pub struct Responses {
    pub(crate) headers: HeaderFamilies,
    pub(crate) unavailable_retry_secs: u64,
    pub(crate) success: fn(StatusCode) -> bool,
}

/// The default success of a limit that counts failures only: a 2xx. A redirect is not one:
/// a form sign-in answers a wrong password with `303 See Other` back to its form.
fn two_hundreds(status: StatusCode) -> bool {
    status.is_success()
}

impl Default for Responses {
    fn default() -> Self {
        Responses {
            headers: HeaderFamilies::default(),
            unavailable_retry_secs: 1,
            success: two_hundreds,
        }
    }
}

impl fmt::Debug for Responses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responses")
            .field("headers", &self.headers)
            .field("unavailable_retry_secs", &self.unavailable_retry_secs)
            .field("success", &self.success)
            .finish()
    }
}

impl Responses {
    /// The defaults: both header families, a 503's `Retry-After` of 1 s, 2xx answers are
    /// successes.
    pub fn new() -> Self {
        Responses::default()
    }

    /// Which header families limited responses carry (default both).
    pub fn headers(mut self, headers: HeaderFamilies) -> Self {
        self.headers = headers;
        self
    }

    /// `Retry-After` of the 503 a fail-closed route answers during a store outage
    /// (default 1 s), in whole seconds rounded up (at least 1), as a 429's is: a client
    /// is never told to come back before the time given.
    pub fn unavailable_retry_after(mut self, retry: Duration) -> Self {
        let secs = retry.as_secs() + u64::from(retry.subsec_nanos() > 0);
        self.unavailable_retry_secs = secs.max(1);
        self
    }

    /// Which answers are successes for limits that count failures only (`count =
    /// "failures"`): a request such a limit allowed gives its unit back when its answer's
    /// status is one (default: 2xx; a redirect is a failure, as a form sign-in's `303` back
    /// to its form after a wrong password). An error a handler returns counts by its
    /// response's status; a handler that panics never answers, so it counts as a failure. A
    /// handler that marks its attempt ([`AttemptOutcome`](crate::AttemptOutcome)) wins over
    /// the status.
    pub fn success_statuses(mut self, success: fn(StatusCode) -> bool) -> Self {
        self.success = success;
        self
    }
}
