//! A handler's `Budget` on every request a `RateLimiter` passes, including those no limit
//! counts: an allow-listed client, a route an override exempts, a route declared exempt. It
//! does nothing there and says why; only an App without a `RateLimiter` fails to give one.

use std::{path::Path, time::Duration};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get,
    middleware::from_fn,
    post,
    test::{self, TestRequest},
    web, App, HttpMessage as _, HttpResponse,
};
use ratelimit_runtime::{
    identity::UserId, overrides::Overrides, rate_limit, store::MemoryStore, Budget, RateLimiter,
    Unlimited,
};

/// What a handler's `Budget` says and does: why it is unlimited, its figures, and whether a
/// reset and a give-back of one unit succeeded (with the units given back).
async fn described(budget: &Budget) -> String {
    // Marks change nothing on a request no limit counts.
    budget.mark_failure();
    let figures = format!(
        "{:?} {} {:?} {:?}",
        budget.unlimited(),
        budget.decision().is_some(),
        budget.limit(),
        budget.remaining(),
    );
    let reset = budget.reset().await.is_ok();
    let given = budget.give_back(1).await.ok();
    format!("{figures} reset {reset} gave {given:?}")
}

/// What `described` answers on a request no limit counts, for `why`.
fn unlimited(why: Unlimited) -> String {
    format!("Some({why:?}) false None None reset true gave Some(0)")
}

#[rate_limit(limit = 100, window = "1m", identity = "ip", fail = "closed")]
#[get("/search")]
async fn search(budget: Budget) -> HttpResponse {
    HttpResponse::Ok().body(described(&budget).await)
}

#[rate_limit(limit = 100, window = "1m", identity = "user_id", fail = "closed")]
#[get("/reports")]
async fn reports(budget: Budget) -> HttpResponse {
    HttpResponse::Ok().body(described(&budget).await)
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health(budget: Budget) -> HttpResponse {
    HttpResponse::Ok().body(described(&budget).await)
}

#[derive(serde::Deserialize)]
struct Code {
    code: String,
}

/// `Budget`'s documented pattern: a right code clears the user's failed attempts.
#[rate_limit(limit = 5, window = "10m", identity = "user_id", fail = "closed")]
#[post("/verify")]
async fn verify(body: web::Json<Code>, budget: Budget) -> HttpResponse {
    if body.code == "123456" {
        budget.reset().await.expect("reset");
        HttpResponse::Ok().finish()
    } else {
        HttpResponse::Forbidden().body(format!("{:?} attempts left", budget.remaining()))
    }
}

/// Stand-in auth: `x-user` is the user id.
async fn auth(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let user = req
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(user) = user {
        req.extensions_mut().insert(UserId(user));
    }
    next.call(req).await
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
            .service(search)
            .service(reports)
            .service(health)
            .service(verify)
            .wrap(limiter)
            .wrap(from_fn(auth)),
    )
    .await
}

fn from(req: TestRequest, ip: &str) -> TestRequest {
    req.peer_addr(format!("{ip}:4000").parse().unwrap())
        .insert_header(("x-user", "u-1"))
}

/// The status and body of `req`.
async fn answer<S, B>(app: &S, req: TestRequest) -> (u16, String)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let res = test::call_service(app, req.to_request()).await;
    let status = res.status().as_u16();
    let body = test::read_body(res).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn overrides(path: &Path, text: &str) -> Overrides {
    std::fs::write(path, text).unwrap();
    Overrides::new()
        .file(path)
        .refresh(Duration::from_millis(50))
}

#[actix_web::test]
async fn an_allow_listed_client_gets_a_budget_that_does_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    let overrides = overrides(&path, "[allow]\nips = [\"10.0.0.0/8\"]\n");
    let app = app(RateLimiter::new(MemoryStore::new()).overrides(overrides)).await;

    let allowed = answer(&app, from(TestRequest::get().uri("/search"), "10.1.2.3")).await;
    assert_eq!(allowed, (200, unlimited(Unlimited::AllowList)));
    // The documented pattern answers as its handler says, never 500.
    for (code, status) in [("000000", 403), ("123456", 200), ("000000", 403)] {
        let req = TestRequest::post()
            .uri("/verify")
            .set_json(serde_json::json!({ "code": code }));
        let (seen, body) = answer(&app, from(req, "10.1.2.3")).await;
        assert_eq!(seen, status, "{code}: {body}");
        if status == 403 {
            assert_eq!(body, "None attempts left");
        }
    }

    // A client off the list is limited, and its budget says so.
    let (status, body) = answer(
        &app,
        from(TestRequest::get().uri("/search"), "198.51.100.7"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        body.starts_with("None true Some(100) Some(99) reset true"),
        "{body}"
    );
    let req = TestRequest::post()
        .uri("/verify")
        .set_json(serde_json::json!({ "code": "000000" }));
    let limited = answer(&app, from(req, "198.51.100.7")).await;
    assert_eq!(limited, (403, "Some(4) attempts left".to_owned()));
}

#[actix_web::test]
async fn a_route_an_override_exempts_gives_a_budget_that_does_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    let overrides = overrides(
        &path,
        "[routes]\n\"GET /reports\" = 'exempt = \"incident 42\"'\n",
    );
    let app = app(RateLimiter::new(MemoryStore::new()).overrides(overrides.clone())).await;
    let exempt = answer(
        &app,
        from(TestRequest::get().uri("/reports"), "198.51.100.7"),
    )
    .await;
    assert_eq!(exempt, (200, unlimited(Unlimited::Exempt)));
    assert!(overrides.refused().is_empty(), "{:?}", overrides.refused());
}

#[actix_web::test]
async fn a_route_declared_exempt_gives_a_budget_that_does_nothing() {
    let app = app(RateLimiter::new(MemoryStore::new())).await;
    for _ in 0..3 {
        let exempt = answer(
            &app,
            from(TestRequest::get().uri("/health"), "198.51.100.7"),
        )
        .await;
        assert_eq!(exempt, (200, unlimited(Unlimited::Exempt)));
    }
}

async fn shadowing(budget: Budget) -> HttpResponse {
    HttpResponse::Ok().body(described(&budget).await)
}

#[actix_web::test]
async fn without_a_limit_checked_before_the_handler_extraction_fails_saying_why() {
    // No `RateLimiter` at all: a misconfiguration, named.
    let bare = test::init_service(App::new().service(health)).await;
    let (status, body) = answer(
        &bare,
        from(TestRequest::get().uri("/health"), "198.51.100.7"),
    )
    .await;
    assert_eq!(status, 500);
    assert!(
        body.contains("no `RateLimiter` saw") && body.contains("RateLimiter::new(store)"),
        "{body}"
    );
    // A resource registered ahead of a declared route on its path serves the request: the
    // limiter counts it after the handler only.
    let shadowed = test::init_service(
        App::new()
            .route("/search", web::get().to(shadowing))
            .service(search)
            .wrap(RateLimiter::new(MemoryStore::new())),
    )
    .await;
    let (status, body) = answer(
        &shadowed,
        from(TestRequest::get().uri("/search"), "198.51.100.7"),
    )
    .await;
    assert_eq!(status, 500);
    assert!(
        body.contains("another resource on a declared route's path"),
        "{body}"
    );
}
