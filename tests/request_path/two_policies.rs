//! Where a custom guard shares a declared route's path, the default policy applies next to
//! the declaration: both are checked, each in a bucket of its own, within one timeout, with
//! one call to a store that failed, and the declared route's headers on the answer.

use std::time::Duration;

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    get,
    middleware::Next,
    test, App, Error, HttpResponse, Responder,
};
use ratelimit_runtime::{clock::ManualClock, rate_limit, store::MemoryStore, RateLimiter};

use crate::{
    from, header, status_of,
    support::{Down, T0},
};

fn is_json(ctx: &actix_web::guard::GuardContext<'_>) -> bool {
    ctx.head().headers().contains_key("accept")
}

/// The default policy's algorithm and window, behind a custom guard.
#[rate_limit(limit = 10, window = "1m")]
#[get("/feed", guard = "is_json")]
async fn feed() -> impl Responder {
    HttpResponse::Ok().body("feed")
}

/// Takes its time (a session lookup, say).
async fn slow_session(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    next.call(req).await
}

#[rate_limit(limit = 2, window = "1m", identity = "ip", fail = "open")]
#[get(
    "/reports",
    guard = "is_json",
    wrap = "actix_web::middleware::from_fn(slow_session)"
)]
async fn reports() -> impl Responder {
    HttpResponse::Ok().body("reports")
}

#[actix_web::test]
async fn a_request_two_policies_apply_to_asks_a_failed_store_once() {
    // A custom guard shares `/feed`'s path, so the default policy and the declaration both
    // apply (README, Limitations): with the store down, the second check must not wait for
    // it again (each call may take up to the timeout).
    let store = Down::default();
    let limiter = RateLimiter::new(store.clone()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(feed).wrap(limiter)).await;
    let req = from("203.0.113.7")
        .uri("/feed")
        .insert_header(("accept", "application/json"));
    // Both fail open (a GET, and the declaration's default): the handler answers.
    assert_eq!(status_of(&app, req).await, 200);
    assert_eq!(store.calls(), 1);
}

/// A store that answers after a delay (a degraded Redis), counting the answers it completes.
#[derive(Clone)]
struct Slow(
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    Duration,
    std::sync::Arc<MemoryStore>,
);

impl Slow {
    fn new(delay: Duration) -> Self {
        Slow(
            Default::default(),
            delay,
            std::sync::Arc::new(MemoryStore::new()),
        )
    }
}

impl ratelimit_runtime::store::Store for Slow {
    fn check<'a>(
        &'a self,
        request: ratelimit_runtime::store::CheckRequest<'a>,
    ) -> ratelimit_runtime::store::CheckFuture<'a> {
        let (answered, delay, memory) = (self.0.clone(), self.1, self.2.clone());
        let limits = request.limits.to_vec();
        let key = request.key.clone();
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let request = ratelimit_runtime::store::CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(T0),
            };
            memory.check(request).await
        })
    }

    fn kind(&self) -> &'static str {
        "slow"
    }
}

#[actix_web::test]
async fn a_request_two_policies_apply_to_waits_the_timeout_once_in_all() {
    // Each check alone fits in the 50 ms timeout; the two checks of one request (the
    // default policy and `/feed`'s declaration) must too, together: the second gets what
    // the first left, and is given up.
    let store = Slow::new(Duration::from_millis(40));
    let limiter = RateLimiter::new(store.clone())
        // A store of its own without a timeout of its own: the default 50 ms bounds it.
        .clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(feed).wrap(limiter)).await;
    let req = from("203.0.113.7")
        .uri("/feed")
        .insert_header(("accept", "application/json"));
    // Fail open (a GET): the handler answers either way.
    assert_eq!(status_of(&app, req).await, 200);
    assert!(store.0.load(std::sync::atomic::Ordering::SeqCst) <= 1);
}

#[actix_web::test]
async fn time_spent_in_middleware_between_two_checks_is_not_store_time() {
    // `/reports`: the default policy and its declaration both apply (a custom guard), and
    // its own middleware takes 80 ms between the two checks. The store answers in 2 ms;
    // the declared 2 per minute must apply, not be given up for want of time.
    let limiter = RateLimiter::new(Slow::new(Duration::from_millis(2)))
        // A store of its own without a timeout of its own: the default 50 ms bounds it.
        .clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(reports).wrap(limiter)).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let req = from("203.0.113.7")
            .uri("/reports")
            .insert_header(("accept", "application/json"));
        statuses.push(status_of(&app, req).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[actix_web::test]
async fn where_two_policies_apply_the_routes_own_headers_stand() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(feed).wrap(limiter)).await;
    let get_feed = || {
        from("203.0.113.7")
            .uri("/feed")
            .insert_header(("accept", "application/json"))
    };
    // The default policy (120 per minute) applies to `/feed` as well as its declared 10:
    // the answer carries the declared limit's figures, not the default's laid over them.
    let res = test::call_service(&app, get_feed().to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "x-ratelimit-limit"), "10");
    assert_eq!(header(&res, "x-ratelimit-remaining"), "9");
    assert!(header(&res, "ratelimit-policy").starts_with("\"feed\""));
    for _ in 0..9 {
        test::call_service(&app, get_feed().to_request()).await;
    }
    let res = test::call_service(&app, get_feed().to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "x-ratelimit-limit"), "10");
    assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
}

#[actix_web::test]
async fn a_custom_guard_does_not_make_the_default_policy_count_in_the_declared_budget() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(feed).wrap(limiter)).await;
    let mut allowed = 0;
    for _ in 0..20 {
        let req = from("203.0.113.7")
            .uri("/feed")
            .insert_header(("accept", "application/json"));
        if status_of(&app, req).await == 200 {
            allowed += 1;
        }
    }
    // Both policies apply (the path alone cannot tell which resource serves it), each in a
    // bucket of its own: the declared 10 binds, not 5.
    assert_eq!(allowed, 10);
}
