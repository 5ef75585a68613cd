//! The answers the limiter gives instead of the handler's: 429 and 503, as
//! `application/problem+json` (RFC 9457).

use actix_web::{http::StatusCode, HttpResponse};

use super::headers;

/// 429 Too Many Requests, retry after `retry_ms`.
pub(crate) fn too_many_requests(route: &str, retry_ms: u64) -> HttpResponse {
    let seconds = headers::ceil_secs(retry_ms).max(1);
    problem(
        StatusCode::TOO_MANY_REQUESTS,
        "Too Many Requests",
        &format!("rate limit exceeded for {route}; retry in {seconds}s"),
        seconds,
    )
}

/// 503 Service Unavailable: the limiter's store did not answer and the route fails closed.
pub(crate) fn limiter_unavailable(route: &str, retry_secs: u64) -> HttpResponse {
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "Rate Limiter Unavailable",
        &format!("the rate limiter for {route} cannot decide right now and this route fails closed"),
        retry_secs.max(1),
    )
}

/// 500: a declared route runs without the App-level `RateLimiter`.
pub(crate) fn limiter_not_installed(route: &str) -> HttpResponse {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Rate Limiter Not Installed",
        "status": 500,
        "detail": format!("{route} declares a rate limit, but the App is not wrapped with `RateLimiter`"),
    });
    HttpResponse::InternalServerError()
        .content_type("application/problem+json")
        .body(body.to_string())
}

fn problem(status: StatusCode, title: &str, detail: &str, retry_secs: u64) -> HttpResponse {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "retry_after": retry_secs,
    });
    let mut response = HttpResponse::build(status)
        .content_type("application/problem+json")
        .body(body.to_string());
    headers::retry_after(response.headers_mut(), retry_secs);
    response
}
