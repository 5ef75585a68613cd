//! The answers the limiter gives instead of the handler's: 429 and 503, as
//! `application/problem+json` (RFC 9457).

use std::{cell::RefCell, fmt};

use actix_web::{
    body::{BoxBody, MessageBody},
    http::{
        header::{self, HeaderMap, HeaderValue},
        StatusCode,
    },
    web::Bytes,
    Error, HttpResponse, ResponseError,
};

use super::{
    headers::{self, HeaderFamilies},
    route_info::{CachedRejection, RejectionFigures, RouteInfo},
};
use crate::{identity::Unreadable, key::PartitionKey, store::LimitState};

const PROBLEM_JSON: &str = "application/problem+json";

/// The problem type of a 429 (draft-ietf-httpapi-ratelimit-headers, IANA's HTTP Problem
/// Types registry).
pub(crate) const QUOTA_EXCEEDED: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem type of a fail-closed 503: the limiter cannot decide right now.
pub(crate) const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// 429 Too Many Requests, retry after `retry_ms`, with the rate-limit headers of `binding`
/// (the binding limit's index into the route's limits, and its state) and `partition` (the
/// client's `pk`); `violated` has bit `i` set for each limit `i` that refused, which the
/// body names in `violated-policies`.
pub(crate) fn too_many_requests(
    route: &RouteInfo,
    retry_ms: u64,
    binding: Option<(usize, &LimitState)>,
    families: HeaderFamilies,
    partition: Option<&PartitionKey>,
    violated: u8,
) -> HttpResponse {
    let seconds = headers::ceil_secs(retry_ms).max(1);
    let figures = RejectionFigures {
        retry_secs: seconds,
        binding: binding.map(|(index, state)| {
            let reset = headers::ceil_secs(state.reset_after.as_millis() as u64);
            let window = headers::ceil_secs(headers::effective_window_ms(state, families.draft));
            (index, state.remaining, reset, window)
        }),
        families,
        partition: partition.copied(),
        violated,
    };
    let mut last = route.rejection.borrow_mut();
    if let Some(rejection) = last.as_ref().filter(|r| r.figures == figures) {
        let mut response =
            HttpResponse::with_body(StatusCode::TOO_MANY_REQUESTS, rejection.body.clone())
                .map_into_boxed_body();
        let headers = response.headers_mut();
        for (name, value) in &rejection.headers {
            headers.insert(name.clone(), value.clone());
        }
        return response;
    }
    let body = Bytes::from(format!(
        r#"{{"type":"{QUOTA_EXCEEDED}","title":"Too Many Requests","status":429,"detail":"rate limit exceeded for {}; retry in {seconds}s","retry_after":{seconds}{}}}"#,
        route.label_json,
        violated_policies(route, violated),
    ));
    let mut response = with_retry_after(StatusCode::TOO_MANY_REQUESTS, body.clone(), seconds);
    if let Some(binding) = binding {
        headers::insert(response.headers_mut(), families, route, binding, partition);
    }
    *last = Some(CachedRejection {
        figures,
        headers: response
            .headers()
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
        body,
    });
    response
}

/// `,"violated-policies":[...]`: the names `RateLimit-Policy` gives the limits whose bit is
/// set in `violated`; nothing on a route that hides its limits, or when no bit is set.
fn violated_policies(route: &RouteInfo, violated: u8) -> String {
    if route.policy.hides_headers() || violated == 0 {
        return String::new();
    }
    // Policy names are quoted structured-field strings of printable ASCII without `"` or
    // `\`: as they stand, JSON strings too.
    let names: Vec<&str> = violated_names(route, violated).collect();
    format!(r#","violated-policies":[{}]"#, names.join(","))
}

/// The quoted names `RateLimit-Policy` gives the limits whose bit is set in `violated`;
/// none on a route that hides its limits.
pub(crate) fn violated_names(route: &RouteInfo, violated: u8) -> impl Iterator<Item = &str> {
    let shown = !route.policy.hides_headers();
    route
        .policy_names
        .iter()
        .enumerate()
        .filter(move |(i, _)| shown && *i < 8 && violated & (1 << i) != 0)
        .map(|(_, name)| name.as_str())
}

/// The bits of `violated_policies` for the limits at `indices`.
pub(crate) fn violated_bits(indices: impl IntoIterator<Item = usize>) -> u8 {
    indices
        .into_iter()
        .filter(|i| *i < 8)
        .fold(0, |bits, i| bits | (1 << i))
}

/// 503 Service Unavailable: the limiter's store did not answer and the route fails closed.
/// Every limit of the route is undecided, so the body names them all.
pub(crate) fn limiter_unavailable(route: &RouteInfo, retry_secs: u64) -> HttpResponse {
    let seconds = retry_secs.max(1);
    let body = format!(
        r#"{{"type":"{TEMPORARY_REDUCED_CAPACITY}","title":"Rate Limiter Unavailable","status":503,"detail":"the rate limiter for {} cannot decide right now and this route fails closed","retry_after":{seconds}{}}}"#,
        route.label_json,
        violated_policies(route, violated_bits(0..route.policy_names.len())),
    );
    with_retry_after(StatusCode::SERVICE_UNAVAILABLE, body, seconds)
}

/// Copies onto `too_many` (the 429 replacing a refusal over the limit) the CORS headers that
/// a CORS layer between the refusal and the limiter (on a scope) put on the refusal, since a
/// request that passed the refusing layer and got its 429 from the route's guard carries
/// them too: a right and a wrong password must get the same answer, and a browser must be
/// let to read the 429. Only the CORS family, and of `Vary` only the tokens a CORS layer
/// adds: any other header or token of the refusal may be the refusing layer's own
/// (`WWW-Authenticate`, `Vary: Authorization`), which would tell the two apart the other way
/// round.
pub(crate) fn keep_outer_headers(too_many: &mut HeaderMap, refused: &HeaderMap) {
    for name in refused.keys() {
        if !name.as_str().starts_with("access-control-") || too_many.contains_key(name) {
            continue;
        }
        for value in refused.get_all(name) {
            too_many.append(name.clone(), value.clone());
        }
    }
    let cors_tokens: Vec<&str> = refused
        .get_all(header::VARY)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|token| {
            token.eq_ignore_ascii_case("origin")
                || token
                    .get(..15)
                    .is_some_and(|head| head.eq_ignore_ascii_case("access-control-"))
        })
        .collect();
    if !cors_tokens.is_empty() && !too_many.contains_key(header::VARY) {
        if let Ok(value) = HeaderValue::from_str(&cors_tokens.join(", ")) {
            too_many.insert(header::VARY, value);
        }
    }
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

/// `403 Forbidden`: the client is on the deny list of the overrides in force.
pub(crate) fn denied(route: &RouteInfo) -> HttpResponse {
    let body = format!(
        r#"{{"type":"about:blank","title":"Forbidden","status":403,"detail":"{} refuses this client: it is on the deny list"}}"#,
        route.label_json
    );
    HttpResponse::Forbidden()
        .content_type(PROBLEM_JSON)
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .body(body)
}

/// The `400` of a route that refuses requests whose username cannot be read
/// ([`UsernameReader::refuse_unreadable`](crate::identity::UsernameReader::refuse_unreadable)),
/// or `413` for a body over the reader's buffer, as `web::Json` and `web::Form` answer one
/// over their limit.
pub(crate) fn unreadable_username(route: &RouteInfo, why: Unreadable) -> HttpResponse {
    let status = match why {
        Unreadable::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Unreadable Username",
        "status": status.as_u16(),
        "detail": format!(
            "{}: {}; send the username in a JSON or form body this route reads",
            route.label,
            why.reason()
        ),
    });
    HttpResponse::build(status)
        .content_type(PROBLEM_JSON)
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .body(body.to_string())
}

fn with_retry_after(
    status: StatusCode,
    body: impl MessageBody + 'static,
    seconds: u64,
) -> HttpResponse {
    // One client's refusal: a shared cache (a CDN) must not hand it to others, and a
    // site-wide `DefaultHeaders` Cache-Control must not make it cacheable.
    let mut response = HttpResponse::build(status)
        .content_type(PROBLEM_JSON)
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .body(body);
    headers::retry_after(response.headers_mut(), seconds);
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{Algorithm, FailMode, Identity, Limit, RoutePolicy, Window};

    /// Headers as sorted text pairs, and the body.
    async fn parts(response: HttpResponse) -> (Vec<(String, String)>, Bytes) {
        let mut headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        headers.sort();
        let body = actix_web::body::to_bytes(response.into_body())
            .await
            .unwrap();
        (headers, body)
    }

    #[actix_web::test]
    async fn a_repeated_rejection_is_the_same_answer_and_new_figures_make_a_new_one() {
        const LIMITS: &[Limit] = &[Limit::new(5, Window::from_secs(60), Algorithm::Gcra)];
        let policy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
        let route = RouteInfo::new("login", "POST", "/login".to_owned(), policy);
        let state = |reset_ms| LimitState {
            limit: LIMITS[0],
            allowed: false,
            remaining: 0,
            retry_after: Duration::from_millis(1500),
            reset_after: Duration::from_millis(reset_ms),
        };
        let both = HeaderFamilies::default();
        let answer = |retry_ms, reset_ms, families| {
            parts(too_many_requests(
                &route,
                retry_ms,
                Some((0, &state(reset_ms))),
                families,
                None,
                1,
            ))
        };
        let first = answer(1500, 1500, both).await;
        assert_eq!(answer(1500, 1500, both).await, first);
        let header = |parts: &(Vec<(String, String)>, Bytes), name: &str| {
            parts
                .0
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header(&first, "retry-after").as_deref(), Some("2"));
        assert_eq!(header(&first, "x-ratelimit-reset").as_deref(), Some("2"));
        assert_eq!(
            header(&first, "ratelimit").as_deref(),
            Some("\"login\";r=0;t=2")
        );

        // New figures, new answer: retry, reset and body follow them.
        let later = answer(2500, 30_000, both).await;
        assert_eq!(header(&later, "retry-after").as_deref(), Some("3"));
        assert_eq!(header(&later, "x-ratelimit-reset").as_deref(), Some("30"));
        assert!(std::str::from_utf8(&later.1)
            .unwrap()
            .contains("retry in 3s"));
        let draft_only = HeaderFamilies::both().x_ratelimit(false);
        let fewer = answer(2500, 30_000, draft_only).await;
        assert_eq!(header(&fewer, "x-ratelimit-reset"), None);
        // Refused, the effective window is the limit's own wait (1.5 s), not its reset.
        assert_eq!(
            header(&fewer, "ratelimit").as_deref(),
            Some("\"login\";r=0;t=2")
        );
        let older = draft_only.ietf_draft_version(crate::IetfDraft::Draft10);
        assert_eq!(
            header(&answer(2500, 30_000, older).await, "ratelimit").as_deref(),
            Some("\"login\";r=0;t=30")
        );
        // And the old figures give the old answer again.
        assert_eq!(answer(1500, 1500, both).await, first);
        let none = parts(too_many_requests(&route, 1500, None, both, None, 1)).await;
        assert_eq!(header(&none, "x-ratelimit-remaining"), None);
        assert_eq!(header(&none, "retry-after").as_deref(), Some("2"));
    }

    #[actix_web::test]
    async fn problem_bodies_are_valid_json_even_for_odd_patterns() {
        const LIMITS: &[Limit] = &[Limit::new(1, Window::from_secs(1), Algorithm::Gcra)];
        let policy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
        let route = RouteInfo::new("x", "GET", "/a\"b\\c/{id}".to_owned(), policy);
        for (response, status, retry, problem) in [
            (
                too_many_requests(&route, 1500, None, HeaderFamilies::default(), None, 1),
                429,
                2,
                QUOTA_EXCEEDED,
            ),
            (
                limiter_unavailable(&route, 1),
                503,
                1,
                TEMPORARY_REDUCED_CAPACITY,
            ),
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
            assert_eq!(body["type"], problem);
            assert_eq!(body["violated-policies"], serde_json::json!(["x"]));
            assert!(body["detail"]
                .as_str()
                .unwrap()
                .contains("GET /a\"b\\c/{id}"));
        }
    }
}

/// A refusal that came back as an error (middleware in front of a declared route refused
/// the request) from a client over the limit or on the deny list: it answers with the
/// route's 429 (or 403, or the app's own answer in their place) every time it is asked
/// (actix's `InternalError` gives its response up once, then answers 500), and keeps the
/// original error as its cause for logs.
#[derive(Debug)]
pub(crate) struct RefusedOverLimit {
    cause: Error,
    status: StatusCode,
    headers: HeaderMap,
    body: RefusalBody,
}

/// The body of a [`RefusedOverLimit`]: bytes, answered every time; or a stream (an app's
/// own answer may be one), which can be sent once only: asked again, the answer keeps its
/// status and headers with an empty body.
#[derive(Debug)]
enum RefusalBody {
    Bytes(Bytes),
    Stream(RefCell<Option<BoxBody>>),
}

impl RefusedOverLimit {
    /// `cause` answered with `answer` (the limiter's) instead.
    pub(crate) fn new(cause: Error, answer: HttpResponse) -> Self {
        let status = answer.status();
        let mut headers = answer.headers().clone();
        // What the cause answers, with what the middleware on its way out added (a CORS
        // layer adds its headers to an error as a response mapper); asked once, here, since
        // some errors give their answer once only.
        keep_outer_headers(&mut headers, cause.error_response().headers());
        let body = match answer.into_body().try_into_bytes() {
            Ok(bytes) => RefusalBody::Bytes(bytes),
            Err(stream) => RefusalBody::Stream(RefCell::new(Some(stream))),
        };
        RefusedOverLimit {
            cause,
            status,
            headers,
            body,
        }
    }
}

impl fmt::Display for RefusedOverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (refused by the rate limiter: answered {})",
            self.cause, self.status
        )
    }
}

impl ResponseError for RefusedOverLimit {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        let mut response = match &self.body {
            RefusalBody::Bytes(bytes) => {
                HttpResponse::with_body(self.status, bytes.clone()).map_into_boxed_body()
            }
            RefusalBody::Stream(stream) => {
                let body = stream.borrow_mut().take();
                HttpResponse::with_body(self.status, body.unwrap_or_else(|| BoxBody::new(())))
            }
        };
        *response.headers_mut() = self.headers.clone();
        response
    }
}
