//! The answers the limiter gives instead of the handler's: 429 and 503, as
//! `application/problem+json` (RFC 9457).

use actix_web::{http::StatusCode, HttpResponse};

use super::{headers, route_info::RouteInfo};

const PROBLEM_JSON: &str = "application/problem+json";

/// 429 Too Many Requests, retry after `retry_ms`.
pub(crate) fn too_many_requests(route: &RouteInfo, retry_ms: u64) -> HttpResponse {
    let seconds = headers::ceil_secs(retry_ms).max(1);
    let body = format!(
        r#"{{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded for {}; retry in {seconds}s","retry_after":{seconds}}}"#,
        route.label_json
    );
    with_retry_after(StatusCode::TOO_MANY_REQUESTS, body, seconds)
}

/// 503 Service Unavailable: the limiter's store did not answer and the route fails closed.
pub(crate) fn limiter_unavailable(route: &RouteInfo, retry_secs: u64) -> HttpResponse {
    let seconds = retry_secs.max(1);
    let body = format!(
        r#"{{"type":"about:blank","title":"Rate Limiter Unavailable","status":503,"detail":"the rate limiter for {} cannot decide right now and this route fails closed","retry_after":{seconds}}}"#,
        route.label_json
    );
    with_retry_after(StatusCode::SERVICE_UNAVAILABLE, body, seconds)
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
        .content_type(PROBLEM_JSON)
        .body(body.to_string())
}

fn with_retry_after(status: StatusCode, body: String, seconds: u64) -> HttpResponse {
    let mut response = HttpResponse::build(status)
        .content_type(PROBLEM_JSON)
        .body(body);
    headers::retry_after(response.headers_mut(), seconds);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};

    #[actix_web::test]
    async fn problem_bodies_are_valid_json_even_for_odd_patterns() {
        const LIMITS: &[Limit] = &[Limit::new(1, Window::from_secs(1), Algorithm::Gcra)];
        let policy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
        let route = RouteInfo::new("x", "GET", "/a\"b\\c/{id}".to_owned(), policy);
        for (response, status, retry) in [
            (too_many_requests(&route, 1500), 429, 2),
            (limiter_unavailable(&route, 1), 503, 1),
        ] {
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(
                response.headers().get("retry-after").unwrap(),
                retry.to_string().as_str()
            );
            let bytes = actix_web::body::to_bytes(response.into_body())
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(body["status"], status);
            assert_eq!(body["retry_after"], retry);
            assert!(body["detail"]
                .as_str()
                .unwrap()
                .contains("GET /a\"b\\c/{id}"));
        }
    }
}
