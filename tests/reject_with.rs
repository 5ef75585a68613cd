//! `RateLimiter::reject_with`: an app answers refusals with its own body and status, told
//! why (over a limit, locked out, denied, the store down on a route that fails closed); the
//! limiter still adds `Retry-After`, its rate-limit headers (none on a route that hides its
//! limits) and `Cache-Control: no-store`. `Rejection::default_response` is the limiter's own
//! answer, which a panicking function falls back to; the function given twice is refused.

mod support;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use actix_service::IntoServiceFactory;
use actix_web::{
    body::MessageBody,
    dev::{AppConfig, Service, ServiceFactory, ServiceResponse},
    get,
    http::StatusCode,
    post,
    test::{self, TestRequest},
    web::Bytes,
    App, HttpResponse,
};
use ratelimit_runtime::{
    clock::ManualClock,
    overrides::Overrides,
    rate_limit,
    store::{MemoryStore, RedisStore},
    RateLimiter, Rejection, RejectionReason,
};
use support::{auth::errs_401, CapturedLog, RedisServer, T0};

#[rate_limit(
    limit = 2,
    window = "1m",
    identity = "ip",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[get("/search")]
async fn search() -> HttpResponse {
    HttpResponse::Ok().body("results")
}

/// A one-time-code route that keeps its thresholds to itself.
#[rate_limit(
    limit = 1,
    window = "1m",
    identity = "ip",
    algorithm = "sliding_log",
    headers = "none"
)]
#[post("/otp")]
async fn otp() -> HttpResponse {
    HttpResponse::Ok().body("code accepted")
}

#[rate_limit(
    limit = 1,
    window = "1m",
    identity = "ip",
    algorithm = "sliding_log",
    block = "15m"
)]
#[post("/login")]
async fn login() -> HttpResponse {
    HttpResponse::Ok().body("signed in")
}

/// Behind auth of its own that refuses with an error: a refusal over the limit comes back
/// as an error carrying the limiter's answer.
#[rate_limit(limit = 1, window = "1m", identity = "ip", fail = "closed")]
#[get("/vault", wrap = "actix_web::middleware::from_fn(errs_401)")]
async fn vault() -> HttpResponse {
    HttpResponse::Ok().body("vault")
}

/// Every rejection the app's function was given, in order.
type Seen = Arc<Mutex<Vec<Rejection>>>;

/// The answer of an API with error codes of its own: `423 Locked` for a lockout, the
/// default statuses otherwise.
fn api_answer(seen: &Seen) -> impl Fn(&Rejection) -> HttpResponse + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |rejection| {
        seen.lock().unwrap().push(rejection.clone());
        let status = match rejection.reason() {
            RejectionReason::Lockout => StatusCode::LOCKED,
            _ => rejection.status(),
        };
        HttpResponse::build(status).json(serde_json::json!({
            "code": rejection.reason().as_str(),
            "route": rejection.route(),
            "retry_in": rejection.retry_after().map(|wait| wait.as_secs()),
        }))
    }
}

fn limiter(clock: &ManualClock) -> RateLimiter {
    RateLimiter::new(MemoryStore::new()).clock(clock.clone())
}

async fn app(
    limiter: RateLimiter,
) -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(
        App::new()
            .service(search)
            .service(otp)
            .service(login)
            .service(vault)
            .wrap(limiter),
    )
    .await
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

/// Status, headers (sorted, as text) and body of an answer.
type Parts = (u16, Vec<(String, String)>, Bytes);

async fn parts_of(response: HttpResponse) -> Parts {
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    headers.sort();
    let status = response.status().as_u16();
    let body = actix_web::body::to_bytes(response.into_body())
        .await
        .unwrap();
    (status, headers, body)
}

/// The answer of `app` to `req`, whether it came back as a response or as an error (which
/// actix's server renders with `ResponseError::error_response`).
async fn answer<S, B>(app: &S, req: TestRequest) -> Parts
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    match app.call(req.to_request()).await {
        Ok(res) => parts_of(res.into_parts().1.map_into_boxed_body()).await,
        Err(error) => {
            // Middleware on the way out may ask an error for its answer before the server
            // does: the answer must not change.
            let first = parts_of(error.error_response()).await;
            assert_eq!(parts_of(error.error_response()).await, first, "{error}");
            first
        }
    }
}

fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .1
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn json(parts: &Parts) -> serde_json::Value {
    serde_json::from_slice(&parts.2).unwrap()
}

const RATE_LIMIT_HEADERS: [&str; 5] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-policy",
    "ratelimit",
];

fn last(seen: &Seen) -> Rejection {
    seen.lock()
        .unwrap()
        .last()
        .cloned()
        .expect("the app's function was called")
}

#[actix_web::test]
async fn a_refusal_answers_with_the_apps_body_and_the_limiters_headers() {
    let clock = ManualClock::at(T0);
    let seen = Seen::default();
    let app = app(limiter(&clock).reject_with(api_answer(&seen))).await;
    let query = || from("203.0.113.7").uri("/search");
    for _ in 0..2 {
        assert_eq!(answer(&app, query()).await.0, 200);
    }
    assert!(seen.lock().unwrap().is_empty(), "no refusal yet");

    let refused = answer(&app, query()).await;
    assert_eq!(refused.0, 429);
    assert_eq!(
        json(&refused),
        serde_json::json!({ "code": "limit", "route": "GET /search", "retry_in": 60 })
    );
    assert_eq!(header(&refused, "content-type"), Some("application/json"));
    assert_eq!(header(&refused, "retry-after"), Some("60"));
    assert_eq!(header(&refused, "cache-control"), Some("no-store"));
    assert_eq!(header(&refused, "x-ratelimit-limit"), Some("2"));
    assert_eq!(header(&refused, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        header(&refused, "ratelimit-policy"),
        Some("\"search\";q=2;w=60")
    );
    assert_eq!(header(&refused, "ratelimit"), Some("\"search\";r=0;t=60"));

    let rejection = last(&seen);
    assert_eq!(rejection.reason(), RejectionReason::Limit);
    assert_eq!(
        (rejection.method(), rejection.pattern()),
        ("GET", "/search")
    );
    assert_eq!(rejection.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(rejection.retry_after(), Some(Duration::from_secs(60)));
    assert_eq!(rejection.policy(), Some("search"));
    assert_eq!(
        (rejection.limit(), rejection.remaining()),
        (Some(2), Some(0))
    );
    assert_eq!(rejection.violated_policies(), ["search"]);

    // At once again: the flood shield answers without the store, and the app's function is
    // asked again, never a cached default served.
    let shielded = answer(&app, query()).await;
    assert_eq!(shielded, refused);
    assert_eq!(seen.lock().unwrap().len(), 2);
    // Ten seconds on, with the new wait.
    clock.advance(Duration::from_secs(10));
    let later = answer(&app, query()).await;
    assert_eq!(json(&later)["retry_in"], 50);
    assert_eq!(header(&later, "retry-after"), Some("50"));
    assert_eq!(header(&later, "content-type"), Some("application/json"));
    assert_eq!(seen.lock().unwrap().len(), 3);
}

/// A status that is no error is the app's choice (an API answering every error with 200):
/// it is sent, with the limiter's headers.
#[actix_web::test]
async fn an_answer_that_is_no_error_is_sent_as_the_app_gave_it() {
    let app = app(limiter(&ManualClock::at(T0)).reject_with(|rejection| {
        HttpResponse::Ok().json(serde_json::json!({ "errors": [rejection.reason().as_str()] }))
    }))
    .await;
    let query = || from("203.0.113.7").uri("/search");
    for _ in 0..2 {
        assert_eq!(answer(&app, query()).await.2, "results");
    }
    let refused = answer(&app, query()).await;
    assert_eq!(refused.0, 200);
    assert_eq!(json(&refused), serde_json::json!({ "errors": ["limit"] }));
    assert_eq!(header(&refused, "retry-after"), Some("60"));
    assert_eq!(header(&refused, "cache-control"), Some("no-store"));
    assert_eq!(header(&refused, "x-ratelimit-remaining"), Some("0"));
}

#[actix_web::test]
async fn a_route_that_hides_its_limits_keeps_only_retry_after() {
    let seen = Seen::default();
    let app = app(limiter(&ManualClock::at(T0)).reject_with(api_answer(&seen))).await;
    let code = || {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/otp")
    };
    assert_eq!(answer(&app, code()).await.0, 200);
    let refused = answer(&app, code()).await;
    assert_eq!(refused.0, 429);
    assert_eq!(json(&refused)["code"], "limit");
    assert_eq!(header(&refused, "retry-after"), Some("60"));
    for name in RATE_LIMIT_HEADERS {
        assert_eq!(header(&refused, name), None, "{name}");
    }
    // Nor does the app's function learn the thresholds to put in a body.
    let rejection = last(&seen);
    assert_eq!(rejection.route(), "POST /otp");
    assert_eq!(rejection.retry_after(), Some(Duration::from_secs(60)));
    assert_eq!(
        (rejection.policy(), rejection.limit(), rejection.remaining()),
        (None, None, None)
    );
    assert!(rejection.violated_policies().is_empty());
}

#[actix_web::test]
async fn a_lockout_is_told_apart_from_a_limit() {
    let clock = ManualClock::at(T0);
    let seen = Seen::default();
    let app = app(limiter(&clock).reject_with(api_answer(&seen))).await;
    let sign_in = || {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
    };
    assert_eq!(answer(&app, sign_in()).await.0, 200);
    let locked = answer(&app, sign_in()).await;
    assert_eq!(locked.0, 423);
    assert_eq!(json(&locked)["code"], "lockout");
    assert_eq!(header(&locked, "retry-after"), Some("900"));
    assert_eq!(header(&locked, "x-ratelimit-limit"), Some("1"));
    let rejection = last(&seen);
    assert_eq!(rejection.reason(), RejectionReason::Lockout);
    assert_eq!(rejection.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(rejection.retry_after(), Some(Duration::from_secs(900)));

    // The window is over, the lockout is not: still a lockout, counting down.
    clock.advance(Duration::from_secs(120));
    let still = answer(&app, sign_in()).await;
    assert_eq!(
        (still.0, json(&still)["code"].clone()),
        (423, "lockout".into())
    );
    assert_eq!(header(&still, "retry-after"), Some("780"));
    // The other routes refuse for the limit alone.
    let query = || from("203.0.113.7").uri("/search");
    for _ in 0..2 {
        answer(&app, query()).await;
    }
    assert_eq!(json(&answer(&app, query()).await)["code"], "limit");
}

/// An overrides file denying `203.0.113.66`, in a directory that lives as long as it.
fn deny_list() -> (tempfile::TempDir, Overrides) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    std::fs::write(&path, "[deny]\nips = [\"203.0.113.66\"]\n").unwrap();
    (dir, Overrides::new().file(path))
}

#[actix_web::test]
async fn a_client_on_the_deny_list_is_answered_by_the_app() {
    let (_dir, overrides) = deny_list();
    let seen = Seen::default();
    let limiter = limiter(&ManualClock::at(T0))
        .overrides(overrides)
        .reject_with(api_answer(&seen));
    let app = app(limiter).await;
    let denied = answer(&app, from("203.0.113.66").uri("/search")).await;
    assert_eq!(denied.0, 403);
    assert_eq!(
        json(&denied),
        serde_json::json!({ "code": "denied", "route": "GET /search", "retry_in": null })
    );
    assert_eq!(header(&denied, "cache-control"), Some("no-store"));
    assert_eq!(header(&denied, "retry-after"), None);
    for name in RATE_LIMIT_HEADERS {
        assert_eq!(header(&denied, name), None, "{name}");
    }
    let rejection = last(&seen);
    assert_eq!(rejection.reason(), RejectionReason::Denied);
    assert_eq!(rejection.status(), StatusCode::FORBIDDEN);
    assert_eq!(rejection.retry_after(), None);
    assert!(rejection.violated_policies().is_empty());

    // Refused in front of the route with an error (auth), a denied client still gets the
    // app's answer, however often the error is asked for it.
    let refused = answer(&app, from("203.0.113.66").uri("/vault")).await;
    assert_eq!(
        (refused.0, json(&refused)["code"].clone()),
        (403, "denied".into())
    );
    assert_eq!(json(&refused)["route"], "GET /vault");
    // Anyone else passes.
    assert_eq!(
        answer(&app, from("203.0.113.7").uri("/search")).await.0,
        200
    );
}

/// A refusal in front of the route, with an error, from a client over the limit: the
/// error carries the app's answer.
#[actix_web::test]
async fn a_refusal_by_middleware_in_front_becomes_the_apps_answer_over_the_limit() {
    let seen = Seen::default();
    let app = app(limiter(&ManualClock::at(T0)).reject_with(api_answer(&seen))).await;
    let open_vault = || from("203.0.113.7").uri("/vault");
    assert_eq!(answer(&app, open_vault()).await.0, 401);
    let refused = answer(&app, open_vault()).await;
    assert_eq!(refused.0, 429);
    assert_eq!(json(&refused)["code"], "limit");
    assert_eq!(header(&refused, "content-type"), Some("application/json"));
    assert!(header(&refused, "retry-after").is_some());
    assert_eq!(header(&refused, "x-ratelimit-limit"), Some("1"));
    assert_eq!(last(&seen).route(), "GET /vault");
}

#[actix_web::test]
async fn a_store_down_on_a_route_that_fails_closed_is_answered_by_the_app() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("store");
    let seen = Seen::default();
    let limiter = RateLimiter::new(store)
        .clock(ManualClock::at(T0))
        .reject_with(api_answer(&seen));
    let app = app(limiter).await;
    let query = || from("203.0.113.7").uri("/search");
    let counted = answer(&app, query()).await;
    assert_eq!(counted.0, 200);
    assert_eq!(header(&counted, "x-ratelimit-remaining"), Some("1"));

    server.kill();
    let down = answer(&app, query()).await;
    assert_eq!(down.0, 503);
    assert_eq!(
        json(&down),
        serde_json::json!({ "code": "store_unavailable", "route": "GET /search", "retry_in": 1 })
    );
    assert_eq!(header(&down, "retry-after"), Some("1"));
    assert_eq!(header(&down, "cache-control"), Some("no-store"));
    assert_eq!(header(&down, "x-ratelimit-remaining"), None);
    let rejection = last(&seen);
    assert_eq!(rejection.reason(), RejectionReason::StoreUnavailable);
    assert_eq!(rejection.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(rejection.retry_after(), Some(Duration::from_secs(1)));
    // No limit decided: every limit of the route is named, none is binding.
    assert_eq!(rejection.violated_policies(), ["search"]);
    assert_eq!(rejection.limit(), None);
}

/// The same refusals from a limiter with and without `reject_with(|r| r.default_response())`
/// are the same answers, byte for byte.
#[actix_web::test]
async fn the_default_response_is_the_limiters_own_answer() {
    let (_dir, overrides) = deny_list();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    let both = [
        limiter(&ManualClock::at(T0)).overrides(overrides.clone()),
        limiter(&ManualClock::at(T0))
            .overrides(overrides)
            .reject_with(move |rejection| {
                counted.fetch_add(1, Ordering::Relaxed);
                rejection.default_response()
            }),
    ];
    let mut answers = Vec::new();
    for limiter in both {
        let app = app(limiter).await;
        let post = |path| {
            from("203.0.113.7")
                .method(actix_web::http::Method::POST)
                .uri(path)
        };
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(answer(&app, from("203.0.113.7").uri("/search")).await);
        }
        for path in ["/otp", "/otp", "/login", "/login"] {
            seen.push(answer(&app, post(path)).await);
        }
        seen.push(answer(&app, from("203.0.113.66").uri("/search")).await);
        answers.push(seen);
    }
    let statuses: Vec<u16> = answers[0].iter().map(|parts| parts.0).collect();
    assert_eq!(statuses, [200, 200, 429, 200, 429, 200, 429, 403]);
    assert_eq!(
        header(&answers[0][2], "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(answers[0], answers[1]);
    // Every refusal of the second limiter was the function's.
    assert_eq!(asked.load(Ordering::Relaxed), 4);
}

#[actix_web::test]
async fn a_panicking_function_answers_with_the_default() {
    let log = CapturedLog::start(tracing::Level::ERROR);
    let plain = app(limiter(&ManualClock::at(T0))).await;
    let panicking = app(limiter(&ManualClock::at(T0))
        .reject_with(|_| -> HttpResponse { panic!("the app's answer broke") }))
    .await;
    let mut answers = Vec::new();
    for app in [&plain, &panicking] {
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(answer(app, from("203.0.113.7").uri("/search")).await);
        }
        answers.push(seen);
    }
    assert_eq!(answers[1][2].0, 429);
    assert_eq!(
        json(&answers[1][2])["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(answers[0], answers[1]);
    let text = log.text();
    assert!(
        text.contains("`RateLimiter::reject_with` panicked") && text.contains("GET /search"),
        "{text}"
    );
}

#[actix_web::test]
async fn reject_with_given_twice_is_a_refused_setting() {
    let twice = RateLimiter::new(MemoryStore::new())
        .reject_with(Rejection::default_response)
        .reject_with(|_| HttpResponse::TooManyRequests().finish());
    let error = twice.check_settings().unwrap_err();
    assert_eq!(
        error.problems(),
        ["`RateLimiter::reject_with(..)`: given twice: the later function replaces the earlier; give one function, matching on `Rejection::reason`"]
    );
    let factory = App::new().service(search).wrap(twice).into_factory();
    assert!(factory.new_service(AppConfig::default()).await.is_err());
    // Once is fine.
    let once = RateLimiter::new(MemoryStore::new()).reject_with(Rejection::default_response);
    assert!(once.check_settings().is_ok());
}
