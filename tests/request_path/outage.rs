//! Redis dies under a running App: fail-closed routes answer 503 and fail-open ones pass,
//! both recover without a restart, and the logs say what happened without naming a client.

use ratelimit_runtime::settings::Responses;
use std::time::{Duration, Instant};

// The module alone: `#[test]` below is the standard library's.
use actix_web::test::{self};
use ratelimit_runtime::clock::ManualClock;

use crate::{
    app, from, header, redis_limiter, status_of,
    support::{CapturedLog, RedisServer, T0},
};

#[actix_web::test]
async fn when_redis_dies_closed_routes_answer_503_and_open_routes_pass_then_both_recover() {
    let mut server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let login_req = || {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .set_payload(r#"{"username":"carol"}"#)
    };
    assert_eq!(status_of(&app, login_req()).await, 200);
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let res = test::call_service(&app, login_req().to_request()).await;
        assert_eq!(res.status(), 503);
        assert!(header(&res, "retry-after").parse::<u64>().unwrap() >= 1);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        let started = Instant::now();
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
            200
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }
    server.start_again();
    let mut recovered = false;
    for _ in 0..100 {
        if status_of(&app, login_req()).await == 200 {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        recovered,
        "the closed route recovers without an app restart"
    );
    let res = test::call_service(&app, from("203.0.113.7").uri("/orders/2").to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        header(&res, "x-ratelimit-limit"),
        "3",
        "decisions are made again"
    );
}

/// `tracing` caches a callsite's interest process-wide when it is first reached; a callsite
/// another test thread reaches first must still reach this thread's capture (a CI run missed
/// "request rejected" that way).
#[test]
fn a_capture_sees_events_whose_callsite_another_thread_reached_first() {
    fn event() {
        tracing::warn!(target: "capture_check", "reached");
    }
    let captured = CapturedLog::start(tracing::Level::WARN);
    std::thread::spawn(event).join().unwrap();
    event();
    assert!(captured.text().contains("reached"), "{}", captured.text());
}

#[actix_web::test]
async fn logs_name_the_route_and_identity_kind_but_never_a_username_or_key() {
    let captured = CapturedLog::start(tracing::Level::DEBUG);

    let mut server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let login_req = |user: &str| {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .insert_header(("authorization", "Bearer sk_live_TOPSECRET"))
            .set_payload(format!(
                r#"{{"username":"{user}","password":"PanGalactic"}}"#
            ))
    };
    for _ in 0..4 {
        test::call_service(&app, login_req("Zaphod.Beeblebrox").to_request()).await;
    }
    server.kill();
    // Another user: not in the flood shield, so the store is asked and is down.
    assert_eq!(status_of(&app, login_req("Trillian.Astra")).await, 503);

    let logs = captured.text();
    assert!(logs.contains("request rejected"), "{logs}");
    assert!(logs.contains("route=POST /login"), "{logs}");
    assert!(logs.contains("identity=ip+username"), "{logs}");
    assert!(logs.contains("rate-limit store"), "{logs}");
    let lower = logs.to_lowercase();
    for secret in [
        "zaphod",
        "beeblebrox",
        "trillian",
        "sk_live",
        "topsecret",
        "pangalactic",
    ] {
        assert!(
            !lower.contains(secret),
            "`{secret}` leaked into the logs:\n{logs}"
        );
    }
}

/// The 503's `Retry-After` is whole seconds rounded up, as a 429's is: a client is never
/// told to come back before the time configured.
#[actix_web::test]
async fn the_503_retry_after_rounds_up() {
    for (configured, told) in [(2_900, "3"), (1_000, "1"), (200, "1")] {
        let limiter = ratelimit_runtime::RateLimiter::new(crate::support::Down::default())
            .responses(Responses::new().unavailable_retry_after(Duration::from_millis(configured)));
        let app = test::init_service(app(limiter)).await;
        let req = from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .set_payload(r#"{"username":"carol"}"#)
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(res.status(), 503);
        assert_eq!(header(&res, "retry-after"), told, "{configured} ms");
    }
}
