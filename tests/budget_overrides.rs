//! Shared budgets under overrides: `[budgets]` in the file and `budget NAME` in the hash change
//! a budget on every route naming it (at each route's cost); a route's override changes its
//! own limits and keeps its shared budgets unless it names budgets itself; a budget name no
//! `budget!` declares is refused with a suggestion; one client's budget is read and reset
//! by name. On Redis, a real 3-master Cluster and the memory store.

mod support;

use std::{sync::Arc, time::Duration};

use actix_web::{
    get, post,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    budget, coverage,
    overrides::{Overrides, Source},
    rate_limit,
    settings::Undeclared,
    store::{MemoryStore, RedisStore, Store},
    IdentityPart, RateLimiter,
};
use support::{replace_file, until, Backend, RedisServer};

budget!(
    QUOTA = limit = 1000,
    window = "1h",
    identity = "header:X-Api-Key"
);

#[rate_limit(budget = QUOTA)]
#[rate_limit(limit = 100, window = "1m", identity = "header:X-Api-Key")]
#[get("/items")]
async fn items() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(budget = QUOTA, cost = 3)]
#[post("/bulk")]
async fn bulk() -> impl Responder {
    HttpResponse::Ok()
}

const KEY: [(IdentityPart, &str); 1] = [(IdentityPart::Header("X-Api-Key"), "k-1")];

fn request(request: TestRequest, key: &str) -> actix_http::Request {
    request
        .insert_header(("X-Api-Key", key))
        .peer_addr("203.0.113.9:4000".parse().unwrap())
        .to_request()
}

/// The file's budget override holds on both routes; a route override keeps the budget; the
/// budget is read and reset by name; `state` by route reads the budget in its own key.
async fn a_budget_override_holds_on_every_route_naming_it(store: Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(
        &path,
        "[budgets]\nQUOTA = 'limit = 7, window = \"2h\"'\n[routes]\n\"GET /items\" = 'limit = 50, window = \"1m\"'\n",
    );
    let overrides = Overrides::new()
        .file(&path)
        .refresh(Duration::from_millis(50));
    let limiter = RateLimiter::from_arc(store).overrides(overrides.clone());
    assert!(overrides.refused().is_empty(), "{:?}", overrides.refused());
    let in_force = overrides.budget_in_force("QUOTA").expect("overridden");
    assert_eq!(
        (in_force.max(), in_force.window().as_millis()),
        (7, 7_200_000)
    );
    assert_eq!(overrides.budget_in_force("OTHER"), None);
    let app = test::init_service(
        App::new()
            .service(items)
            .service(bulk)
            .wrap(limiter.clone()),
    )
    .await;
    let get = |key: &'static str| {
        test::call_service(&app, request(TestRequest::get().uri("/items"), key))
    };
    let post = |key: &'static str| {
        test::call_service(&app, request(TestRequest::post().uri("/bulk"), key))
    };

    // 1 + 3 + 3 = 7 units of the overridden 7: the next unit of either route is refused.
    let res = get("k-1").await;
    assert_eq!(res.status(), 200);
    let policy = res
        .headers()
        .get("ratelimit-policy")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("\"QUOTA\";q=7;w=7200"), "{policy}");
    assert!(
        policy.contains("q=50;w=60"),
        "the route's override: {policy}"
    );
    assert_eq!(post("k-1").await.status(), 200);
    assert_eq!(post("k-1").await.status(), 200);
    let refused = get("k-1").await;
    assert_eq!(
        refused.status(),
        429,
        "the route's override kept the budget"
    );
    assert_eq!(post("k-1").await.status(), 429);
    // Another key has its own budget.
    assert_eq!(get("k-2").await.status(), 200);

    // Read by name, and by route (the budget in its own key, beside the route's limit).
    let state = limiter.budget_state(&QUOTA, &KEY).await.unwrap();
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].limit.max(), 7);
    assert!(!state[0].allowed, "{state:?}");
    let by_route = limiter.state("GET /items", &KEY).await.unwrap();
    let shared = by_route
        .iter()
        .find(|s| s.limit.budget() == Some("QUOTA"))
        .unwrap();
    assert!(!shared.allowed, "the budget read in its key: {by_route:?}");
    let own = by_route
        .iter()
        .find(|s| s.limit.budget().is_none())
        .unwrap();
    assert!(
        own.allowed && own.remaining == 48,
        "one request of 50 counted: {own:?}"
    );
    // A reset by route leaves the budget alone; by name, it clears it on every route.
    limiter.reset("GET /items", &KEY).await.unwrap();
    assert_eq!(get("k-1").await.status(), 429);
    limiter.reset_budget(&QUOTA, &KEY).await.unwrap();
    assert_eq!(post("k-1").await.status(), 200);
    let state = limiter.budget_state(&QUOTA, &KEY).await.unwrap();
    assert_eq!(
        state[0].remaining, 3,
        "3 of 7 spent: 3 left after the next unit"
    );
    let wrong = limiter
        .budget_state(&QUOTA, &[(IdentityPart::Ip, "203.0.113.9")])
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("header:x-api-key"), "{wrong}");

    // A route override naming the budget with a cost of its own; then the declared budget.
    replace_file(
        &path,
        "[routes]\n\"POST /bulk\" = 'budget = QUOTA, cost = 400'\n",
    );
    until(&overrides, "the route's budget cost", |o| {
        o.budget_in_force("QUOTA").is_none() && !o.in_force().is_empty()
    })
    .await;
    let (selector, bulk_override) = &overrides.in_force()[0];
    assert_eq!(selector.route, "POST /bulk");
    assert_eq!(bulk_override.source, Source::File);
    let limits = bulk_override.policy.limited().unwrap().limits();
    assert_eq!(
        (limits.len(), limits[0].max(), limits[0].cost()),
        (1, 1000, 400)
    );
    for status in [200, 200, 429] {
        assert_eq!(post("k-3").await.status(), status, "400 units of 1000 each");
    }
    assert_eq!(get("k-3").await.status(), 200, "200 left for /items");
}

#[actix_web::test]
async fn a_budget_override_holds_on_every_route_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::builder(redis.url()).build().await.unwrap();
    a_budget_override_holds_on_every_route_naming_it(Arc::new(store)).await;
}

/// The route's own key and the budget's live in different slots of a real 3-master Cluster.
#[actix_web::test]
async fn a_budget_override_holds_on_every_route_on_a_cluster() {
    let backend = Backend::cluster().await;
    a_budget_override_holds_on_every_route_naming_it(backend.store()).await;
    backend.finish().await;
}

#[actix_web::test]
async fn a_budget_override_holds_on_every_route_in_memory() {
    a_budget_override_holds_on_every_route_naming_it(Arc::new(MemoryStore::new())).await;
}

/// The limiter's default policy for undeclared routes may stack a shared budget: its
/// override holds there too.
#[actix_web::test]
async fn a_budget_override_holds_under_the_default_policy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(&path, "[budgets]\nQUOTA = 'limit = 2, window = \"2h\"'\n");
    let limiter = RateLimiter::new(MemoryStore::new())
        .undeclared(Undeclared::new().limits(vec![QUOTA.limit()]))
        .overrides(Overrides::new().file(&path));
    let app = test::init_service(
        App::new()
            .route("/free", web::get().to(HttpResponse::Ok))
            .wrap(limiter),
    )
    .await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let res = test::call_service(&app, request(TestRequest::get().uri("/free"), "k-9")).await;
        seen.push(res.status().as_u16());
    }
    assert_eq!(
        seen,
        [200, 200, 429],
        "the override's 2, not the declared 1000"
    );
}

/// The route table shows a route whose only change is its shared budget's override under
/// that override, with its source.
#[actix_web::test]
async fn the_route_table_shows_a_budget_override_on_the_routes_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(&path, "[budgets]\nQUOTA = 'limit = 7, window = \"2h\"'\n");
    let overrides = Overrides::new().file(&path);
    let _limiter = RateLimiter::new(MemoryStore::new()).overrides(overrides.clone());
    let table = coverage::route_table(App::new().service(items).service(bulk))
        .await
        .with_overrides(&overrides);
    let bulk_row = table
        .routes
        .iter()
        .find(|r| r.label() == "POST /bulk")
        .unwrap();
    assert_eq!(bulk_row.source(), Some(Source::File));
    let policy = bulk_row.policy().unwrap();
    let limits = policy.limited().unwrap().limits();
    assert_eq!((limits[0].max(), limits[0].cost()), (7, 3), "{limits:?}");
    let text = table.to_string();
    assert!(text.contains("budget QUOTA"), "{text}");
}

#[actix_web::test]
async fn a_budget_no_program_declares_is_refused_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    let refused = |text: &str| {
        replace_file(&path, text);
        let overrides = Overrides::new().file(&path);
        let _limiter = RateLimiter::new(MemoryStore::new()).overrides(overrides.clone());
        let problems: Vec<String> = overrides
            .refused()
            .into_iter()
            .flat_map(|(_, p)| p)
            .collect();
        problems.join("\n")
    };
    let problems = refused("[budgets]\nQOUTA = 'limit = 5, window = \"1h\"'\n");
    assert!(problems.contains("did you mean `QUOTA`?"), "{problems}");
    let problems = refused("[budgets]\nQUOTA = 'limit = 5, window = \"1h\", cost = 2'\n");
    assert!(
        problems.contains("`cost` is no key of a shared budget"),
        "{problems}"
    );
    let problems =
        refused("[budgets]\nQUOTA = 'limit = 5, window = \"1h\"; limit = 9, window = \"1d\"'\n");
    assert!(problems.contains("one limit"), "{problems}");
    let problems = refused("[routes]\n\"POST /bulk\" = 'budget = QUOT'\n");
    assert!(problems.contains("did you mean `QUOTA`?"), "{problems}");
    let problems =
        refused("[routes]\n\"POST /bulk\" = 'budget = QUOTA, shadow = true, fail = \"closed\"'\n");
    assert!(problems.contains("shadow"), "{problems}");
    let problems = refused("[budget]\n");
    assert!(problems.contains("did you mean `budgets`?"), "{problems}");
}
