//! Sign-in flows through the App, against real Redis: only failures use the budget, a spent
//! budget locks the client out, and code clears a budget (the handler's own `Budget`, and
//! `RateLimiter::reset` for another route).

mod support;

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    http::StatusCode,
    post,
    test::{self, TestRequest},
    web, App, HttpResponse, HttpServer,
};
use futures_util::future::join_all;
use ratelimit_runtime::{
    clock::ManualClock, rate_limit, store::RedisStore, Budget, IdentityPart, RateLimiter,
};
use serde::Deserialize;
use support::{free_port, RedisServer, T0};

#[derive(Deserialize)]
struct Login {
    username: String,
    password: String,
}

/// Attempts that reached the sign-in handler.
#[derive(Default)]
struct Reached(AtomicUsize);

impl Reached {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Wrong passwords count, right ones do not; 10 failures lock the name out for 15 minutes.
/// A password of `panic` crashes the handler.
#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "username",
    count = "failures",
    block = "15m",
    fail = "closed"
)]
#[post("/login")]
async fn login(body: web::Json<Login>, reached: web::Data<Reached>) -> HttpResponse {
    reached.0.fetch_add(1, Ordering::SeqCst);
    match body.password.as_str() {
        "right" => HttpResponse::Ok().finish(),
        "panic" => panic!("the sign-in handler crashed"),
        _ => HttpResponse::Unauthorized().finish(),
    }
}

/// A right code clears this user's failed attempts on this route, through its `Budget`.
#[rate_limit(limit = 3, window = "10m", identity = "username", fail = "closed")]
#[post("/verify")]
async fn verify(body: web::Json<Login>, budget: Budget) -> HttpResponse {
    if body.password == "right" {
        budget.reset().await.expect("reset");
        return HttpResponse::Ok().finish();
    }
    HttpResponse::Forbidden().body(budget.remaining().unwrap_or_default().to_string())
}

/// A right code gives back one unit itself; the request's own is then not given back too.
#[rate_limit(
    limit = 3,
    window = "10m",
    identity = "username",
    count = "failures",
    fail = "closed"
)]
#[post("/redeem")]
async fn redeem(body: web::Json<Login>, budget: Budget) -> HttpResponse {
    if body.password == "right" {
        assert_eq!(budget.give_back(1).await.expect("give back"), 1);
        return HttpResponse::Ok().finish();
    }
    HttpResponse::Forbidden().finish()
}

/// A finished password reset clears the name's sign-in budget.
#[rate_limit(limit = 5, window = "1h", identity = "ip", fail = "closed")]
#[post("/password-reset")]
async fn password_reset(body: web::Json<Login>, limiter: web::Data<RateLimiter>) -> HttpResponse {
    let name = [(IdentityPart::Username, body.username.as_str())];
    limiter
        .reset("POST /login", &name)
        .await
        .expect("reset the sign-in budget");
    HttpResponse::Ok().finish()
}

async fn limiter(server: &RedisServer, clock: &ManualClock) -> RateLimiter {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("store");
    RateLimiter::new(store).clock(clock.clone())
}

async fn app(
    limiter: RateLimiter,
    reached: &web::Data<Reached>,
) -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(
        App::new()
            .app_data(reached.clone())
            .app_data(web::Data::new(limiter.clone()))
            .service(login)
            .service(verify)
            .service(redeem)
            .service(password_reset)
            .wrap(limiter),
    )
    .await
}

fn attempt(path: &str, username: &str, password: &str) -> TestRequest {
    TestRequest::post()
        .uri(path)
        .peer_addr("198.51.100.7:40000".parse().unwrap())
        .set_json(serde_json::json!({ "username": username, "password": password }))
}

async fn send<S, B>(app: &S, req: TestRequest) -> ServiceResponse<B>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    test::call_service(app, req.to_request()).await
}

#[actix_web::test]
async fn of_100_concurrent_wrong_passwords_exactly_10_reach_the_handler() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let app = app(limiter(&server, &clock).await, &reached).await;
    let statuses = join_all((0..100).map(|_| send(&app, attempt("/login", "alice", "wrong"))))
        .await
        .iter()
        .map(|r| r.status())
        .collect::<Vec<_>>();
    assert_eq!(reached.count(), 10);
    let unauthorized = statuses.iter().filter(|s| **s == StatusCode::UNAUTHORIZED);
    assert_eq!(unauthorized.count(), 10);
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.count(), 90);
}

/// The headers tell what is left after the request: a success, whose unit went back, leaves
/// what the failure before it left.
#[actix_web::test]
async fn a_success_headers_count_its_unit_given_back() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let app = app(limiter(&server, &clock).await, &reached).await;
    let mut left = Vec::new();
    for password in ["wrong", "right", "right", "wrong"] {
        let response = send(&app, attempt("/login", "dora", password)).await;
        let remaining = response.headers().get("x-ratelimit-remaining").unwrap();
        left.push(remaining.to_str().unwrap().to_owned());
    }
    assert_eq!(left, ["9", "9", "9", "8"]);
    // A success on a whole budget leaves it whole: nothing to wait for.
    let whole = send(&app, attempt("/login", "ezra", "right")).await;
    let header = |name: &str| {
        whole
            .headers()
            .get(name)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        (header("x-ratelimit-remaining"), header("x-ratelimit-reset")),
        ("10".to_owned(), "0".to_owned())
    );
}

#[actix_web::test]
async fn right_passwords_use_no_budget_and_a_breach_locks_the_name_out_for_the_block() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let app = app(limiter(&server, &clock).await, &reached).await;
    // 100 sign-ins interleaved with 9 failures: all reach the handler.
    for i in 0..109 {
        let password = if i % 12 == 5 { "wrong" } else { "right" };
        let status = send(&app, attempt("/login", "bob", password))
            .await
            .status();
        assert!(status != StatusCode::TOO_MANY_REQUESTS, "attempt {i}");
    }
    assert_eq!(reached.count(), 109);
    // The 10th failure is answered; the 11th attempt, right or wrong, is locked out.
    assert_eq!(
        send(&app, attempt("/login", "bob", "wrong")).await.status(),
        StatusCode::UNAUTHORIZED
    );
    for password in ["wrong", "right"] {
        clock.advance(Duration::from_secs(60));
        let locked = send(&app, attempt("/login", "bob", password)).await;
        assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS, "{password}");
        let retry: u64 = locked
            .headers()
            .get("retry-after")
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // The lockout began at the first refusal (60 s ago for the second one).
        assert!((840..=900).contains(&retry), "Retry-After {retry}");
    }
    assert_eq!(reached.count(), 110);
    // Another name is not locked out.
    assert_eq!(
        send(&app, attempt("/login", "carol", "right"))
            .await
            .status(),
        StatusCode::OK
    );
    // After the block the name has its whole budget again.
    clock.advance(Duration::from_secs(15 * 60));
    for _ in 0..10 {
        let status = send(&app, attempt("/login", "bob", "wrong")).await.status();
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let status = send(&app, attempt("/login", "bob", "right")).await.status();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[actix_web::test]
async fn a_password_reset_clears_the_names_sign_in_budget_and_no_other() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let app = app(limiter(&server, &clock).await, &reached).await;
    for name in ["dave", "erin"] {
        for _ in 0..10 {
            send(&app, attempt("/login", name, "wrong")).await;
        }
        let locked = send(&app, attempt("/login", name, "right")).await.status();
        assert_eq!(locked, StatusCode::TOO_MANY_REQUESTS, "{name}");
    }
    // The reset names the user as submitted: its canonical form is what the route counts.
    let reset = send(&app, attempt("/password-reset", "DAVE", "-")).await;
    assert_eq!(reset.status(), StatusCode::OK);
    assert_eq!(
        send(&app, attempt("/login", "dave", "right"))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&app, attempt("/login", "erin", "right"))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[actix_web::test]
async fn a_handler_clears_its_own_routes_budget_through_budget() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let app = app(limiter(&server, &clock).await, &reached).await;
    for left in ["2", "1"] {
        let wrong = send(&app, attempt("/verify", "frank", "wrong")).await;
        assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
        assert_eq!(test::read_body(wrong).await, left);
    }
    let right = send(&app, attempt("/verify", "frank", "right")).await;
    assert_eq!(right.status(), StatusCode::OK);
    // Cleared: three attempts again.
    for left in ["2", "1", "0"] {
        let wrong = send(&app, attempt("/verify", "frank", "wrong")).await;
        assert_eq!(test::read_body(wrong).await, left);
    }
    let over = send(&app, attempt("/verify", "frank", "wrong")).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[actix_web::test]
async fn a_handler_that_gives_back_itself_takes_over_from_count_failures() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let app = app(limiter(&server, &clock).await, &reached).await;
    let mut statuses = Vec::new();
    for password in ["wrong", "wrong", "right", "wrong", "wrong"] {
        let response = send(&app, attempt("/redeem", "hana", password)).await;
        statuses.push(response.status().as_u16());
    }
    // The right code's unit came back once (by its handler): the two wrong codes stay
    // spent, one more is allowed, the next refused.
    assert_eq!(statuses, [403, 403, 200, 403, 429]);
}

/// A handler that panics never answers, so its attempt counts as a failure.
#[actix_web::test]
async fn a_crashed_sign_in_counts_as_a_failure() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let limiter = limiter(&server, &clock).await;
    let port = free_port();
    let data = reached.clone();
    let running = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .service(login)
            .wrap(limiter.clone())
    })
    .workers(1)
    .bind(("127.0.0.1", port))
    .expect("bind")
    .run();
    let handle = running.handle();
    actix_web::rt::spawn(running);
    let client = awc::Client::default();
    let url = format!("http://127.0.0.1:{port}/login");
    let body = |password: &str| serde_json::json!({ "username": "gina", "password": password });
    let crashed = client.post(&url).send_json(&body("panic")).await;
    assert!(crashed.is_err(), "the crashed handler never answered");
    let mut statuses = Vec::new();
    for _ in 0..10 {
        // The worker that crashed is replaced: retry while it restarts.
        let (status, _) = support::until_ok(Duration::from_secs(10), || async {
            client
                .post(&url)
                .send_json(&body("right"))
                .await
                .map(|r| r.status())
        })
        .await
        .expect("the server answers again");
        statuses.push(status);
        let wrong = client.post(&url).send_json(&body("wrong")).await.unwrap();
        statuses.push(wrong.status());
    }
    handle.stop(false).await;
    // 1 crash + 9 wrong passwords spend the 10; the 10th wrong one is refused, and so is
    // the right password after it (locked out).
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(refused, 2, "{statuses:?}");
    assert_eq!(statuses[19], StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses[18], StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
}

/// Before its App has served, a limiter knows the routes of the App the startup coverage
/// check built with it inside: a route under a scope is reset by its full label, and its
/// attribute's path alone (whose key none of its requests use) is refused with the full
/// label. Another App's limiter in the same process keeps its own routes.
#[actix_web::test]
async fn before_serving_a_scoped_route_is_reset_by_the_label_the_coverage_check_read() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let reached = web::Data::new(Reached::default());
    let scoped = |limiter: RateLimiter| {
        App::new()
            .app_data(reached.clone())
            .service(web::scope("/api").service(login))
            .wrap(limiter)
    };
    let app = test::init_service(scoped(limiter(&server, &clock).await)).await;
    for _ in 0..10 {
        send(&app, attempt("/api/login", "frank", "wrong")).await;
    }
    let locked = send(&app, attempt("/api/login", "frank", "right")).await;
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another instance, starting: its coverage check built its App; it has served nothing.
    let starting = limiter(&server, &clock).await;
    ratelimit_runtime::coverage::require_coverage(scoped(starting.clone()))
        .await
        .expect("every route declared");
    // An App of another shape checked in the same process does not change what it knows.
    let unscoped = limiter(&server, &clock).await;
    ratelimit_runtime::coverage::require_coverage(
        App::new()
            .app_data(reached.clone())
            .service(login)
            .wrap(unscoped.clone()),
    )
    .await
    .expect("every route declared");
    let name = [(IdentityPart::Username, "frank")];
    let refused = starting.reset("POST /login", &name).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "`POST /login` is mounted under a scope: name it as `POST /api/login`"
    );
    assert!(unscoped.reset("POST /login", &name).await.is_ok());
    assert!(unscoped.reset("POST /api/login", &name).await.is_err());
    let state = starting.state("POST /api/login", &name).await.unwrap();
    assert!(
        !state[0].allowed,
        "the name's lockout, under the full label"
    );
    starting
        .reset("POST /api/login", &name)
        .await
        .expect("the scoped route's reset");
    assert!(starting.state("POST /api/login", &name).await.unwrap()[0].allowed);
    // The serving instance asks the store again within a second of its last refusal.
    clock.advance(Duration::from_millis(1_001));
    let after = send(&app, attempt("/api/login", "frank", "right")).await;
    assert_eq!(after.status(), StatusCode::OK, "the lockout is lifted");
}

/// A success on a route that counts failures only gives its unit back in a second store
/// call, within what the check left of the timeout: on a Redis whose replies come 400 ms
/// late, with a 500 ms timeout, a right password is answered 500 ms after it arrived, not
/// after two round trips (800 ms).
#[actix_web::test]
async fn a_success_waits_for_the_store_at_most_the_timeout_in_all() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start_late(server.port(), Duration::from_millis(400)).await;
    let store = RedisStore::builder(proxy.url())
        .timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("store");
    let reached = web::Data::new(Reached::default());
    let app = app(RateLimiter::new(store), &reached).await;
    // The connection's set-up and each script's first call (`NOSCRIPT`, then `EVAL`) take
    // more than one round trip.
    for _ in 0..4 {
        send(&app, attempt("/login", "gina", "right")).await;
    }
    let started = std::time::Instant::now();
    let answered = send(&app, attempt("/login", "gina", "right")).await;
    let took = started.elapsed();
    assert_eq!(answered.status(), StatusCode::OK);
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(650),
        "a success answered after {took:?}"
    );
}
