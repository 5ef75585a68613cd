//! A cost per request (`Limit::costing`, `#[rate_limit(cost = N)]`), on every store:
//! `RedisStore` on a harness-started server and on Valkey, `RedisClusterStore` on a
//! harness-started 3-master cluster, and `MemoryStore`. Each algorithm counts a request of
//! cost `c` as `c` units, exactly, under concurrency too; a refused request spends nothing;
//! a give-back with the check's receipt returns the whole cost. Time is injected.

mod support;

use actix_web::{
    post,
    test::{self, TestRequest},
    App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage,
    key::RouteKey,
    rate_limit,
    store::{AdjustRequest, Adjustment, CheckRequest, MemoryStore},
    Algorithm, Budget, IdentityPart, Limit, RateLimiter, Window,
};
use support::{limit_states, limiter_on, Backend, RedisServer, T0, W};

on_every_store!(
    each_algorithm_counts_a_request_as_its_cost,
    a_thousand_concurrent_requests_of_cost_7_under_700_pass_exactly_100,
    a_stack_refused_by_a_costly_limit_charges_no_other,
    a_give_back_with_the_receipt_returns_the_whole_cost,
    a_charge_after_the_fact_is_never_refused_and_goes_one_budget_below_at_most,
);

fn client(route: &str, ip: &str) -> RouteKey {
    RouteKey::new("rl", "GET", route, &[(IdentityPart::Ip, ip)])
}

fn limit(max: u32, algorithm: Algorithm) -> Limit {
    Limit::new(max, Window::from_millis(W), algorithm)
}

/// `limit = 10, cost = 3` at one instant: three requests pass (7, 4, 1 units left), the
/// fourth does not fit and is told when it will, exactly per algorithm; a request of cost 1
/// still takes the last unit of the same budget.
async fn each_algorithm_counts_a_request_as_its_cost(backend: &Backend) {
    let now = T0 + 1_000;
    // The refused fourth request's wait (ms):
    // - fixed window: the window's end, 59 s away;
    // - sliding window: next window, then the 9 units must weigh at most 10 - 3, so
    //   9 * (W - e) <= 7 * W from e = 13,334 ms: 59,000 + 13,334;
    // - sliding log: 2 of the 9 entries must leave; the oldest three were logged now;
    // - GCRA: 10 per minute is 6 s per unit; the backlog of 54 s plus 18 s is 12 s past the
    //   minute of tolerance.
    for (algorithm, refused_wait) in [
        (Algorithm::FixedWindow, 59_000),
        (Algorithm::SlidingWindow, 72_334),
        (Algorithm::SlidingLog, W),
        (Algorithm::Gcra, 12_000),
    ] {
        let weighed = [limit(10, algorithm).costing(3)];
        let key = client("/export", &format!("203.0.113.{}", algorithm.index()));
        for left in [7, 4, 1] {
            let state = limit_states(&backend.check(&key, &weighed, now).await)[0];
            assert_eq!((state.0, state.1), (true, left), "{algorithm}");
        }
        let refused = limit_states(&backend.check(&key, &weighed, now).await)[0];
        assert_eq!(
            (refused.0, refused.1, refused.2),
            (false, 0, refused_wait),
            "{algorithm}"
        );
        assert_eq!(
            backend.counted(&key, &weighed[0], now).await,
            9,
            "{algorithm}"
        );
        // The key is the limit's (algorithm and window), not its cost: a request of cost 1
        // spends the last unit of the same budget.
        let single = [limit(10, algorithm)];
        let last = limit_states(&backend.check(&key, &single, now).await)[0];
        assert_eq!((last.0, last.1), (true, 0), "{algorithm}");
        assert_eq!(
            backend.counted(&key, &single[0], now).await,
            10,
            "{algorithm}"
        );
    }
}

/// The bound: 1,000 requests of cost 7 at once under a limit of 700: exactly 100
/// pass, and exactly 700 units are counted.
async fn a_thousand_concurrent_requests_of_cost_7_under_700_pass_exactly_100(backend: &Backend) {
    let now = T0 + 30_000;
    for algorithm in Algorithm::ALL {
        let limits = [limit(700, algorithm).costing(7)];
        let key = client(
            "/reports/export",
            &format!("198.51.100.{}", algorithm.index()),
        );
        let store = backend.store();
        let tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let (store, key) = (store.clone(), key.clone());
                tokio::spawn(async move {
                    let request = CheckRequest {
                        key: &key,
                        limits: &limits,
                        now_millis: Some(now),
                    };
                    store.check(request).await.expect("store answers").allowed
                })
            })
            .collect();
        let mut allowed = 0;
        for task in tasks {
            allowed += usize::from(task.await.expect("task"));
        }
        assert_eq!(allowed, 100, "{algorithm}");
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            700,
            "{algorithm}"
        );
    }
}

/// A stack is all-or-nothing with costs too: the request the costly limit refuses is not
/// counted by the other.
async fn a_stack_refused_by_a_costly_limit_charges_no_other(backend: &Backend) {
    let now = T0 + 5_000;
    let limits = [
        limit(10, Algorithm::FixedWindow).costing(4),
        limit(100, Algorithm::Gcra),
    ];
    let key = client("/stacked", "192.0.2.1");
    for _ in 0..2 {
        assert!(backend.check(&key, &limits, now).await.allowed);
    }
    let refused = backend.check(&key, &limits, now).await;
    assert!(!refused.allowed);
    let states = limit_states(&refused);
    assert_eq!((states[0].0, states[0].1), (false, 0));
    assert!(states[1].0, "the GCRA limit had room");
    assert_eq!(backend.counted(&key, &limits[0], now).await, 8);
    assert_eq!(backend.counted(&key, &limits[1], now).await, 2);
}

/// A give-back with a check's receipt (a success on a `count = "failures"` route, a check a
/// Cluster split undoes) returns what that check counted: its cost, in every algorithm.
/// Without a receipt, units are units.
async fn a_give_back_with_the_receipt_returns_the_whole_cost(backend: &Backend) {
    let now = T0 + 7_000;
    let store = backend.store();
    for algorithm in Algorithm::ALL {
        let limits = [limit(10, algorithm).costing(4)];
        let key = client("/give-back", &format!("192.0.2.{}", 10 + algorithm.index()));
        let first = backend.check(&key, &limits, now).await;
        let second = backend.check(&key, &limits, now).await;
        assert!(first.allowed && second.allowed, "{algorithm}");
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            8,
            "{algorithm}"
        );
        let receipt = second
            .receipt
            .as_ref()
            .expect("an allowed check has a receipt");
        let change = Adjustment::GiveBack {
            units: 1,
            receipt: Some(receipt),
        };
        let given = store
            .adjust(AdjustRequest::new(&key, &limits, Some(now), change))
            .await
            .expect("store answers");
        assert_eq!(given, 4, "{algorithm}");
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            4,
            "{algorithm}"
        );
        let change = Adjustment::GiveBack {
            units: 1,
            receipt: None,
        };
        let given = store
            .adjust(AdjustRequest::new(&key, &limits, Some(now), change))
            .await
            .expect("store answers");
        assert_eq!(given, 1, "{algorithm}");
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            3,
            "{algorithm}"
        );
    }
}

/// `Budget::charge`'s store call: units counted now, never refused, up to twice the limit
/// (one whole budget of debt), after which a check is refused, in every algorithm.
async fn a_charge_after_the_fact_is_never_refused_and_goes_one_budget_below_at_most(
    backend: &Backend,
) {
    let now = T0 + 9_000;
    let store = backend.store();
    for algorithm in Algorithm::ALL {
        let limits = [limit(10, algorithm)];
        let key = client("/rows", &format!("192.0.2.{}", 40 + algorithm.index()));
        assert!(
            backend.check(&key, &limits, now).await.allowed,
            "{algorithm}"
        );
        let charge = |units| {
            let change = Adjustment::Charge { units };
            store.adjust(AdjustRequest::new(&key, &limits, Some(now), change))
        };
        assert_eq!(charge(14).await.expect("store answers"), 14, "{algorithm}");
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            15,
            "{algorithm}"
        );
        assert_eq!(charge(10).await.expect("store answers"), 5, "{algorithm}");
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            20,
            "{algorithm}"
        );
        assert!(
            !backend.check(&key, &limits, now).await.allowed,
            "{algorithm}"
        );
    }
}

#[rate_limit(
    limit = 30,
    window = "1m",
    identity = "ip",
    algorithm = "fixed_window",
    cost = 10
)]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 10,
    window = "1m",
    identity = "ip",
    count = "failures",
    cost = 5
)]
#[post("/sign-in")]
async fn sign_in(password: String) -> HttpResponse {
    if password == "right" {
        HttpResponse::Ok().finish()
    } else {
        HttpResponse::Unauthorized().finish()
    }
}

fn app(limiter: RateLimiter) -> App<impl coverage::AppFactory> {
    App::new().service(export).service(sign_in).wrap(limiter)
}

fn from(ip: &str) -> TestRequest {
    TestRequest::post().peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn header(
    res: &actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
    name: &str,
) -> String {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// `cost = 10` under `limit = 30`: three exports, their headers counting units, then a 429;
/// a `count = "failures"` route gives a success's whole cost back. The same over Redis and
/// the memory store.
async fn a_costly_route_answers_in_units(limiter: RateLimiter) {
    let app = test::init_service(app(limiter)).await;
    for left in [20, 10, 0] {
        let res = test::call_service(
            &app,
            from("203.0.113.9").uri("/reports/export").to_request(),
        )
        .await;
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "x-ratelimit-limit"), "30");
        assert_eq!(header(&res, "x-ratelimit-remaining"), left.to_string());
        assert_eq!(header(&res, "ratelimit-policy"), "\"export\";q=30;w=60");
    }
    let res = test::call_service(
        &app,
        from("203.0.113.9").uri("/reports/export").to_request(),
    )
    .await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "x-ratelimit-remaining"), "0");

    // Failures only, 5 units each out of 10: successes give their 5 back, so any number
    // pass, and their headers say the budget is whole; two failures spend the budget.
    for _ in 0..4 {
        let req = from("203.0.113.9")
            .uri("/sign-in")
            .set_payload("right")
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "x-ratelimit-remaining"), "10");
    }
    for left in [5, 0] {
        let req = from("203.0.113.9")
            .uri("/sign-in")
            .set_payload("wrong")
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(res.status(), 401);
        assert_eq!(header(&res, "x-ratelimit-remaining"), left.to_string());
    }
    let req = from("203.0.113.9")
        .uri("/sign-in")
        .set_payload("right")
        .to_request();
    assert_eq!(test::call_service(&app, req).await.status(), 429);
}

#[actix_web::test]
async fn a_costly_route_answers_in_units_over_redis() {
    let server = RedisServer::start();
    a_costly_route_answers_in_units(limiter_on(&server, T0 + 1_000).await).await;
}

#[actix_web::test]
async fn a_costly_route_answers_in_units_in_memory() {
    let clock = ManualClock::at(T0 + 1_000);
    a_costly_route_answers_in_units(RateLimiter::new(MemoryStore::new()).clock(clock)).await;
}

#[actix_web::test]
async fn the_route_table_shows_each_limits_cost() {
    let table = coverage::route_table(app(RateLimiter::new(MemoryStore::new()))).await;
    let text = table.to_string();
    assert!(text.contains("30/1m fixed_window cost 10"), "{text}");
    assert!(
        text.contains("10/1m sliding_window failures cost 5"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&table.to_json()).unwrap();
    let costs: Vec<u64> = json["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|route| route["limits"][0]["cost"].as_u64())
        .collect();
    assert_eq!(costs.len(), 2, "{json}");
    assert!(costs.contains(&10) && costs.contains(&5), "{json}");
}

#[rate_limit(
    limit = 30,
    window = "1m",
    identity = "ip",
    algorithm = "fixed_window",
    cost = 10
)]
#[rate_limit(concurrency = 2, identity = "ip")]
#[post("/reports/heavy")]
async fn heavy() -> impl Responder {
    HttpResponse::Ok()
}

/// Beside 2 places at once, 20 then 10 units left at 10 a request are 2 then 1 requests:
/// the headers report the costly limit (2 requests against 2 places: the one back last),
/// not the concurrency limit whose 2 are fewer units.
#[actix_web::test]
async fn the_headers_report_the_fewest_requests_left_counting_each_limits_cost() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0 + 1_000));
    let app = test::init_service(App::new().service(heavy).wrap(limiter)).await;
    for left in [20, 10, 0] {
        let res =
            test::call_service(&app, from("203.0.113.7").uri("/reports/heavy").to_request()).await;
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "x-ratelimit-remaining"), left.to_string());
        let ratelimit = header(&res, "ratelimit");
        assert!(
            ratelimit.starts_with(&format!("\"heavy.0\";r={left};")),
            "{ratelimit}"
        );
    }
}

#[rate_limit(limit = 100, window = "1h", identity = "ip", algorithm = "gcra")]
#[post("/batch")]
async fn batch() -> impl Responder {
    HttpResponse::Ok()
}

/// `?items=N` weighs N units; no query, one.
fn items(req: &actix_web::dev::ServiceRequest) -> u32 {
    req.query_string()
        .strip_prefix("items=")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// `?rows=N` returns N rows; the check counts one, the handler charges the rest.
#[rate_limit(
    limit = 100,
    window = "1m",
    identity = "ip",
    algorithm = "fixed_window"
)]
#[post("/rows")]
async fn rows(req: actix_web::HttpRequest, budget: Budget) -> HttpResponse {
    let rows: u32 = req
        .query_string()
        .strip_prefix("rows=")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let charged = budget.charge(rows - 1).await.expect("store answers");
    HttpResponse::Ok().body(charged.to_string())
}

#[actix_web::test]
async fn a_handler_charges_what_the_request_turned_out_to_cost() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server, T0 + 1_000).await;
    let app = test::init_service(App::new().service(rows).wrap(limiter)).await;
    let send = |uri: &'static str| {
        let req = from("198.51.100.30").uri(uri).to_request();
        test::call_service(&app, req)
    };
    let res = send("/rows?rows=60").await;
    assert_eq!(res.status(), 200);
    assert_eq!(test::read_body(res).await, "59");
    let res = send("/rows?rows=40").await;
    assert_eq!(res.status(), 200);
    // 100 of 100 spent: the next is refused until the window ends.
    let res = send("/rows?rows=1").await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "retry-after"), "59");
    // A charge past the budget still counts, up to one whole budget of debt.
    let other = |uri: &'static str| {
        let req = from("198.51.100.31").uri(uri).to_request();
        test::call_service(&app, req)
    };
    let res = other("/rows?rows=500").await;
    assert_eq!(
        test::read_body(res).await,
        "199",
        "the count stops at twice the limit"
    );
    assert_eq!(other("/rows?rows=1").await.status(), 429);
}

fn weighed_app(limiter: RateLimiter) -> App<impl coverage::AppFactory> {
    App::new().service(batch).service(sign_in).wrap(
        limiter
            .cost_of("POST /batch", items)
            .cost_of("POST /sign-in", items),
    )
}

/// A cost read off each request: 60 then 30 units of 100; a request of 20 is refused, and
/// one of 10 that fits right after it passes (refusals of a weighed route are not
/// remembered); 0 counts 1; one larger than the limit counts the whole budget.
async fn each_request_weighs_what_its_function_says(limiter: RateLimiter) {
    let app = test::init_service(weighed_app(limiter)).await;
    let send = |uri: &'static str| {
        let req = from("198.51.100.20").uri(uri).to_request();
        test::call_service(&app, req)
    };
    let res = send("/batch?items=60").await;
    assert_eq!(
        (res.status().as_u16(), header(&res, "x-ratelimit-remaining")),
        (200, "40".into())
    );
    let res = send("/batch?items=30").await;
    assert_eq!(header(&res, "x-ratelimit-remaining"), "10");
    assert_eq!(send("/batch?items=20").await.status(), 429);
    let res = send("/batch?items=10").await;
    assert_eq!(
        (res.status().as_u16(), header(&res, "x-ratelimit-remaining")),
        (200, "0".into())
    );

    let other = |uri: &'static str| {
        let req = from("198.51.100.21").uri(uri).to_request();
        test::call_service(&app, req)
    };
    let res = other("/batch?items=0").await;
    assert_eq!(header(&res, "x-ratelimit-remaining"), "99");
    assert_eq!(
        other("/batch?items=5000").await.status(),
        429,
        "99 units are not the whole budget"
    );
    let third = |uri: &'static str| {
        let req = from("198.51.100.22").uri(uri).to_request();
        test::call_service(&app, req)
    };
    let res = third("/batch?items=5000").await;
    assert_eq!(
        (res.status().as_u16(), header(&res, "x-ratelimit-remaining")),
        (200, "0".into())
    );
    assert_eq!(third("/batch").await.status(), 429);

    // Failures only, 10 units of 10: a success gives its weighed cost back.
    for _ in 0..3 {
        let req = from("198.51.100.20")
            .uri("/sign-in?items=10")
            .set_payload("right");
        assert_eq!(
            test::call_service(&app, req.to_request()).await.status(),
            200
        );
    }
    let req = from("198.51.100.20")
        .uri("/sign-in?items=10")
        .set_payload("wrong");
    assert_eq!(
        test::call_service(&app, req.to_request()).await.status(),
        401
    );
    let req = from("198.51.100.20")
        .uri("/sign-in?items=1")
        .set_payload("right");
    assert_eq!(
        test::call_service(&app, req.to_request()).await.status(),
        429
    );
}

#[actix_web::test]
async fn each_request_weighs_what_its_function_says_over_redis() {
    let server = RedisServer::start();
    each_request_weighs_what_its_function_says(limiter_on(&server, T0 + 1_000).await).await;
}

#[actix_web::test]
async fn each_request_weighs_what_its_function_says_in_memory() {
    let clock = ManualClock::at(T0 + 1_000);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock);
    each_request_weighs_what_its_function_says(limiter).await;
}

#[actix_web::test]
async fn a_cost_function_for_an_undeclared_route_fails_the_coverage_check() {
    let limiter = RateLimiter::new(MemoryStore::new()).cost_of("POST /bach", items);
    let app = App::new().service(batch).wrap(limiter);
    let error = coverage::require_coverage(app).await.expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains(
            "`RateLimiter::cost_of(\"POST /bach\", ..)`: the App declares no route `POST /bach`"
        ),
        "{text}"
    );
    assert!(text.contains("did you mean `POST /batch`?"), "{text}");
}

/// Priced per item by the declaration itself.
#[rate_limit(limit = 50, window = "1h", identity = "ip", cost_from = "items")]
#[post("/items")]
async fn priced_items() -> impl Responder {
    HttpResponse::Ok()
}

#[actix_web::test]
async fn a_declared_cost_function_weighs_each_request_and_cost_of_wins_over_it() {
    let clock = ManualClock::at(T0 + 1_000);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock);
    let app = test::init_service(App::new().service(priced_items).wrap(limiter)).await;
    let req = from("198.51.100.40").uri("/items?items=45").to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(header(&res, "x-ratelimit-remaining"), "5");
    let req = from("198.51.100.40").uri("/items?items=6").to_request();
    assert_eq!(test::call_service(&app, req).await.status(), 429);

    let limiter = RateLimiter::new(MemoryStore::new()).cost_of("POST /items", |_| 10);
    let app = test::init_service(App::new().service(priced_items).wrap(limiter)).await;
    let req = from("198.51.100.40").uri("/items?items=45").to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(header(&res, "x-ratelimit-remaining"), "40");

    let table = coverage::route_table(App::new().service(priced_items)).await;
    assert!(
        table
            .to_string()
            .contains("50/1h sliding_window cost from items"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&table.to_json()).unwrap();
    assert_eq!(json["routes"][0]["cost_from"], "items", "{json}");
}
