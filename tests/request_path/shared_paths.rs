//! Resources that share a declared route's path: behind a custom guard, registered before it
//! (shadowing it), differing only in a parameter's regex, or in the method. Each request
//! counts under the policy of the resource that serves it.

use actix_web::{get, guard::GuardContext, post, test, web, App, HttpResponse, Responder};
use ratelimit_runtime::{
    clock::ManualClock, coverage::AppFactory, rate_limit, store::MemoryStore, RateLimiter,
};

use crate::{
    from, status_of,
    support::{Hung, T0},
};

fn is_v2(ctx: &GuardContext<'_>) -> bool {
    ctx.head().headers().contains_key("x-v2")
}

#[rate_limit(limit = 1, window = "1m", identity = "ip")]
#[get("/items", guard = "is_v2")]
async fn items_v2() -> impl Responder {
    HttpResponse::Ok().body("v2")
}

#[rate_limit(limit = 1, window = "1m", identity = "ip")]
#[get("/shadowed")]
async fn shadowed() -> impl Responder {
    HttpResponse::Ok().body("declared")
}

async fn v1() -> HttpResponse {
    HttpResponse::Ok().body("v1")
}

#[actix_web::test]
async fn a_resource_sharing_a_declared_path_through_a_custom_guard_gets_the_default_policy() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(
        App::new()
            .service(items_v2)
            .route("/items", web::get().to(v1))
            .wrap(limiter),
    )
    .await;
    let mut allowed = 0;
    for _ in 0..130 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/items").to_request()).await;
        if res.status() == 200 {
            assert_eq!(test::read_body(res).await, "v1");
            allowed += 1;
        }
    }
    assert_eq!(
        allowed, 120,
        "the undeclared resource is held to the default policy"
    );
}

#[actix_web::test]
async fn a_resource_shadowing_a_declared_route_is_limited_after_its_first_request() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(
        App::new()
            .route("/shadowed", web::get().to(v1))
            .service(shadowed)
            .wrap(limiter),
    )
    .await;
    let mut allowed = 0;
    for _ in 0..130 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/shadowed").to_request()).await;
        if res.status() == 200 {
            assert_eq!(
                test::read_body(res).await,
                "v1",
                "actix serves the first resource"
            );
            allowed += 1;
        }
    }
    assert!(
        (120..=121).contains(&allowed),
        "allowed {allowed}: at most one request slips through"
    );
}

async fn refuse() -> HttpResponse {
    HttpResponse::Unauthorized().body("not here")
}

#[actix_web::test]
async fn a_resource_shadowing_a_declared_route_with_refusals_is_limited_by_it() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .route("/shadowed", web::get().to(refuse))
            .service(shadowed)
            .wrap(limiter),
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(status_of(&app, from("203.0.113.7").uri("/shadowed")).await);
    }
    assert_eq!(statuses, [401, 429, 429], "the declared 1 per minute holds");
}

#[rate_limit(limit = 1, window = "1m", identity = "ip", algorithm = "gcra")]
#[get("/posts/{id:\\d+}")]
async fn by_number() -> impl Responder {
    "by number"
}

#[rate_limit(limit = 100, window = "1m", identity = "ip")]
#[get("/posts/{id}")]
async fn by_slug() -> impl Responder {
    "by slug"
}

#[actix_web::test]
async fn routes_that_differ_only_in_a_parameters_regex_count_apart() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app =
        test::init_service(App::new().service(by_number).service(by_slug).wrap(limiter)).await;
    let get = |path: &str| from("203.0.113.7").uri(path);
    assert_eq!(status_of(&app, get("/posts/1")).await, 200);
    assert_eq!(status_of(&app, get("/posts/1")).await, 429);
    // Neither the counter nor the flood shield's memory of that 429 is the other route's.
    let res = test::call_service(&app, get("/posts/hello").to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(test::read_body(res).await, "by slug");
}

#[rate_limit(exempt = "the empty form")]
#[get("/items/new")]
async fn new_item_form() -> impl Responder {
    "form"
}

#[rate_limit(limit = 200, window = "1m", identity = "ip", fail = "open")]
#[post("/items/{id}")]
async fn update_item() -> impl Responder {
    "updated"
}

fn items_app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .service(new_item_form)
        .service(update_item)
        .wrap(limiter)
}

/// `POST /items/new` first matches `GET /items/new`'s path; the router passes over that
/// resource (wrong method) to `POST /items/{id}`, whose declaration alone must apply.
#[actix_web::test]
async fn a_declared_route_reached_past_another_methods_resource_keeps_its_own_policy() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let limiter = RateLimiter::from_arc(store.clone()).clock(ManualClock::at(T0));
    ratelimit_runtime::coverage::require_coverage(items_app(limiter.clone()))
        .await
        .unwrap();
    let app = test::init_service(items_app(limiter)).await;
    let post_new = || {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/items/new")
    };
    let mut allowed = 0;
    for _ in 0..150 {
        if status_of(&app, post_new()).await == 200 {
            allowed += 1;
        }
    }
    let keys: Vec<String> = store.entries().into_iter().map(|(key, _)| key).collect();
    assert_eq!(
        allowed, 150,
        "200 per minute declared, not the default 120: {keys:?}"
    );
    assert!(
        keys.iter().all(|key| key.contains("POST:/items/:id|")),
        "{keys:?}"
    );

    // During an outage the route's own failure policy applies (open), not the default
    // policy's for POST (closed), and one store call waits, not two.
    let limiter = RateLimiter::new(Hung::default());
    let app = test::init_service(items_app(limiter)).await;
    assert_eq!(status_of(&app, post_new()).await, 200);
}
