//! Redis killed under traffic, and restarted between requests: fail-closed routes answer
//! 503 in time, fail-open ones pass, and decisions come back, exactly, with the script
//! loaded again.

use std::{
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use actix_web::{test, App};
use ratelimit_runtime::{clock::ManualClock, store::RedisStore, RateLimiter};

use crate::{
    app, closed_route, open_route,
    support::{RedisServer, T0},
    traffic::{
        assert_bounded, assert_exact, assert_mostly_decided, fresh_clients, recovery, traffic,
        Route,
    },
    IN_FLIGHT, LIMIT, SERIAL, TIMEOUT,
};

async fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let mut conn = server.async_connection().await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[actix_web::test]
async fn redis_killed_under_traffic_fails_closed_in_time_passes_open_then_recovers_exactly() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    // Killed 200 ms into the traffic, from another thread, with requests in flight.
    let killed: Arc<Mutex<Option<(Instant, Instant)>>> = Arc::default();
    let killer = thread::spawn({
        let killed = Arc::clone(&killed);
        let mut server = server;
        move || {
            thread::sleep(Duration::from_millis(200));
            let started = Instant::now();
            server.kill();
            *killed.lock().unwrap() = Some((started, Instant::now()));
            server
        }
    });
    // 600 ms of traffic after the kill.
    let outage_over = || {
        killed
            .lock()
            .unwrap()
            .is_some_and(|(_, done)| done.elapsed() > Duration::from_millis(600))
    };
    let samples = traffic(&app, fresh_clients("kill"), |_| outage_over()).await;
    let server = killer.join().unwrap();
    let (kill_started, kill_done) = killed.lock().unwrap().unwrap();

    assert_bounded(&samples, "redis killed under traffic");
    let before: Vec<_> = samples.iter().filter(|s| s.done() < kill_started).collect();
    let across = samples
        .iter()
        .filter(|s| s.sent < kill_started && s.done() > kill_done)
        .count();
    let after: Vec<_> = samples.iter().filter(|s| s.sent > kill_done).collect();
    println!(
        "answered before the kill {}, in flight across it {across}, sent after it {}",
        before.len(),
        after.len()
    );
    assert!(before.len() >= 2 * IN_FLIGHT && after.len() >= 2 * IN_FLIGHT);
    for s in &samples {
        s.assert_answer("redis killed");
    }
    assert_mostly_decided(before, "before the kill");
    for s in &after {
        assert!(!s.decided, "a decision without Redis: {s:?}");
    }

    // The 503 says when to come back, in problem+json.
    let res = test::call_service(&app, Route::Closed.request("outage").to_request()).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers().get("retry-after").unwrap(), "1");
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "application/problem+json"
    );

    let mut server = actix_web::rt::task::spawn_blocking(move || {
        let mut server = server;
        server.start_again();
        server
    })
    .await
    .unwrap();
    let took = recovery(&app, Route::Closed, "back").await;
    println!("decisions again {took:?} after Redis came back");
    assert_exact(&app, Route::Closed, "after-kill-closed").await;
    assert_exact(&app, Route::Open, "after-kill-open").await;
    server.kill();
}

#[actix_web::test]
async fn a_redis_restart_between_requests_fails_no_request_and_reloads_the_script() {
    let _serial = SERIAL.lock().await;
    let mut server = RedisServer::start();
    // Generous: this test is about the retry after a dropped connection and the NOSCRIPT
    // fallback (without them the first request after a restart fails at once, whatever the
    // timeout); the latency bound is the other tests' business.
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0 + 30_000));
    let app = test::init_service(
        App::new()
            .service(closed_route)
            .service(open_route)
            .wrap(limiter),
    )
    .await;

    let mut requests = 0;
    for round in 0..4 {
        if round > 0 {
            server = actix_web::rt::task::spawn_blocking(move || {
                server.restart();
                server
            })
            .await
            .unwrap();
        }
        // The same client spends the whole budget every round: it is allowed again only
        // because the restarted Redis is empty, so each 200 is a decision of the new server.
        for k in 0..LIMIT {
            for route in [Route::Closed, Route::Open] {
                let res = test::call_service(&app, route.request("steady").to_request()).await;
                requests += 1;
                assert_eq!(res.status(), 200, "round {round}, request {k}, {route:?}");
                let remaining = res.headers().get("x-ratelimit-remaining");
                assert_eq!(
                    remaining.and_then(|v| v.to_str().ok()),
                    Some((LIMIT - 1 - k).to_string().as_str()),
                    "round {round}, request {k}, {route:?}"
                );
            }
        }
        let over = format!("over-{round}");
        for k in 0..=LIMIT {
            let res = test::call_service(&app, Route::Closed.request(&over).to_request()).await;
            requests += 1;
            let expected = if k < LIMIT { 200 } else { 429 };
            assert_eq!(
                res.status(),
                expected,
                "round {round}, request {k} of a client over its limit"
            );
        }
        // The first call of each script on each server met NOSCRIPT and fell back to EVAL,
        // once per script: two here, the sliding log's and GCRA's (one limit each).
        let evals = command_calls(&server, "eval").await;
        assert_eq!(evals, 2, "round {round}: EVAL calls on this server");
    }
    println!("{requests} requests across 3 Redis restarts, none failed");
    server.kill();
}
