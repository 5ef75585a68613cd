//! Before routing, the App-level `RateLimiter` has to predict which route a request will
//! reach: a declared one (its guard counts it, else the limiter counts it after the fact)
//! or none (the default policy, up front). These are the cases where the prediction and the
//! router part ways: limiters nested on a scope, exempt routes another service answers for,
//! virtual hosts. Whatever the router does, a request counts once, in the right bucket.

mod support;

use ratelimit_runtime::settings::Undeclared;
use std::sync::Arc;

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get, guard,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage, rate_limit,
    store::{MemoryStore, Store},
    Algorithm, Limit, RateLimiter, Window,
};
use support::{auth, Hung, T0};

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

/// The status of the answer, whether it came back as a response or as an error.
async fn status_of<S, B>(app: &S, req: TestRequest) -> u16
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    match app.call(req.to_request()).await {
        Ok(res) => res.status().as_u16(),
        Err(err) => err.error_response().status().as_u16(),
    }
}

async fn statuses_of<S, B>(app: &S, times: usize, req: impl Fn() -> TestRequest) -> Vec<u16>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut statuses = Vec::with_capacity(times);
    for _ in 0..times {
        statuses.push(status_of(app, req()).await);
    }
    statuses
}

/// A limiter over `store` whose default policy is 3 per minute.
fn limiter(store: impl Store) -> RateLimiter {
    RateLimiter::new(store)
        .clock(ManualClock::at(T0))
        .undeclared(Undeclared::new().limits(vec![Limit::new(
            3,
            Window::from_secs(60),
            Algorithm::SlidingWindow,
        )]))
}

async fn undeclared() -> HttpResponse {
    HttpResponse::Ok().finish()
}

async fn refuse() -> HttpResponse {
    HttpResponse::Unauthorized().body("wrong password")
}

#[rate_limit(limit = 3, window = "1m", identity = "ip")]
#[get("/panel")]
async fn panel() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 5, window = "1m", identity = "ip")]
#[get("/dashboard")]
async fn dashboard() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "internal probe")]
#[get("/probe")]
async fn probe() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "admin host status page")]
#[get("/status")]
async fn admin_status() -> impl Responder {
    HttpResponse::Ok()
}

/// The App's limiter and a second one on the `/admin` scope (the same configuration), the
/// scope's auth inside its limiter.
macro_rules! nested_app {
    ($limiter:expr, $auth:path) => {{
        let limiter = $limiter;
        test::init_service(
            App::new()
                .service(
                    web::scope("/admin")
                        .wrap(actix_web::middleware::from_fn($auth))
                        .wrap(limiter.clone())
                        .service(panel)
                        .route("/legacy", web::get().to(undeclared)),
                )
                .wrap(limiter),
        )
        .await
    }};
}

/// Lets every request through.
async fn anyone(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    next.call(req).await
}

#[actix_web::test]
async fn nested_limiters_count_a_request_once() {
    // Undeclared: the default policy's 3 per minute, not 3 shared by two counters.
    let app = nested_app!(limiter(MemoryStore::new()), anyone);
    let legacy = || from("203.0.113.7").uri("/admin/legacy");
    assert_eq!(statuses_of(&app, 4, legacy).await, [200, 200, 200, 429]);
    // Refused in front of a declared route (3 per minute), as an answer or as an error.
    let wrong = || from("203.0.113.7").uri("/admin/panel");
    let app = nested_app!(limiter(MemoryStore::new()), auth::answers_401);
    assert_eq!(statuses_of(&app, 4, wrong).await, [401, 401, 401, 429]);
    let app = nested_app!(limiter(MemoryStore::new()), auth::errs_401);
    assert_eq!(statuses_of(&app, 4, wrong).await, [401, 401, 401, 429]);
}

#[actix_web::test]
async fn nested_limiters_wait_for_a_hung_store_once() {
    let store = Hung::default();
    let limiter = limiter(store.clone());
    let app = nested_app!(limiter, anyone);
    let status = status_of(&app, from("203.0.113.7").uri("/admin/legacy")).await;
    assert_eq!(status, 200, "a GET fails open");
    assert_eq!(store.calls(), 1, "one store call");
}

#[actix_web::test]
async fn refusals_of_a_resource_shadowing_an_exempt_route_are_limited() {
    // The App passes the coverage check, yet the first resource on `/probe` is not the
    // exempt one: what it answers counts under the default policy.
    let app = || {
        App::new()
            .route("/probe", web::get().to(refuse))
            .service(probe)
    };
    assert!(coverage::require_coverage(app()).await.is_ok());
    let app = test::init_service(app().wrap(limiter(MemoryStore::new()))).await;
    let to_probe = || from("203.0.113.7").uri("/probe");
    assert_eq!(statuses_of(&app, 4, to_probe).await, [401, 401, 401, 429]);
}

/// Virtual hosts: routes in a scope guarded by `Host`. Elsewhere their paths fall through to
/// the default service.
fn hosts_app(
    limiter: RateLimiter,
    fallback: fn() -> HttpResponse,
) -> App<impl coverage::AppFactory> {
    App::new()
        .service(
            web::scope("")
                .guard(guard::Host("admin.example"))
                .service(admin_status),
        )
        .service(panel)
        .default_service(web::to(move || async move { fallback() }))
        .wrap(limiter)
}

#[actix_web::test]
async fn an_exempt_routes_path_on_another_host_gets_the_default_policy() {
    let not_found = || HttpResponse::NotFound().finish();
    let app = test::init_service(hosts_app(limiter(MemoryStore::new()), not_found)).await;
    let on = |host: &'static str, path: &'static str| {
        move || from("203.0.113.8").uri(path).insert_header(("host", host))
    };
    assert_eq!(
        statuses_of(&app, 4, on("www.example", "/status")).await,
        [404, 404, 404, 429]
    );
    // The admin host's exempt route stays exempt.
    let admin = statuses_of(&app, 10, on("admin.example", "/status")).await;
    assert_eq!(admin, [200; 10]);
}

#[actix_web::test]
async fn a_request_for_another_host_leaves_a_declared_routes_limit_alone() {
    // The admin host's routes under `/admin`; on the public host a catch-all default
    // service (an SPA's index.html) answers that path with a success. Whether such a request
    // came first or not, the admin route is limited alike: a `Host` guard decides between
    // resources on that path, so the default policy (3 per minute) applies there as well as
    // the declared 5, in counters of its own (README, Limitations).
    for public_first in [false, true] {
        let app = test::init_service(
            App::new()
                .service(
                    web::scope("/admin")
                        .guard(guard::Host("admin.example"))
                        .service(dashboard),
                )
                .default_service(web::to(|| async { HttpResponse::Ok().body("index.html") }))
                .wrap(limiter(MemoryStore::new())),
        )
        .await;
        if public_first {
            let public = from("198.51.100.1")
                .uri("/admin/dashboard")
                .insert_header(("host", "www.example"));
            assert_eq!(status_of(&app, public).await, 200);
        }
        let admin = || {
            from("203.0.113.7")
                .uri("/admin/dashboard")
                .insert_header(("host", "admin.example"))
        };
        assert_eq!(
            statuses_of(&app, 6, admin).await,
            [200, 200, 200, 429, 429, 429],
            "public request first: {public_first}"
        );
    }
}

#[actix_web::test]
async fn a_percent_encoded_path_counts_against_the_route_it_reaches() {
    // The router decodes the path (`/admin/p%61nel` reaches `/admin/panel`); the limiter's
    // prediction must too, or the scope's refusals escape the declared 3 per minute.
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/admin")
                    .wrap(actix_web::middleware::from_fn(auth::errs_401))
                    .service(panel),
            )
            // The default policy, 120 per minute.
            .wrap(RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0))),
    )
    .await;
    let encoded = || from("203.0.113.7").uri("/admin/p%61nel");
    assert_eq!(
        statuses_of(&app, 5, encoded).await,
        [401, 401, 401, 429, 429]
    );
}

fn is_v2(ctx: &guard::GuardContext<'_>) -> bool {
    ctx.head()
        .headers()
        .get("x-api-version")
        .is_some_and(|v| v == "2")
}

#[rate_limit(limit = 1, window = "1m", identity = "ip")]
#[get("/items", guard = "is_v2")]
async fn items_v2() -> impl Responder {
    HttpResponse::Ok().body("v2")
}

#[rate_limit(limit = 3, window = "1m", identity = "ip")]
#[get("/items")]
async fn items_v1() -> impl Responder {
    HttpResponse::Ok().body("v1")
}

#[actix_web::test]
async fn two_declared_routes_on_one_path_count_apart() {
    // A custom guard tells the two apart; their method, pattern and client are the same,
    // so without more their counters and flood-shield entries would be too.
    let store = Arc::new(MemoryStore::new());
    let limiter = RateLimiter::from_arc(store.clone()).clock(ManualClock::at(T0));
    let app =
        test::init_service(App::new().service(items_v2).service(items_v1).wrap(limiter)).await;
    let v2 = || {
        from("203.0.113.7")
            .uri("/items")
            .insert_header(("x-api-version", "2"))
    };
    assert_eq!(statuses_of(&app, 2, v2).await, [200, 429]);
    let v1 = || from("203.0.113.7").uri("/items");
    assert_eq!(statuses_of(&app, 4, v1).await, [200, 200, 200, 429]);
    let keys: Vec<String> = store.entries().into_iter().map(|(key, _)| key).collect();
    for handler in ["items_v1", "items_v2"] {
        let segment = format!("GET:/items|fn.{handler}|ip:");
        assert!(keys.iter().any(|key| key.contains(&segment)), "{keys:?}");
    }
}

#[rate_limit(limit = 1, window = "1m", identity = "ip")]
#[get("/things")]
async fn scoped_things_v2() -> impl Responder {
    HttpResponse::Ok().body("v2")
}

#[rate_limit(limit = 3, window = "1m", identity = "ip")]
#[get("/api/things")]
async fn root_things_v1() -> impl Responder {
    HttpResponse::Ok().body("v1")
}

#[actix_web::test]
async fn two_declared_routes_on_one_full_path_count_apart() {
    // Written differently (`/things` in a guarded `/api` scope, `/api/things` at the root),
    // mounted at the same full pattern.
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/api")
                    .guard(guard::Header("x-api-version", "2"))
                    .service(scoped_things_v2),
            )
            .service(root_things_v1)
            .wrap(limiter),
    )
    .await;
    let v2 = || {
        from("203.0.113.7")
            .uri("/api/things")
            .insert_header(("x-api-version", "2"))
    };
    assert_eq!(statuses_of(&app, 2, v2).await, [200, 429]);
    let v1 = || from("203.0.113.7").uri("/api/things");
    assert_eq!(statuses_of(&app, 4, v1).await, [200, 200, 200, 429]);
}

#[actix_web::test]
async fn two_declared_routes_on_one_path_count_apart_under_a_scopes_limiter() {
    // The App's limiter counts the ambiguous path under the default policy first; the
    // scope's limiter, which the route guards belong to, must still tell the two apart.
    let store = Arc::new(MemoryStore::new());
    let limiter = RateLimiter::from_arc(store.clone()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/v")
                    .wrap(limiter.clone())
                    .service(items_v2)
                    .service(items_v1),
            )
            .wrap(limiter),
    )
    .await;
    let v2 = || {
        from("203.0.113.7")
            .uri("/v/items")
            .insert_header(("x-api-version", "2"))
    };
    assert_eq!(statuses_of(&app, 2, v2).await, [200, 429]);
    let v1 = || from("203.0.113.7").uri("/v/items");
    assert_eq!(statuses_of(&app, 4, v1).await, [200, 200, 200, 429]);
}

/// README (Limitations): middleware that rewrites the path must run before the limiter, which
/// predicts the route from the path the router will see. `NormalizePath` wrapped outside the
/// limiter: `/probe/` reaches the exempt route and is never limited; wrapped inside it, the
/// limiter predicts an unmatched path and applies the default policy.
#[actix_web::test]
async fn normalize_path_outside_the_limiter_keeps_a_trailing_slash_on_its_route() {
    use actix_web::middleware::{NormalizePath, TrailingSlash};

    let outside = test::init_service(
        App::new()
            .service(probe)
            .wrap(limiter(MemoryStore::new()))
            .wrap(NormalizePath::new(TrailingSlash::Trim)),
    )
    .await;
    let probe_slash = || from("203.0.113.7").uri("/probe/");
    assert_eq!(statuses_of(&outside, 6, probe_slash).await, [200; 6]);
    let inside = test::init_service(
        App::new()
            .service(probe)
            .wrap(NormalizePath::new(TrailingSlash::Trim))
            .wrap(limiter(MemoryStore::new())),
    )
    .await;
    let statuses = statuses_of(&inside, 6, probe_slash).await;
    assert!(statuses.contains(&429), "{statuses:?}");
}

#[rate_limit(limit = 7, window = "1m", identity = "ip")]
#[get("/budgeted")]
async fn budgeted(budget: ratelimit_runtime::Budget) -> impl Responder {
    HttpResponse::Ok().body(format!("{:?} {:?}", budget.limit(), budget.remaining()))
}

async fn default_budget(budget: Option<ratelimit_runtime::Budget>) -> HttpResponse {
    let figures = budget.map(|budget| (budget.limit(), budget.remaining()));
    HttpResponse::Ok().body(format!("{figures:?}"))
}

#[actix_web::test]
async fn under_nested_limiters_a_handler_gets_the_budget_of_the_check_that_counted_it() {
    let limiter = limiter(MemoryStore::new());
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/admin")
                    .wrap(limiter.clone())
                    .service(budgeted)
                    .route("/plain", web::get().to(default_budget)),
            )
            .route("/outside", web::get().to(default_budget))
            .wrap(limiter),
    )
    .await;
    let body = |uri: &'static str| {
        let app = &app;
        async move {
            let res = test::call_service(app, from("203.0.113.7").uri(uri).to_request()).await;
            assert_eq!(res.status(), 200, "{uri}");
            String::from_utf8(test::read_body(res).await.to_vec()).unwrap()
        }
    };
    // The declared route's own check (7 per minute), not the default policy's.
    assert_eq!(body("/admin/budgeted").await, "Some(7) Some(6)");
    assert_eq!(body("/admin/budgeted").await, "Some(7) Some(5)");
    // Undeclared, in the scope and outside it: the default policy (3 per minute, per
    // route) counted by the App's limiter; the scope's counts nothing more.
    assert_eq!(body("/admin/plain").await, "Some((Some(3), Some(2)))");
    assert_eq!(body("/admin/plain").await, "Some((Some(3), Some(1)))");
    assert_eq!(body("/outside").await, "Some((Some(3), Some(2)))");
}

#[rate_limit(limit = 2000, window = "1m", identity = "ip")]
#[get("/orders/{id}")]
async fn order() -> impl Responder {
    HttpResponse::Ok()
}

#[actix_web::test]
async fn every_path_of_a_pattern_counts_in_its_budget_past_the_remembered_paths() {
    let app = test::init_service(
        App::new()
            .service(order)
            .route("/{tail:.*}", web::get().to(undeclared))
            .wrap(limiter(MemoryStore::new())),
    )
    .await;
    // More distinct paths than the limiter remembers patterns for (1,024), one long one
    // past the length it remembers, and the first paths again.
    let long = format!("/orders/{}", "9".repeat(300));
    let paths = (0..1100)
        .map(|id| format!("/orders/{id}"))
        .chain([long])
        .chain((0..3).map(|id| format!("/orders/{id}")));
    let mut left = 2000;
    for path in paths {
        let res = test::call_service(&app, from("203.0.113.7").uri(&path).to_request()).await;
        assert_eq!(res.status(), 200, "{path}");
        left -= 1;
        let remaining = res.headers().get("x-ratelimit-remaining").unwrap();
        assert_eq!(remaining.to_str().unwrap(), left.to_string(), "{path}");
    }
    // An undeclared path still gets the default policy (3 per minute), however many
    // declared paths came before.
    let other = || from("203.0.113.7").uri("/elsewhere");
    assert_eq!(statuses_of(&app, 4, other).await, [200, 200, 200, 429]);
}
