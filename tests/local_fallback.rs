//! `fail = "local"`: while Redis fails, a route is limited in this process at its share of
//! the limit, each switch logged once; when Redis answers again, Redis decides again.

mod support;

use ratelimit_runtime::settings::Failure;
use std::time::Duration;

use actix_web::{
    dev::{Service, ServiceResponse},
    get, post,
    test::{self, TestRequest},
    App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock,
    rate_limit,
    store::{MemoryStore, RedisStore},
    RateLimiter,
};
use support::{CapturedLog, RedisServer, T0};

#[rate_limit(
    limit = 8,
    window = "1m",
    identity = "ip",
    algorithm = "sliding_log",
    fail = "local"
)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 8, window = "1m", identity = "ip", fail = "closed")]
#[post("/transfer")]
async fn transfer() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 8, window = "1m", identity = "ip", fail = "open")]
#[get("/feed")]
async fn feed() -> impl Responder {
    HttpResponse::Ok()
}

async fn status<S, B>(app: &S, req: TestRequest) -> (u16, Option<String>)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let res = test::call_service(app, req.to_request()).await;
    let retry = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (res.status().as_u16(), retry)
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn login_from(ip: &str) -> TestRequest {
    from(ip).method(actix_web::http::Method::POST).uri("/login")
}

/// A limiter over `server` on an injected clock, as one of four instances (a local share
/// is a quarter of the limit).
async fn local_limiter(server: &RedisServer) -> RateLimiter {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("store");
    RateLimiter::new(store)
        .clock(ManualClock::at(T0))
        .failure(Failure::new().instances(4))
}

fn keys(server: &RedisServer) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap()
}

#[actix_web::test]
async fn while_redis_fails_a_local_route_is_limited_in_process_at_its_share() {
    let captured = CapturedLog::start(tracing::Level::INFO);
    let mut server = RedisServer::start();
    let limiter = local_limiter(&server).await;
    let app = test::init_service(
        App::new()
            .service(login)
            .service(transfer)
            .service(feed)
            .wrap(limiter),
    )
    .await;
    // Redis decides while it answers.
    assert_eq!(status(&app, login_from("203.0.113.1")).await.0, 200);
    assert_eq!(keys(&server).len(), 1);

    server.kill();
    // The share of 8 over 4 instances: 2 per client in this process, then 429s that say
    // when to come back (a sliding log: the window from the first local request).
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(status(&app, login_from("203.0.113.2")).await);
    }
    let codes: Vec<u16> = statuses.iter().map(|(code, _)| *code).collect();
    assert_eq!(codes, [200, 200, 429, 429, 429]);
    assert_eq!(statuses[2].1.as_deref(), Some("60"));
    // Another client has a share of its own.
    assert_eq!(status(&app, login_from("203.0.113.3")).await.0, 200);
    // Every fail mode stays per route.
    let to_transfer = from("203.0.113.2")
        .method(actix_web::http::Method::POST)
        .uri("/transfer");
    assert_eq!(status(&app, to_transfer).await.0, 503);
    assert_eq!(status(&app, from("203.0.113.2").uri("/feed")).await.0, 200);

    server.start_again();
    // Redis answers again: it decides again (its keys were lost with it, so the client's
    // budget there is whole: the local refusals are not remembered past the outage), and
    // the switch back is logged once.
    let decided_by_redis = support::until_ok(Duration::from_secs(10), || async {
        let (code, _) = status(&app, login_from("203.0.113.2")).await;
        if code == 200 && !keys(&server).is_empty() {
            Ok(())
        } else {
            Err(format!("{code}, keys {:?}", keys(&server)))
        }
    })
    .await;
    let (_, took) = decided_by_redis.expect("Redis decides again");
    assert!(took < Duration::from_secs(3), "{took:?}");

    // A store that fails again within ten seconds (flapping) switches the route again, but
    // logs the switch at `debug`: no second warning.
    server.kill();
    assert_eq!(status(&app, login_from("203.0.113.4")).await.0, 200);
    let logs = captured.text();
    let to_local = logs
        .lines()
        .filter(|l| l.contains("limiting this route in this process"))
        .collect::<Vec<_>>();
    assert_eq!(to_local.len(), 1, "{logs}");
    assert!(to_local[0].contains("route=POST /login"), "{}", to_local[0]);
    assert!(
        to_local[0].contains("local_limits=2 per 1m (sliding_log)"),
        "{}",
        to_local[0]
    );
    let back = logs
        .lines()
        .filter(|l| l.contains("limited by the store again"))
        .count();
    assert_eq!(back, 1, "{logs}");
}

/// What passes locally is not written to Redis: a client that spent the whole limit in
/// Redis gets its local share again while Redis does not answer, and after that Redis
/// refuses it on its own count. In the window the outage falls in: the limit plus the
/// share (8 + ceil(8 / 4)), as `guide::failure_modes` says.
#[actix_web::test]
async fn a_window_an_outage_falls_in_passes_the_limit_and_the_local_share() {
    let server = RedisServer::start();
    let limiter = local_limiter(&server).await;
    let app = test::init_service(App::new().service(login).wrap(limiter)).await;
    let client = "203.0.113.9";
    for n in 1..=8 {
        assert_eq!(status(&app, login_from(client)).await.0, 200, "request {n}");
    }
    server.pause();
    let mut during = Vec::new();
    for _ in 0..4 {
        during.push(status(&app, login_from(client)).await.0);
    }
    server.resume();
    assert_eq!(during, [200, 200, 429, 429], "while Redis is paused");
    let after = support::until_ok(Duration::from_secs(10), || async {
        match status(&app, login_from(client)).await {
            (429, _) if keys(&server).len() == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(after.is_ok(), "Redis never refused again: {after:?}");
    let count: u64 = redis::cmd("ZCARD")
        .arg(&keys(&server)[0])
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(count, 8, "the local passes were written to Redis");
}

#[actix_web::test]
async fn routes_that_fail_local_without_the_fleet_s_size_are_warned_of_once() {
    let captured = CapturedLog::start(tracing::Level::WARN);
    // Built once per worker, as inside `HttpServer::new`'s closure: one warning all the same.
    for _ in 0..3 {
        let limiter = RateLimiter::new(MemoryStore::new());
        let _app = test::init_service(App::new().service(login).wrap(limiter)).await;
    }
    let text = captured.text();
    let warnings = text
        .matches("routes fail `local` while `RateLimiter::failure(..).instances(..)` is not set")
        .count();
    assert_eq!(warnings, 1, "{text}");
    assert!(text.contains("POST /login"), "{text}");
}
