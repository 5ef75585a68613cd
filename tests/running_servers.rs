//! The limiter under a real `HttpServer`: several workers on sockets, its Redis
//! connections over the server's life, and what its log lines say.

mod support;

use ratelimit_runtime::settings::Undeclared;
use std::time::{Duration, Instant};

use actix_web::{get, guard, test, App, HttpResponse, HttpServer, Responder};
use ratelimit_runtime::{
    clock::ManualClock,
    policy::{Algorithm, Limit, Window},
    rate_limit,
    store::{MemoryStore, RedisStore},
    RateLimiter,
};
use support::{CapturedLog, RedisServer, T0};

#[rate_limit(limit = 20, window = "1m", identity = "ip", fail = "closed")]
#[get("/shared")]
async fn shared() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 1000, window = "1m", identity = "ip", fail = "open")]
#[get("/boom")]
async fn boom() -> HttpResponse {
    panic!("handler panic (test)");
}

async fn wait_for_clients(server: &RedisServer, want: impl Fn(usize) -> bool, what: &str) {
    let started = Instant::now();
    loop {
        let clients = server.client_commands();
        if want(clients.len()) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: Redis has {} connections: {clients:?}",
            clients.len()
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `requests` GETs of `path`, eight at a time, each on a new TCP connection (so actix hands
/// them to its workers in turn): the statuses.
async fn hammer(port: u16, path: &str, requests: usize) -> Vec<u16> {
    let mut tasks = Vec::new();
    for lane in 0..8 {
        let url = format!("http://127.0.0.1:{port}{path}");
        tasks.push(actix_web::rt::spawn(async move {
            let mut statuses = Vec::new();
            for _ in (lane..requests).step_by(8) {
                let client = awc::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .finish();
                let status = match client
                    .get(&url)
                    .insert_header(("connection", "close"))
                    .send()
                    .await
                {
                    Ok(response) => response.status().as_u16(),
                    Err(_) => 0,
                };
                statuses.push(status);
            }
            statuses
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// Four workers on a socket, Redis store: exactly the limit across workers, N + 1
/// connections (README), none opened per request, none left once the server has stopped.
#[actix_web::test]
async fn four_workers_on_redis_share_one_budget_and_hold_n_plus_one_connections() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = HttpServer::new(move || {
        App::new()
            .service(shared)
            .service(boom)
            .wrap(limiter.clone())
    })
    .workers(4)
    .listen(listener)
    .unwrap()
    .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    wait_for_clients(&server, |n| n == 5, "4 workers + the store's own").await;

    let statuses = hammer(port, "/shared", 60).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (20, 40),
        "{statuses:?}"
    );
    assert_eq!(
        server.client_commands().len(),
        5,
        "no connection per request"
    );

    // A handler that panics: the connection drops, the worker stays, no connection leaks.
    let panicked = hammer(port, "/boom", 8).await;
    assert!(panicked.iter().all(|s| *s != 200), "{panicked:?}");
    let after = hammer(port, "/shared", 8).await;
    assert_eq!(count(&after, 429), 8, "{after:?}");
    assert_eq!(
        server.client_commands().len(),
        5,
        "{:?}",
        server.client_commands()
    );

    handle.stop(true).await;
    wait_for_clients(&server, |n| n == 0, "after a graceful stop").await;
}

/// The same on the in-memory store: one budget for every worker.
#[actix_web::test]
async fn four_workers_on_the_memory_store_share_one_budget() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = HttpServer::new(move || App::new().service(shared).wrap(limiter.clone()))
        .workers(4)
        .listen(listener)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    let statuses = hammer(port, "/shared", 60).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (20, 40),
        "{statuses:?}"
    );
    handle.stop(true).await;
}

/// actix-web builds one App per worker and listening socket (IPv4 and IPv6, plain and TLS,
/// or `bind("localhost:8080")` where localhost resolves to both), so a server on L sockets
/// holds N × L + 1 connections (not N + 1), as the README says.
#[actix_web::test]
async fn two_listeners_hold_n_times_l_plus_one_connections() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0));
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http = HttpServer::new(move || App::new().service(shared).wrap(limiter.clone()))
        .workers(2)
        .listen(a)
        .unwrap()
        .listen(b)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    wait_for_clients(
        &server,
        |n| n == 5,
        "2 workers × 2 sockets + the store's own",
    )
    .await;
    handle.stop(true).await;
    wait_for_clients(&server, |n| n == 0, "after a graceful stop").await;
}

fn is_v2(ctx: &guard::GuardContext<'_>) -> bool {
    ctx.head().headers().contains_key("x-v2")
}

#[rate_limit(limit = 5, window = "1m", identity = "ip")]
#[get("/feed", guard = "is_v2")]
async fn feed_v2() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 3, window = "1m", identity = "ip")]
#[get("/feed")]
async fn feed_v1() -> impl Responder {
    HttpResponse::Ok()
}

/// Where the default policy applies beside a declaration (a custom guard on the path), the
/// metrics tell the two apart by `policy`, and so do the log lines: `route=GET /feed`
/// alone, with equal limits, would not tell which had refused.
#[actix_web::test]
async fn a_rejection_line_names_the_policy_that_rejected() {
    let captured = CapturedLog::start(tracing::Level::WARN);
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(T0))
        .undeclared(Undeclared::new().limits(vec![Limit::new(
            5,
            Window::from_secs(60),
            Algorithm::SlidingWindow,
        )]));
    let app = test::init_service(App::new().service(feed_v2).service(feed_v1).wrap(limiter)).await;
    let feed = |v2: bool| {
        let request = test::TestRequest::get()
            .uri("/feed")
            .peer_addr("203.0.113.7:1".parse().unwrap());
        if v2 {
            request.insert_header(("x-v2", "1"))
        } else {
            request
        }
        .to_request()
    };
    // feed_v1's 3 per minute is spent first; then the default policy's 5 (counted for both).
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            test::call_service(&app, feed(false))
                .await
                .status()
                .as_u16(),
        );
    }
    for _ in 0..2 {
        statuses.push(test::call_service(&app, feed(true)).await.status().as_u16());
    }
    let logs = captured.text();
    let rejections: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("request rejected: rate limit exceeded"))
        .collect();
    eprintln!("{statuses:?}\n{}", rejections.join("\n"));
    assert!(
        rejections
            .iter()
            .any(|line| line.contains("policy=feed_v1")),
        "{logs}"
    );
    assert!(
        rejections
            .iter()
            .any(|line| line.contains("policy=default")),
        "{logs}"
    );
}
