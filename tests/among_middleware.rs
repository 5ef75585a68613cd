//! The limiter among other actix middleware: what browsers (CORS), shared caches and
//! middleware further out that inspects errors see of its answers.

mod support;

use std::time::Duration;

use actix_cors::Cors;
use actix_web::{
    body::MessageBody,
    dev::{Service as _, ServiceResponse},
    error::InternalError,
    http::{header, Method, StatusCode},
    middleware::{from_fn, Condition, DefaultHeaders},
    post,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock,
    rate_limit,
    store::{MemoryStore, RedisStore},
    RateLimiter,
};
use support::T0;

#[rate_limit(
    limit = 2,
    window = "5m",
    identity = "ip",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok().body("welcome")
}

const ORIGIN: &str = "https://app.example";

fn limiter(clock: &ManualClock) -> RateLimiter {
    RateLimiter::new(MemoryStore::new()).clock(clock.clone())
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn post_login() -> TestRequest {
    from("203.0.113.7").method(Method::POST).uri("/login")
}

fn header(headers: &header::HeaderMap, name: header::HeaderName) -> Option<String> {
    headers.get(name).map(|v| v.to_str().unwrap().to_owned())
}

fn assert_no_store(headers: &header::HeaderMap) {
    assert_eq!(
        header(headers, header::CACHE_CONTROL).as_deref(),
        Some("no-store")
    );
}

fn cors() -> Cors {
    Cors::default()
        .allowed_origin(ORIGIN)
        .allowed_methods(["POST", "GET"])
        .allowed_header(header::CONTENT_TYPE)
        .expose_headers([header::RETRY_AFTER])
}

/// The answer `app` gives, an error rendered as the server would render it.
async fn answer_of<S, B>(app: &S, req: TestRequest) -> HttpResponse
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = ServiceResponse<B>,
        Error = actix_web::Error,
    >,
    B: MessageBody + 'static,
{
    match app.call(req.to_request()).await {
        Ok(res) => res.into_parts().1.map_into_boxed_body(),
        Err(err) => err.error_response(),
    }
}

/// A shared cache (a CDN) must never store one client's 429 and hand it to others:
/// `DefaultHeaders` adds only the headers a response lacks, so a site-wide
/// `Cache-Control: public` would land on the limiter's answers if they lacked one.
#[actix_web::test]
async fn a_429_is_never_made_cacheable_by_a_site_wide_cache_control() {
    let clock = ManualClock::at(T0);
    let app = test::init_service(
        App::new()
            .service(login)
            .wrap(limiter(&clock))
            .wrap(DefaultHeaders::new().add((header::CACHE_CONTROL, "public, max-age=300"))),
    )
    .await;
    for _ in 0..2 {
        let res = test::call_service(&app, post_login().to_request()).await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            header(res.headers(), header::CACHE_CONTROL).as_deref(),
            Some("public, max-age=300"),
            "an allowed answer keeps the app's own caching"
        );
    }
    // The first 429 is built, the second replayed (the flood shield's cached answer).
    for _ in 0..2 {
        let res = test::call_service(&app, post_login().to_request()).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_no_store(res.headers());
    }
}

/// The fail-closed 503 says `no-store` too: it is about this moment, not the resource.
#[actix_web::test]
async fn a_503_while_the_store_is_down_is_not_cacheable() {
    // Nothing listens on port 9 (discard): every check fails at once.
    let store = RedisStore::builder("redis://127.0.0.1:9")
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let app = test::init_service(App::new().service(login).wrap(RateLimiter::new(store))).await;
    let res = test::call_service(&app, post_login().to_request()).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_no_store(res.headers());
}

/// `Cors` outside the limiter (`.wrap(limiter).wrap(cors)`, as the README says): preflights
/// are answered by Cors and never counted, and the 429 carries the CORS headers, so a
/// browser lets the page read it and the exposed `Retry-After`.
#[actix_web::test]
async fn cors_outside_the_limiter_answers_preflights_uncounted_and_marks_the_429() {
    let clock = ManualClock::at(T0);
    let app =
        test::init_service(App::new().service(login).wrap(limiter(&clock)).wrap(cors())).await;
    let preflight = || {
        post_login()
            .method(Method::OPTIONS)
            .insert_header((header::ORIGIN, ORIGIN))
            .insert_header((header::ACCESS_CONTROL_REQUEST_METHOD, "POST"))
    };
    for _ in 0..5 {
        let res = test::call_service(&app, preflight().to_request()).await;
        assert_eq!(res.status(), 200);
        assert!(
            !res.headers().contains_key("x-ratelimit-limit"),
            "a preflight is not counted"
        );
    }
    let post = || post_login().insert_header((header::ORIGIN, ORIGIN));
    for _ in 0..2 {
        let res = test::call_service(&app, post().to_request()).await;
        assert_eq!(res.status(), 200);
    }
    let res = test::call_service(&app, post().to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(res.headers(), header::ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(),
        Some(ORIGIN)
    );
    let exposed = header(res.headers(), header::ACCESS_CONTROL_EXPOSE_HEADERS).unwrap();
    assert!(
        exposed.to_ascii_lowercase().contains("retry-after"),
        "{exposed}"
    );
    let res = test::call_service(&app, preflight().to_request()).await;
    assert_eq!(
        res.status(),
        200,
        "preflights still answered over the limit"
    );
}

/// CORS on an API scope with auth inside it: over the limit, a wrong password's refusal
/// turned 429 keeps the CORS headers the scope put on it, as the right password's 429 (from
/// the route's guard inside the scope) has them. Else any request with an `Origin` would
/// tell a right password from a wrong one after the budget was spent, and a browser would
/// see a CORS failure instead of the 429.
async fn over_the_limit_a_right_and_a_wrong_password_look_alike(by_error: bool) {
    let clock = ManualClock::at(T0);
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/api")
                    .service(login)
                    .wrap(Condition::new(
                        !by_error,
                        from_fn(support::auth::answers_401),
                    ))
                    .wrap(Condition::new(by_error, from_fn(support::auth::errs_401)))
                    .wrap(cors()),
            )
            .wrap(limiter(&clock)),
    )
    .await;
    let post = |password: &str| {
        from("203.0.113.7")
            .method(Method::POST)
            .uri("/api/login")
            .insert_header((header::ORIGIN, ORIGIN))
            .insert_header((header::AUTHORIZATION, format!("Basic {password}")))
    };
    let statuses = [
        answer_of(&app, post("wrong")).await.status(),
        answer_of(&app, post("wrong")).await.status(),
    ];
    assert_eq!(statuses, [StatusCode::UNAUTHORIZED; 2]);
    let names = |res: &HttpResponse| {
        let mut names: Vec<String> = res.headers().keys().map(|n| n.to_string()).collect();
        names.sort();
        names
    };
    let wrong = answer_of(&app, post("wrong")).await;
    let right = answer_of(&app, post("right")).await;
    assert_eq!(wrong.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(right.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(names(&wrong), names(&right), "by error: {by_error}");
    // The auth layer's own `Vary: Authorization` stays off too: of the refusal's `Vary`
    // tokens, CORS's are kept and the auth layer's are not.
    assert_eq!(
        header(wrong.headers(), header::VARY),
        header(right.headers(), header::VARY)
    );
    for res in [&wrong, &right] {
        assert_eq!(
            header(res.headers(), header::ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(),
            Some(ORIGIN)
        );
    }
    assert!(
        !wrong.headers().contains_key(header::WWW_AUTHENTICATE),
        "the refusing layer's own headers stay off the 429"
    );
}

#[actix_web::test]
async fn a_scope_cors_layer_marks_a_refusal_answer_turned_429_like_the_guards_429() {
    over_the_limit_a_right_and_a_wrong_password_look_alike(false).await;
}

#[actix_web::test]
async fn a_scope_cors_layer_marks_a_refusal_error_turned_429_like_the_guards_429() {
    over_the_limit_a_right_and_a_wrong_password_look_alike(true).await;
}

/// An error from further in passes the limiter as itself, with the limit's headers on its
/// answer: middleware further out that downcasts it (`Error::as_error::<T>()`, an error
/// reporter) finds the error itself, not a private wrapper of the limiter's.
#[actix_web::test]
async fn an_error_passing_the_limiter_keeps_its_type_and_gets_the_headers() {
    async fn undeclared() -> HttpResponse {
        HttpResponse::Ok().finish()
    }
    let clock = ManualClock::at(T0);
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/internal")
                    .route("/x", web::get().to(undeclared))
                    .wrap(from_fn(support::auth::errs_401)),
            )
            .wrap(limiter(&clock)),
    )
    .await;
    let err = match app
        .call(from("203.0.113.7").uri("/internal/x").to_request())
        .await
    {
        Err(err) => err,
        Ok(res) => panic!("expected the auth error, got {}", res.status()),
    };
    assert!(
        err.as_error::<InternalError<&'static str>>().is_some(),
        "the error's type is hidden: {err:?}"
    );
    let res = err.error_response();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert!(res.headers().contains_key("x-ratelimit-limit"));
}
