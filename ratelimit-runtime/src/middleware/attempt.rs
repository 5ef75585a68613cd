//! What a handler's attempt came to on a route that counts failures only
//! ([`AttemptOutcome`]), and why a request a limiter passed has no budget ([`Unlimited`]).

/// Why a request a [`RateLimiter`](crate::RateLimiter) passed has no budget: no limit counts
/// it, so its [`Budget`](crate::Budget) does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unlimited {
    /// The client is on the overrides' allow list.
    AllowList,
    /// The route is exempt: declared `#[rate_limit(exempt = "...")]`, or exempted by an
    /// override.
    Exempt,
}

/// How the attempt a handler answered went, for limits that count failures only (`count =
/// "failures"`): it wins over the answer's status. Without it, a 2xx is a success (gives
/// its unit back) and anything else a failure, or as
/// [`Responses::success_statuses`](crate::settings::Responses::success_statuses) says.
///
/// A handler marks its answer by inserting it in the response's extensions, so it need not
/// take [`Budget`](crate::Budget) (or with
/// [`Budget::mark_success`](crate::Budget::mark_success) /
/// [`Budget::mark_failure`](crate::Budget::mark_failure); the response's mark wins over the
/// `Budget`'s). For a sign-in that answers a wrong password
/// with `200 {"ok": false}`, or a right one with `303 See Other` to the account page:
///
/// ```
/// use actix_web::{http::header, post, web, HttpResponse};
/// use ratelimit_runtime::{rate_limit, AttemptOutcome};
///
/// #[derive(serde::Deserialize)]
/// struct Login {
///     username: String,
///     password: String,
/// }
///
/// #[rate_limit(limit = 5, window = "5m", identity = "username", count = "failures")]
/// #[post("/login")]
/// async fn login(form: web::Form<Login>) -> HttpResponse {
///     if form.password == "right" {
///         let mut response = HttpResponse::SeeOther()
///             .insert_header((header::LOCATION, "/account"))
///             .finish();
///         // A redirect is a failure unless the handler says otherwise.
///         response.extensions_mut().insert(AttemptOutcome::Success);
///         response
///     } else {
///         HttpResponse::SeeOther()
///             .insert_header((header::LOCATION, "/login?error"))
///             .finish()
///     }
/// }
/// # let _ = actix_web::App::new().service(login);
/// ```
///
/// On a limit that counts every request, the mark changes nothing; nor after the handler reset
/// or gave back its budget itself, which takes over from `count = "failures"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The attempt succeeded: its unit goes back to the limits that count failures only.
    Success,
    /// The attempt failed: its unit stays spent.
    Failure,
}
