//! `count = "failures"` through the App: a success is a 2xx, a redirect is a failure, and a
//! handler that marks its attempt (on its response, or on its `Budget`) wins over the status;
//! `RateLimiter::success_statuses` changes the statuses for the whole App.

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    http::{header, StatusCode},
    post,
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use ratelimit_runtime::settings::Responses;
use ratelimit_runtime::{
    clock::ManualClock, rate_limit, store::MemoryStore, AttemptOutcome, Budget, RateLimiter,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Login {
    username: String,
    password: String,
}

impl Login {
    fn right(&self) -> bool {
        !self.username.is_empty() && self.password == "right"
    }
}

fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to))
        .finish()
}

/// A form sign-in: `303` both ways; the right password's redirect is marked a success on
/// the response (the handler takes no `Budget`).
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/form-login")]
async fn form_login(form: web::Form<Login>) -> HttpResponse {
    if !form.right() {
        return see_other("/login?error");
    }
    let mut response = see_other("/account");
    response.extensions_mut().insert(AttemptOutcome::Success);
    response
}

/// The same form sign-in, marking the right password's redirect on its `Budget`.
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/form-login-budget")]
async fn form_login_budget(form: web::Form<Login>, budget: Budget) -> HttpResponse {
    if !form.right() {
        return see_other("/login?error");
    }
    budget.mark_success();
    see_other("/account")
}

/// A JSON sign-in: `200` both ways; a wrong password is marked a failure on its `Budget`.
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/json-login")]
async fn json_login(body: web::Json<Login>, budget: Budget) -> HttpResponse {
    if !body.right() {
        budget.mark_failure();
    }
    HttpResponse::Ok().json(serde_json::json!({ "ok": body.right() }))
}

/// The same JSON sign-in, marking a wrong password on the response (no `Budget`).
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/json-login-response")]
async fn json_login_response(body: web::Json<Login>) -> HttpResponse {
    let mut response = HttpResponse::Ok().json(serde_json::json!({ "ok": body.right() }));
    if !body.right() {
        response.extensions_mut().insert(AttemptOutcome::Failure);
    }
    response
}

/// A JSON sign-in that marks a wrong password's `200` nowhere.
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/json-login-unmarked")]
async fn json_login_unmarked(body: web::Json<Login>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "ok": body.right() }))
}

/// Marked a success on its `Budget` and a failure on its response: the response's mark wins.
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/both-marks")]
async fn both_marks(body: web::Json<Login>, budget: Budget) -> HttpResponse {
    budget.mark_success();
    let mut response = HttpResponse::Ok().json(serde_json::json!({ "ok": false }));
    if !body.username.is_empty() {
        response.extensions_mut().insert(AttemptOutcome::Failure);
    }
    response
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
            .service(form_login)
            .service(form_login_budget)
            .service(json_login)
            .service(json_login_response)
            .service(json_login_unmarked)
            .service(both_marks)
            .wrap(limiter),
    )
    .await
}

fn limiter() -> RateLimiter {
    RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(1_700_000_000_000))
}

fn attempt(path: &str, username: &str, password: &str) -> TestRequest {
    let req = TestRequest::post()
        .uri(path)
        .peer_addr("198.51.100.7:40000".parse().unwrap());
    let fields = [("username", username), ("password", password)];
    if path.starts_with("/form") {
        req.set_form(fields)
    } else {
        req.set_json(serde_json::json!({ "username": username, "password": password }))
    }
}

/// The statuses of `n` attempts made one after another.
async fn statuses<S, B>(app: &S, n: usize, path: &str, username: &str, password: &str) -> Vec<u16>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let mut seen = Vec::with_capacity(n);
    for _ in 0..n {
        let req = attempt(path, username, password).to_request();
        seen.push(test::call_service(app, req).await.status().as_u16());
    }
    seen
}

/// The first `allowed` of 10 answered `status`, the rest 429.
fn then_refused(status: u16, allowed: usize) -> Vec<u16> {
    let mut expected = vec![status; allowed];
    expected.resize(10, 429);
    expected
}

#[actix_web::test]
async fn a_form_login_redirecting_wrong_passwords_lets_through_exactly_its_limit() {
    let app = app(limiter()).await;
    for path in ["/form-login", "/form-login-budget"] {
        let seen = statuses(&app, 10, path, "alice", "wrong").await;
        assert_eq!(
            seen,
            then_refused(303, 3),
            "{path}: a 303 is a failure by default"
        );
    }
}

#[actix_web::test]
async fn a_json_login_marking_its_failures_lets_through_exactly_its_limit() {
    let app = app(limiter()).await;
    for path in ["/json-login", "/json-login-response"] {
        let seen = statuses(&app, 10, path, "bob", "wrong").await;
        assert_eq!(
            seen,
            then_refused(200, 3),
            "{path}: a 200 marked a failure is one"
        );
    }
    // Unmarked, a 200 is a success: the guesses are given back.
    let seen = statuses(&app, 10, "/json-login-unmarked", "bob", "wrong").await;
    assert_eq!(seen, [200; 10]);
    // The response's mark wins over the `Budget`'s.
    let seen = statuses(&app, 10, "/both-marks", "bob", "wrong").await;
    assert_eq!(seen, then_refused(200, 3));
}

#[actix_web::test]
async fn a_redirect_marked_a_success_gives_its_unit_back() {
    let app = app(limiter()).await;
    for path in ["/form-login", "/form-login-budget"] {
        // Two wrong guesses spend two of the three units; right passwords spend none.
        let seen = statuses(&app, 2, path, "carol", "wrong").await;
        assert_eq!(seen, [303, 303], "{path}");
        let req = attempt(path, "carol", "right").to_request();
        let right = test::call_service(&app, req).await;
        assert_eq!(right.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(
            right.headers().get(header::LOCATION).unwrap(),
            "/account",
            "{path}"
        );
        assert_eq!(
            right.headers().get("x-ratelimit-remaining").unwrap(),
            "1",
            "{path}: the headers count the unit given back"
        );
        let seen = statuses(&app, 10, path, "carol", "right").await;
        assert_eq!(seen, [303; 10], "{path}: right passwords use no budget");
        // The one unit left goes to the next wrong guess.
        let seen = statuses(&app, 2, path, "carol", "wrong").await;
        assert_eq!(seen, [303, 429], "{path}");
    }
    // A JSON sign-in's right password (an unmarked 200) uses no budget either.
    let seen = statuses(&app, 10, "/json-login", "carol", "right").await;
    assert_eq!(seen, [200; 10]);
}

#[actix_web::test]
async fn success_statuses_restores_redirects_as_successes_and_marks_still_win() {
    let limiter = limiter().responses(
        Responses::new()
            .success_statuses(|status: StatusCode| status.is_success() || status.is_redirection()),
    );
    let app = app(limiter).await;
    let seen = statuses(&app, 10, "/form-login", "dave", "wrong").await;
    assert_eq!(seen, [303; 10], "every redirect is a success again");
    let seen = statuses(&app, 10, "/json-login", "dave", "wrong").await;
    assert_eq!(seen, then_refused(200, 3), "a mark wins over the statuses");
}
