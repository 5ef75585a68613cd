//! An app's own rejections ([`RateLimiter::reject_with`](super::RateLimiter::reject_with)):
//! what the limiter tells the app's function about a refusal ([`Rejection`]), and the
//! answer it sends in its default's place, with the limiter's headers.

use std::{
    fmt,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::Arc,
    time::Duration,
};

use actix_web::{
    body::MessageBody,
    http::{
        header::{self, HeaderMap},
        StatusCode,
    },
    web::Bytes,
    HttpResponse,
};

use super::{answer, route_info::RouteInfo};
use crate::store::LimitState;

/// The app's function of [`RateLimiter::reject_with`](super::RateLimiter::reject_with).
pub(crate) type RejectWith = Arc<dyn Fn(&Rejection) -> HttpResponse + Send + Sync>;

/// Why the limiter refused a request ([`Rejection::reason`]). More reasons may be added: a
/// `match` on it needs a `_` arm (answering, say, with
/// [`Rejection::default_response`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionReason {
    /// Over a limit of the route (`429 Too Many Requests` by default).
    Limit,
    /// Over a limit that locks clients out (`block = ".."`): every request of the client on
    /// the route is refused until the block ends (`429` by default).
    Lockout,
    /// The client is on the deny list of the overrides in force (`403 Forbidden` by
    /// default).
    Denied,
    /// The store could not decide and the route fails closed (`503 Service Unavailable` by
    /// default).
    StoreUnavailable,
}

impl RejectionReason {
    /// The reason in snake case, as logs and metrics write it: `limit`, `lockout`,
    /// `denied`, `store_unavailable`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectionReason::Limit => "limit",
            RejectionReason::Lockout => "lockout",
            RejectionReason::Denied => "denied",
            RejectionReason::StoreUnavailable => "store_unavailable",
        }
    }
}

impl fmt::Display for RejectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal the limiter is about to answer, as the function given to
/// [`RateLimiter::reject_with`](super::RateLimiter::reject_with) sees it: why
/// ([`reason`](Self::reason)), on which route, when the client may come back, the binding
/// limit's figures, and the limiter's own answer ([`default_response`](Self::default_response)).
///
/// On a route declared with `headers = "none"` the limit's figures are hidden here as they
/// are from clients: [`limit`](Self::limit), [`remaining`](Self::remaining) and
/// [`policy`](Self::policy) are `None` and [`violated_policies`](Self::violated_policies) is
/// empty, so that an app's body cannot reveal a threshold the route keeps to itself.
#[derive(Clone)]
#[non_exhaustive]
pub struct Rejection {
    reason: RejectionReason,
    /// `METHOD /pattern`.
    route: String,
    /// Where the pattern starts in `route`.
    pattern_at: usize,
    retry_after: Option<Duration>,
    /// The binding limit's policy name, quota and requests left, when the route shows them.
    binding: Option<(String, u64, u64)>,
    violated: Vec<String>,
    /// The limiter's own answer, for `default_response` and the headers it adds.
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl fmt::Debug for Rejection {
    /// Everything but the default answer's headers and body.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejection")
            .field("reason", &self.reason)
            .field("route", &self.route)
            .field("status", &self.status)
            .field("retry_after", &self.retry_after)
            .field("policy", &self.policy())
            .field("limit", &self.limit())
            .field("remaining", &self.remaining())
            .field("violated_policies", &self.violated)
            .finish_non_exhaustive()
    }
}

impl Rejection {
    /// Why the request is refused.
    pub fn reason(&self) -> RejectionReason {
        self.reason
    }

    /// The route as logs and metrics name it: `METHOD /pattern` (`POST /login`,
    /// `GET /orders/{id}`), the matched pattern, never the raw path.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// The route's method (`POST`; `OTHER` for a made-up method on an undeclared route).
    pub fn method(&self) -> &str {
        &self.route[..self.pattern_at.saturating_sub(1)]
    }

    /// The route's matched pattern (`/orders/{id}`).
    pub fn pattern(&self) -> &str {
        &self.route[self.pattern_at..]
    }

    /// The status of the limiter's own answer: 429 for [`Limit`](RejectionReason::Limit)
    /// and [`Lockout`](RejectionReason::Lockout), 403 for
    /// [`Denied`](RejectionReason::Denied), 503 for
    /// [`StoreUnavailable`](RejectionReason::StoreUnavailable).
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// When the client may try again, in the whole seconds `Retry-After` says (at least
    /// one); `None` for [`Denied`](RejectionReason::Denied), which has no end the limiter
    /// knows of.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The binding limit's name, as `RateLimit-Policy` names it (`login`, `get_order.1`),
    /// without its quotes: for a limit or lockout, on a route that shows its limits.
    pub fn policy(&self) -> Option<&str> {
        self.binding.as_ref().map(|(name, _, _)| name.as_str())
    }

    /// The binding limit's quota (requests per window), when [`policy`](Self::policy) is
    /// known.
    pub fn limit(&self) -> Option<u64> {
        self.binding.as_ref().map(|(_, limit, _)| *limit)
    }

    /// The requests the binding limit has left (0 for a refusal over it), when
    /// [`policy`](Self::policy) is known.
    pub fn remaining(&self) -> Option<u64> {
        self.binding.as_ref().map(|(_, _, remaining)| *remaining)
    }

    /// The names of the limits that refused (`RateLimit-Policy`'s, without quotes), as the
    /// default body's `violated-policies` lists them: for
    /// [`StoreUnavailable`](RejectionReason::StoreUnavailable) every limit of the route,
    /// since none could be decided; none for [`Denied`](RejectionReason::Denied), nor on a
    /// route that hides its limits.
    pub fn violated_policies(&self) -> &[String] {
        &self.violated
    }

    /// The limiter's own answer to this refusal, as it is sent without
    /// [`RateLimiter::reject_with`](super::RateLimiter::reject_with): the
    /// `application/problem+json` body with its status and headers (`guide::headers`), to
    /// answer some reasons as the limiter does, or to decorate.
    pub fn default_response(&self) -> HttpResponse {
        let mut response =
            HttpResponse::with_body(self.status, self.body.clone()).map_into_boxed_body();
        *response.headers_mut() = self.headers.clone();
        response
    }

    /// A refusal for `reason` on `route`, whose default answer is `default`.
    pub(crate) fn new(
        reason: RejectionReason,
        route: &RouteInfo,
        default: HttpResponse,
        retry_after: Option<u64>,
        binding: Option<(usize, &LimitState)>,
        violated: u8,
    ) -> Self {
        let status = default.status();
        let headers = default.headers().clone();
        // The default answers' bodies are bytes: this never falls back.
        let body = default
            .into_body()
            .try_into_bytes()
            .unwrap_or_else(|_| Bytes::new());
        let unquoted = |name: &str| name.trim_matches('"').to_owned();
        let shown = !route.policy.hides_headers();
        let binding = binding.filter(|_| shown).and_then(|(index, state)| {
            let name = route.policy_names.get(index)?;
            Some((
                unquoted(name),
                u64::from(state.limit.max()),
                u64::from(state.remaining),
            ))
        });
        Rejection {
            reason,
            route: route.label.clone(),
            pattern_at: route.method.len() + 1,
            retry_after: retry_after.map(|secs| Duration::from_secs(secs.max(1))),
            binding,
            violated: answer::violated_names(route, violated)
                .map(unquoted)
                .collect(),
            status,
            headers,
            body,
        }
    }
}

/// The app's answer to `rejection`, with the limiter's headers: `Retry-After` and the
/// rate-limit headers of the default answer replace any the app set (they are the
/// limiter's figures), and `Cache-Control: no-store` is added unless the app set a
/// `Cache-Control` of its own. The app's status and body stand, whatever they are. A panic
/// in the app's function answers with the default instead, and is logged: a refusal must
/// never become a dropped connection.
pub(crate) fn answer_with(respond: &RejectWith, rejection: &Rejection) -> HttpResponse {
    let Ok(mut response) = catch_unwind(AssertUnwindSafe(|| respond(rejection))) else {
        tracing::error!(
            target: "ratelimit",
            route = %rejection.route,
            reason = rejection.reason.as_str(),
            "the function given to `RateLimiter::reject_with` panicked; answered with the limiter's default answer instead"
        );
        return rejection.default_response();
    };
    let own = response.headers_mut();
    let keeps_cache_control = own.contains_key(header::CACHE_CONTROL);
    for (name, value) in &rejection.headers {
        if *name == header::CONTENT_TYPE || (*name == header::CACHE_CONTROL && keeps_cache_control)
        {
            continue;
        }
        own.insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use actix_web::http::header::HeaderValue;

    use super::*;
    use crate::policy::{Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};

    fn route() -> RouteInfo {
        const LIMITS: &[Limit] = &[
            Limit::new(5, Window::from_secs(60), Algorithm::Gcra),
            Limit::new(50, Window::from_secs(3600), Algorithm::SlidingWindow),
        ];
        let policy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
        RouteInfo::new("login", "POST", "/login/{step}".to_owned(), policy)
    }

    fn refused(route: &RouteInfo) -> Rejection {
        let state = LimitState::new(
            route.policy.limits()[1],
            false,
            0,
            Duration::from_millis(1500),
            Duration::from_secs(40),
        );
        let default = answer::too_many_requests(
            route,
            1500,
            Some((1, &state)),
            crate::HeaderFamilies::default(),
            None,
            0b10,
        );
        Rejection::new(
            RejectionReason::Limit,
            route,
            default,
            Some(2),
            Some((1, &state)),
            0b10,
        )
    }

    #[test]
    fn a_rejection_names_its_route_and_the_binding_limit() {
        let route = route();
        let rejection = refused(&route);
        assert_eq!(rejection.route(), "POST /login/{step}");
        assert_eq!(rejection.method(), "POST");
        assert_eq!(rejection.pattern(), "/login/{step}");
        assert_eq!(rejection.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(rejection.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(rejection.policy(), Some("login.1"));
        assert_eq!(
            (rejection.limit(), rejection.remaining()),
            (Some(50), Some(0))
        );
        assert_eq!(rejection.violated_policies(), ["login.1"]);
        let debug = format!("{rejection:?}");
        assert!(
            debug.contains("reason: Limit") && debug.contains("login.1"),
            "{debug}"
        );
    }

    #[test]
    fn the_app_answer_gets_the_limiters_headers_and_keeps_its_own_cache_control() {
        let route = route();
        let rejection = refused(&route);
        let respond: RejectWith = Arc::new(|_: &Rejection| {
            HttpResponse::BadRequest()
                .insert_header((header::RETRY_AFTER, "9999"))
                .content_type("text/plain")
                .body("slow down")
        });
        let response = answer_with(&respond, &rejection);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let headers = response.headers();
        assert_eq!(headers.get(header::RETRY_AFTER).unwrap(), "2");
        assert_eq!(headers.get(header::CONTENT_TYPE).unwrap(), "text/plain");
        assert_eq!(headers.get(header::CACHE_CONTROL).unwrap(), "no-store");
        assert_eq!(headers.get("x-ratelimit-limit").unwrap(), "50");
        assert_eq!(headers.get("ratelimit").unwrap(), "\"login.1\";r=0;t=2");

        let private: RejectWith = Arc::new(|_: &Rejection| {
            HttpResponse::TooManyRequests()
                .insert_header((header::CACHE_CONTROL, "private, max-age=1"))
                .finish()
        });
        let response = answer_with(&private, &rejection);
        assert_eq!(
            response.headers().get(header::CACHE_CONTROL),
            Some(&HeaderValue::from_static("private, max-age=1"))
        );
    }
}
