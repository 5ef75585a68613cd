//! Decisions on the shared App's routes over Redis: budgets per route pattern and client,
//! the headers and the 429, stacked and shadow limits, the default policy, the flood shield,
//! and one budget across actix's workers.

use ratelimit_runtime::settings::Responses;
use std::time::{Duration, Instant};

use actix_web::{get, test, web, App, HttpResponse};
use futures_util::future::join_all;
use ratelimit_runtime::{clock::ManualClock, rate_limit, store::MemoryStore, RateLimiter};

use crate::{
    app, from, header, redis_limiter, status_of,
    support::{quota_policies, service_limits, RedisServer, T0},
};

#[actix_web::test]
async fn a_route_pattern_shares_one_budget_and_the_next_request_gets_an_exact_429() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;

    for (i, id) in [1, 2, 1].into_iter().enumerate() {
        let res = test::call_service(
            &app,
            from("203.0.113.7")
                .uri(&format!("/orders/{id}"))
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), 200, "request {i}");
        assert_eq!(header(&res, "x-ratelimit-limit"), "3");
        assert_eq!(header(&res, "x-ratelimit-remaining"), (2 - i).to_string());
        assert_eq!(header(&res, "ratelimit-policy"), "\"get_order\";q=3;w=60");
    }
    // Two more seconds into the window: a sliding window needs the whole minute to pass.
    clock.advance(Duration::from_secs(2));
    let res = test::call_service(&app, from("203.0.113.7").uri("/orders/9").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&res, "x-ratelimit-limit"), "3");
    let retry: u64 = header(&res, "retry-after").parse().unwrap();
    assert!((1..=120).contains(&retry), "retry-after {retry}");
    // Refused: nothing available, for as long as the client must wait.
    let limits = service_limits(&header(&res, "ratelimit"));
    assert_eq!(limits.len(), 1);
    assert_eq!(
        (limits[0].policy.as_str(), limits[0].r, limits[0].t),
        ("get_order", 0, Some(retry as i64))
    );
    assert_eq!(header(&res, "content-type"), "application/problem+json");
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after"], retry);
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("GET /orders/{id}"));

    // Another route has its own budget, and so has another client.
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/invoices/1")).await,
        200
    );
    assert_eq!(
        status_of(&app, from("198.51.100.1").uri("/orders/1")).await,
        200
    );
}

#[actix_web::test]
async fn the_retry_after_of_a_fixed_window_is_the_time_to_the_window_end() {
    let server = RedisServer::start();
    // 59.5 s into a minute window.
    let clock = ManualClock::at(T0 + 59_500);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..3 {
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/invoices/1")).await,
            200
        );
    }
    let res = test::call_service(&app, from("203.0.113.7").uri("/invoices/1").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        header(&res, "retry-after"),
        "1",
        "500 ms rounds up to one second"
    );
    clock.advance(Duration::from_millis(500));
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/invoices/1")).await,
        200
    );
}

#[actix_web::test]
async fn stacked_limits_must_all_pass() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/stacked")).await,
        200
    );
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/stacked")).await,
        200
    );
    // 2 per second is spent.
    let res = test::call_service(&app, from("203.0.113.7").uri("/stacked").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"stacked.0\";q=2;w=1, \"stacked.1\";q=3;w=60"
    );
    let policies = quota_policies(&header(&res, "ratelimit-policy"));
    assert_eq!(policies.len(), 2);
    let limit = &service_limits(&header(&res, "ratelimit"))[0];
    assert_eq!((limit.policy.as_str(), limit.r), ("stacked.0", 0));
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/stacked")).await,
        200
    );
    // Now 3 per minute is spent, although the per-second budget is back.
    clock.advance(Duration::from_secs(2));
    let res = test::call_service(&app, from("203.0.113.7").uri("/stacked").to_request()).await;
    assert_eq!(res.status(), 429);
    let limit = &service_limits(&header(&res, "ratelimit"))[0];
    assert_eq!((limit.policy.as_str(), limit.r), ("stacked.1", 0));
}

#[actix_web::test]
async fn shadow_routes_never_reject() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..5 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/shadow").to_request()).await;
        assert_eq!(res.status(), 200);
    }
    let res = test::call_service(&app, from("203.0.113.7").uri("/shadow").to_request()).await;
    assert_eq!(res.status(), 200);
    assert!(
        res.headers().get("x-ratelimit-remaining").is_none()
            && res.headers().get("ratelimit").is_none(),
        "a shadow limit sends no headers that would make clients back off"
    );
}

#[actix_web::test]
async fn an_undeclared_route_gets_the_default_policy() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..120 {
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/undeclared")).await,
            200
        );
    }
    let res = test::call_service(&app, from("203.0.113.7").uri("/undeclared").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "ratelimit-policy"), "\"default\";q=120;w=60");
    // Requests that match no route are limited too.
    let res = test::call_service(&app, from("203.0.113.8").uri("/no/such/page").to_request()).await;
    assert_eq!(res.status(), 404);
    assert_eq!(header(&res, "x-ratelimit-limit"), "120");
}

async fn database_down() -> HttpResponse {
    HttpResponse::ServiceUnavailable().body("database down")
}

#[actix_web::test]
async fn an_undeclared_routes_own_503_keeps_the_default_policys_headers() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .route("/down", web::get().to(database_down))
            .wrap(limiter),
    )
    .await;
    let res = test::call_service(&app, from("203.0.113.7").uri("/down").to_request()).await;
    assert_eq!(res.status(), 503);
    assert_eq!(header(&res, "x-ratelimit-remaining"), "119");
}

#[actix_web::test]
async fn shielded_keys_are_answered_without_a_script_call() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..3 {
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
            200
        );
    }
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
        429
    );
    let before = server.scripts_run();
    for _ in 0..50 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/orders/1").to_request()).await;
        assert_eq!(res.status(), 429);
        assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
    }
    assert_eq!(
        server.scripts_run(),
        before,
        "no script call for a shielded key"
    );
    // Other clients still reach Redis.
    assert_eq!(
        status_of(&app, from("203.0.113.8").uri("/orders/1")).await,
        200
    );
    assert_eq!(server.scripts_run(), before + 1);
    // Once the retry time passes, the key is decided by Redis again.
    clock.advance(Duration::from_secs(120));
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
        200
    );
}

/// Once a second the shield asks Redis again for a flooded key: one request makes that call,
/// and the requests in flight meanwhile are answered by the shield, not sent too. A pass
/// (the budget reset elsewhere) makes the shield forget the key.
#[actix_web::test]
async fn a_flood_asks_redis_once_a_second_however_many_requests_are_in_flight() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let flood = || from("203.0.113.7").uri("/orders/1").to_request();
    for expected in [200, 200, 200, 429] {
        assert_eq!(test::call_service(&app, flood()).await.status(), expected);
    }
    for _ in 0..3 {
        clock.advance(Duration::from_secs(1));
        let before = server.scripts_run();
        let answers = join_all((0..32).map(|_| test::call_service(&app, flood()))).await;
        assert!(answers.iter().all(|res| res.status() == 429));
        assert_eq!(server.scripts_run(), before + 1, "one call a second");
    }
    // The budget reset elsewhere: the next second's call passes, and the key is forgotten.
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.connection())
        .unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(test::call_service(&app, flood()).await.status(), 200);
    let before = server.scripts_run();
    assert_eq!(test::call_service(&app, flood()).await.status(), 200);
    assert_eq!(server.scripts_run(), before + 1, "decided by Redis again");
}

#[rate_limit(limit = 4, window = "1m", identity = "ip", fail = "closed")]
#[get("/per-worker")]
async fn per_worker() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Each actix worker checks over a Redis connection of its own (driven on that worker's
/// thread, so a check never crosses threads), and every worker counts in the same budget.
#[actix_web::test]
async fn every_worker_checks_over_its_own_connection_and_all_share_one_budget() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, &ManualClock::at(T0)).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http =
        actix_web::HttpServer::new(move || App::new().service(per_worker).wrap(limiter.clone()))
            .workers(2)
            .listen(listener)
            .unwrap()
            .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);

    // The store's own connection and one per worker, each warmed up with a PING.
    let started = Instant::now();
    while server.client_commands().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "expected 3 connections, Redis has {:?}",
            server.client_commands()
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }

    // A new TCP connection per request: actix hands them to its workers in turn.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let client = awc::Client::new();
        let response = client
            .get(format!("http://127.0.0.1:{port}/per-worker"))
            .insert_header(("connection", "close"))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);

    let mut clients = server.client_commands();
    clients.sort();
    // Both workers ran the script (the first one there with EVAL, after NOSCRIPT); the
    // store's own connection only said PING; no connection was opened per request.
    assert_eq!(clients.len(), 3, "{clients:?}");
    assert_eq!(clients[2], "ping", "{clients:?}");
    assert!(
        clients[..2].iter().all(|cmd| cmd == "evalsha"),
        "{clients:?}"
    );
    handle.stop(true).await;
}

#[actix_web::test]
async fn each_header_family_alone_or_both_tell_the_same_exact_figures() {
    use ratelimit_runtime::HeaderFamilies;

    for (x_ratelimit, ietf_draft) in [(true, true), (true, false), (false, true)] {
        let families = HeaderFamilies::none()
            .x_ratelimit(x_ratelimit)
            .ietf_draft(ietf_draft);
        let limiter = RateLimiter::new(MemoryStore::new())
            .clock(ManualClock::at(T0))
            .responses(Responses::new().headers(families));
        let app = test::init_service(app(limiter)).await;
        for left in [2, 1, 0] {
            let res =
                test::call_service(&app, from("203.0.113.9").uri("/orders/1").to_request()).await;
            assert_eq!(res.status(), 200, "{families:?}");
            let get = |name: &str| {
                res.headers()
                    .get(name)
                    .map(|value| value.to_str().unwrap().to_owned())
            };
            // A sliding window of a minute: what counts now stops counting at the end of the
            // next window; a full count frees its first unit 20 s (a minute / 3) into it.
            let reset = "120";
            if x_ratelimit {
                assert_eq!(get("x-ratelimit-limit").as_deref(), Some("3"));
                assert_eq!(get("x-ratelimit-remaining"), Some(left.to_string()));
                assert_eq!(get("x-ratelimit-reset").as_deref(), Some(reset));
            } else {
                assert_eq!(get("x-ratelimit-remaining"), None, "{families:?}");
                assert_eq!(get("x-ratelimit-reset"), None, "{families:?}");
            }
            if ietf_draft {
                assert_eq!(
                    get("ratelimit-policy").as_deref(),
                    Some("\"get_order\";q=3;w=60")
                );
                let limits = service_limits(&get("ratelimit").unwrap());
                assert_eq!(
                    (limits[0].policy.as_str(), limits[0].r, limits[0].t),
                    ("get_order", left, Some(80))
                );
            } else {
                assert_eq!(get("ratelimit"), None, "{families:?}");
                assert_eq!(get("ratelimit-policy"), None, "{families:?}");
            }
        }
    }
}
