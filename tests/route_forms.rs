//! `#[rate_limit]` with the route forms actix-web-codegen 4.5 offers (`#[scope]`,
//! `#[route]` with several methods, `name`/`guard`/`wrap`, fallible handlers, extractors,
//! attributes around the handler), through the coverage check and the memory store.

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get,
    guard::GuardContext,
    http::StatusCode,
    middleware::DefaultHeaders,
    post, route, scope,
    test::{self, TestRequest},
    web, App, HttpRequest, HttpResponse, Responder, ResponseError,
};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage::{self, AppFactory},
    rate_limit, registry,
    store::MemoryStore,
    RateLimiter,
};

const T0: u64 = 1_700_000_040_000;

#[scope("/api")]
mod api {
    use super::*;

    #[rate_limit(limit = 2, window = "1m", identity = "ip")]
    #[get("/items/{id}")]
    pub async fn items(id: web::Path<u32>) -> impl Responder {
        HttpResponse::Ok().body(format!("item {id}"))
    }

    /// Doc comment and another attribute inside a scope module.
    #[rate_limit(limit = 2, window = "1m", identity = "ip")]
    #[allow(clippy::unused_async)]
    #[post("/items")]
    pub(crate) async fn create() -> impl Responder {
        HttpResponse::Created()
    }
}

#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[route("/multi", method = "GET", method = "POST")]
async fn multi() -> impl Responder {
    HttpResponse::Ok()
}

fn is_ok_guard(_: &GuardContext<'_>) -> bool {
    true
}

#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[get(
    "/named",
    name = "named_route",
    guard = "is_ok_guard",
    wrap = "DefaultHeaders::new().add((\"x-wrapped\", \"yes\"))"
)]
async fn named() -> impl Responder {
    HttpResponse::Ok()
}

#[derive(Debug)]
struct MyError;

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("my error")
    }
}

impl ResponseError for MyError {
    fn status_code(&self) -> StatusCode {
        StatusCode::BAD_REQUEST
    }
}

#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[get("/fallible/{ok}")]
async fn fallible(ok: web::Path<bool>) -> Result<impl Responder, MyError> {
    if *ok {
        Ok(HttpResponse::Ok())
    } else {
        Err(MyError)
    }
}

#[derive(serde::Deserialize)]
struct Q {
    q: String,
}

struct State(u32);

/// Many extractors.
#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[cfg(not(any()))]
#[allow(clippy::too_many_arguments)]
#[post("/extract/{a}/{b}")]
pub(crate) async fn extract(
    path: web::Path<(u32, String)>,
    query: web::Query<Q>,
    state: web::Data<State>,
    req: HttpRequest,
    _payload: web::Payload,
) -> impl Responder {
    let (a, b) = path.into_inner();
    HttpResponse::Ok().body(format!("{a} {b} {} {} {}", query.q, state.0, req.path()))
}

#[cfg(any())]
#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[get("/cfg-off")]
async fn cfg_off() -> impl Responder {
    HttpResponse::Ok()
}

fn app(limiter: RateLimiter) -> App<impl AppFactory> {
    bare_app().wrap(limiter)
}

fn bare_app() -> App<impl AppFactory> {
    App::new()
        .app_data(web::Data::new(State(7)))
        .service(api::items)
        .service(api::create)
        .service(multi)
        .service(named)
        .service(fallible)
        .service(extract)
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

async fn statuses<S, B>(app: &S, make: impl Fn() -> TestRequest, n: usize) -> Vec<u16>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            test::call_service(app, make().to_request())
                .await
                .status()
                .as_u16(),
        );
    }
    out
}

#[test]
fn declarations_carry_the_scope_prefix_and_every_method() {
    let items = registry::declarations()
        .find(|d| d.function() == "items")
        .expect("items registered");
    assert_eq!(items.path(), "/api/items/{id}");
    assert_eq!(items.methods(), ["GET"]);
    let multi_d = registry::declarations()
        .find(|d| d.function() == "multi")
        .expect("multi registered");
    assert_eq!(multi_d.methods(), ["GET", "POST"]);
    assert!(registry::declarations().all(|d| d.function() != "cfg_off"));
}

#[actix_web::test]
async fn the_coverage_check_sees_every_form() {
    let table = coverage::require_coverage(bare_app())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = table.to_text();
    eprintln!("{text}");
    for w in table.warnings() {
        eprintln!("warning: {w}");
    }
    let rows: Vec<(String, String)> = table
        .routes
        .iter()
        .map(|r| (r.method.clone(), r.pattern.clone()))
        .collect();
    for want in [
        ("GET", "/api/items/{id}"),
        ("POST", "/api/items"),
        ("GET", "/multi"),
        ("POST", "/multi"),
        ("GET", "/named"),
        ("GET", "/fallible/{ok}"),
        ("POST", "/extract/{a}/{b}"),
    ] {
        assert!(
            rows.iter().any(|(m, p)| m == want.0 && p == want.1),
            "{want:?} in {rows:?}"
        );
    }
}

#[actix_web::test]
async fn requests_are_limited_under_the_scoped_pattern() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(app(limiter)).await;
    let got = statuses(&app, || from("203.0.113.1").uri("/api/items/1"), 3).await;
    assert_eq!(got, [200, 200, 429]);
    // Another id shares the pattern's budget.
    let res = test::call_service(&app, from("203.0.113.1").uri("/api/items/2").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        res.headers()
            .get("ratelimit-policy")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("\"items\";q=2;w=60".to_owned())
    );
    let body = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    assert!(body.contains("GET /api/items/{id}"), "{body}");
    let got = statuses(
        &app,
        || {
            from("203.0.113.1")
                .uri("/api/items")
                .method(actix_web::http::Method::POST)
        },
        3,
    )
    .await;
    assert_eq!(got, [201, 201, 429]);
}

#[actix_web::test]
async fn multi_method_named_guarded_wrapped_fallible_and_extracting_routes_are_limited() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(app(limiter)).await;
    use actix_web::http::Method;
    assert_eq!(
        statuses(&app, || from("203.0.113.2").uri("/multi"), 3).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses(
            &app,
            || from("203.0.113.2").uri("/multi").method(Method::POST),
            3
        )
        .await,
        [200, 200, 429],
        "once per method (README)"
    );
    let res = test::call_service(&app, from("203.0.113.3").uri("/named").to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers().get("x-wrapped").unwrap(), "yes");
    assert_eq!(
        statuses(&app, || from("203.0.113.3").uri("/named"), 2).await,
        [200, 429]
    );
    assert_eq!(
        statuses(&app, || from("203.0.113.4").uri("/fallible/false"), 3).await,
        [400, 400, 429]
    );
    assert_eq!(
        statuses(
            &app,
            || from("203.0.113.5")
                .uri("/extract/1/x?q=z")
                .method(Method::POST),
            3
        )
        .await,
        [200, 200, 429]
    );
}

#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[route("/cache", method = "PURGE")]
async fn purge() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[route("/cache2", method = "GET", method = "PURGE")]
async fn purge_or_get() -> impl Responder {
    HttpResponse::Ok()
}

#[actix_web::test]
async fn a_custom_method_route_is_covered_and_limited() {
    let app = App::new().service(purge).service(purge_or_get);
    let table = coverage::require_coverage(app)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", table.to_text());
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(purge)
            .service(purge_or_get)
            .wrap(limiter),
    )
    .await;
    let purge_m = actix_web::http::Method::from_bytes(b"PURGE").unwrap();
    let got = statuses(
        &app,
        || from("203.0.113.9").uri("/cache").method(purge_m.clone()),
        3,
    )
    .await;
    assert_eq!(got, [200, 200, 429]);
    let got = statuses(
        &app,
        || from("203.0.113.9").uri("/cache2").method(purge_m.clone()),
        3,
    )
    .await;
    assert_eq!(got, [200, 200, 429]);
}
