//! Budgets shared by routes (`budget!`, `#[rate_limit(budget = NAME)]`): one key per client
//! across every route that names the budget, stacked all-or-nothing with each route's own
//! limits, on Redis, Valkey, a real 3-master Cluster (where a route's key and the budget's
//! live in different slots) and the memory store. Time is injected.

mod support;

use actix_web::{
    get, post,
    test::{self, TestRequest},
    App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    budget, clock::ManualClock, coverage, key::RouteKey, rate_limit, store::MemoryStore, Algorithm,
    IdentityPart, Limit, RateLimiter, Window,
};
use support::{limit_states, limiter_on, Backend, RedisServer, T0, W};

budget!(
    API = limit = 5,
    window = "1m",
    identity = "header:X-Api-Key"
);

#[rate_limit(budget = API)]
#[get("/api/orders")]
async fn orders() -> impl Responder {
    HttpResponse::Ok()
}

/// Its own limit of 2 beside the shared 5, and a weight of 2 units of the shared budget.
#[rate_limit(budget = API, cost = 2)]
#[rate_limit(
    limit = 2,
    window = "1m",
    identity = "header:X-Api-Key",
    algorithm = "gcra"
)]
#[post("/api/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn app(limiter: RateLimiter) -> App<impl coverage::AppFactory> {
    App::new().service(orders).service(export).wrap(limiter)
}

fn with_key(request: TestRequest, key: &str) -> actix_http::Request {
    request
        .insert_header(("X-Api-Key", key))
        .peer_addr("203.0.113.5:4000".parse().unwrap())
        .to_request()
}

/// Two routes spend one budget per API key; a route's own limit refusing charges the
/// budget nothing, and the budget refusing charges the route's own limit nothing.
async fn two_routes_spend_one_budget(limiter: RateLimiter) {
    let app = test::init_service(app(limiter)).await;
    let get = |key: &'static str| {
        test::call_service(&app, with_key(TestRequest::get().uri("/api/orders"), key))
    };
    let post = |key: &'static str| {
        test::call_service(&app, with_key(TestRequest::post().uri("/api/export"), key))
    };

    // 2 units on /api/orders, 2 on /api/export: 1 left of 5.
    for _ in 0..2 {
        assert_eq!(get("alpha").await.status(), 200);
    }
    let res = post("alpha").await;
    assert_eq!(res.status(), 200);
    let policy = res
        .headers()
        .get("ratelimit-policy")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("\"API\";q=5;w=60"), "{policy}");
    // The export weighs 2, 1 is left: refused by the budget; its own GCRA limit (2) is not
    // charged, so one export fits again once the budget has room.
    assert_eq!(post("alpha").await.status(), 429);
    assert_eq!(get("alpha").await.status(), 200, "the last unit");
    assert_eq!(get("alpha").await.status(), 429, "spent on both routes");
    // Another key has its own budget.
    assert_eq!(get("beta").await.status(), 200);
    // The export's own limit of 2 refuses the third export while the budget has room, and
    // the budget is not charged for it.
    assert_eq!(post("gamma").await.status(), 200);
    assert_eq!(post("gamma").await.status(), 200);
    assert_eq!(post("gamma").await.status(), 429, "its own limit");
    assert_eq!(
        get("gamma").await.status(),
        200,
        "4 of 5 units spent, not 5"
    );
    assert_eq!(get("gamma").await.status(), 429);
}

#[actix_web::test]
async fn two_routes_spend_one_budget_over_redis() {
    let server = RedisServer::start();
    two_routes_spend_one_budget(limiter_on(&server, T0 + 1_000).await).await;
}

#[actix_web::test]
async fn two_routes_spend_one_budget_in_memory() {
    let clock = ManualClock::at(T0 + 1_000);
    two_routes_spend_one_budget(RateLimiter::new(MemoryStore::new()).clock(clock)).await;
}

#[actix_web::test]
async fn the_route_table_shows_which_routes_share_a_budget() {
    let table = coverage::route_table(app(RateLimiter::new(MemoryStore::new()))).await;
    let text = table.to_string();
    assert_eq!(
        text.matches("budget API 5/1m sliding_window").count(),
        2,
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&table.to_json()).unwrap();
    let sharing = json["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|route| {
            route["limits"]
                .as_array()
                .unwrap()
                .iter()
                .any(|limit| limit["budget"] == "API")
        })
        .count();
    assert_eq!(sharing, 2, "{json}");
}

on_every_store!(a_route_limit_and_a_shared_budget_in_other_slots_are_all_or_nothing);

/// The store's view: one key per route for the route's own limit, one for the budget
/// (another hash tag, so another Cluster slot). Whichever refuses, the other counts nothing.
async fn a_route_limit_and_a_shared_budget_in_other_slots_are_all_or_nothing(backend: &Backend) {
    let now = T0 + 3_000;
    let budget = API.limit();
    let own = Limit::new(2, Window::from_millis(W), Algorithm::FixedWindow);
    let client = [(IdentityPart::Ip, "198.51.100.7")];
    let key = |route: &str| {
        RouteKey::new("rl", "GET", route, &client)
            .with_budget("API", RouteKey::for_budget("rl", "API", &client))
    };
    let (a, b) = (key("/a"), key("/b"));
    let limits = [own, budget];
    assert!(backend.check(&a, &limits, now).await.allowed);
    assert!(backend.check(&a, &limits, now).await.allowed);
    // The route's own limit refuses: the budget is not charged.
    let refused = backend.check(&a, &limits, now).await;
    assert!(!refused.allowed);
    assert!(!limit_states(&refused)[0].0);
    assert_eq!(backend.counted(&a, &budget, now).await, 2);
    // Another route spends the same budget: 3 more units, then the budget refuses, and the
    // route's own limit is not charged for that.
    assert!(backend.check(&b, &limits, now).await.allowed);
    assert!(backend.check(&b, &limits, now).await.allowed);
    assert_eq!(backend.counted(&b, &budget, now).await, 4);
    let single = [budget];
    assert!(
        backend.check(&b, &single, now).await.allowed,
        "the fifth unit"
    );
    let refused = backend.check(&b, &limits, now).await;
    assert!(!refused.allowed);
    assert!(!limit_states(&refused)[1].0, "refused by the budget");
    assert_eq!(
        backend.counted(&b, &own, now).await,
        2,
        "own limit not charged"
    );
    assert_eq!(backend.counted(&a, &budget, now).await, 5);
}
