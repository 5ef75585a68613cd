//! Redis stalled (every client paused, the server itself busy) under traffic: no request
//! waits past the timeout, which is the limiter's, whether longer or shorter than the
//! store's own; a cluster check past its connection's response timeout ends once, in time.

use std::{
    thread,
    time::{Duration, Instant},
};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    test::{self, TestRequest},
    App,
};
use ratelimit_runtime::{
    clock::ManualClock,
    store::{RedisClusterStore, RedisStore},
    RateLimiter,
};

use crate::{
    app, closed_route,
    support::{RedisCluster, RedisServer, T0},
    traffic::{assert_bounded, assert_exact, fresh_clients, recovery, traffic, Route},
    BOUND, IN_FLIGHT, SERIAL, TIMEOUT,
};

/// Traffic on fresh clients while `stall` (run on its own thread) stalls Redis for
/// `stall_for`; then recovery and exact decisions.
async fn stalled<S, B>(
    app: &S,
    stall_for: Duration,
    stall: impl FnOnce() + Send + 'static,
    tag: &str,
) where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let stalled_at = Instant::now();
    let staller = thread::spawn(stall);
    // Requests sent in the first 50 ms may still be answered before the stall begins, and
    // traffic stops 300 ms before it ends.
    let settled = stalled_at + Duration::from_millis(50);
    let traffic_for = stall_for - Duration::from_millis(300);
    let samples = traffic(app, fresh_clients(tag), |_| {
        stalled_at.elapsed() > traffic_for
    })
    .await;
    assert_bounded(&samples, tag);
    for s in &samples {
        s.assert_answer(tag);
    }
    let late: Vec<_> = samples.iter().filter(|s| s.sent > settled).collect();
    assert!(
        late.len() > 4 * IN_FLIGHT,
        "{tag}: too little traffic during the stall"
    );
    for s in late {
        assert!(!s.decided, "{tag}: a decision from a stalled Redis: {s:?}");
    }
    staller.join().unwrap();
    let took = recovery(app, Route::Closed, tag).await;
    println!("{tag}: decisions again {took:?} after the stall's traffic stopped");
    assert_exact(app, Route::Closed, &format!("{tag}-after-closed")).await;
    assert_exact(app, Route::Open, &format!("{tag}-after-open")).await;
}

/// `RateLimiter::timeout` replaces the store's own timeout, longer or shorter: under a
/// limiter's 2 s, the Redis store's 50 ms does not cut every call short, so a remote Redis
/// answering in 300 ms is not failed closed on every request. (A deprecated setting, which
/// keeps this behaviour; the store's builder is where its timeout is set.)
#[actix_web::test]
#[allow(deprecated)]
async fn the_limiters_timeout_replaces_the_stores_own_longer_or_shorter() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let pause = |millis: u64| {
        let mut admin = server.connection();
        thread::spawn(move || {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(millis)
                .arg("ALL")
                .query(&mut admin)
                .expect("CLIENT PAUSE");
        })
        .join()
        .unwrap();
    };
    for (store_timeout, limiter_timeout, expected) in [
        (TIMEOUT, Duration::from_secs(2), 200),
        (Duration::from_secs(2), TIMEOUT, 503),
    ] {
        let store = RedisStore::builder(server.url())
            .timeout(store_timeout)
            .build()
            .await
            .unwrap();
        let limiter = RateLimiter::new(store)
            .clock(ManualClock::at(T0 + 30_000))
            .timeout(limiter_timeout);
        let app = test::init_service(App::new().service(closed_route).wrap(limiter)).await;
        let client = format!("replaces-{}", limiter_timeout.as_millis());
        let request = || {
            TestRequest::post()
                .uri("/closed")
                .insert_header(("x-client", client.clone()))
                .to_request()
        };
        assert_eq!(test::call_service(&app, request()).await.status(), 200);
        pause(300);
        let started = Instant::now();
        let status = test::call_service(&app, request()).await.status();
        let waited = started.elapsed();
        assert_eq!(
            status.as_u16(),
            expected,
            "store {store_timeout:?}, limiter {limiter_timeout:?}: answered after {waited:?}"
        );
        if expected == 503 {
            assert!(waited < BOUND, "waited {waited:?}");
        }
        // Let the pause end before the next round.
        thread::sleep(Duration::from_millis(350));
    }
}

/// A limiter timeout longer than a cluster connection's response timeout (the longer of its
/// connect timeout and its own, 1 s here) must not leave a check that timed out in
/// redis-rs's retry queue, to be sent again with the next request and counted twice, nor
/// have the store retry it once more itself. A cluster check ends at the longer of those two
/// timeouts, before its connection's reply timeout, and is not retried: Redis busy for 1.5 s
/// under a 4 s limiter timeout answers 503 after about 1 s, and the request counts once.
/// (The limiter's timeout is deprecated, and kept with this behaviour; a store's own
/// timeout is its connection's response timeout too.)
#[actix_web::test]
#[allow(deprecated)]
async fn a_cluster_check_past_its_connections_response_timeout_ends_once_in_time() {
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::new(store)
        .clock(ManualClock::at(T0 + 30_000))
        .timeout(Duration::from_secs(4));
    let app = test::init_service(App::new().service(closed_route).wrap(limiter)).await;
    let request = || {
        TestRequest::post()
            .uri("/closed")
            .insert_header(("x-client", "past-response-timeout"))
            .to_request()
    };
    let remaining = |response: &ServiceResponse<_>| {
        response
            .headers()
            .get("x-ratelimit-remaining")
            .expect("X-RateLimit-Remaining")
            .to_str()
            .unwrap()
            .to_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let response = test::call_service(&app, request()).await;
        if response.status() == 200 {
            break response;
        }
        assert!(Instant::now() < deadline, "the cluster never answered");
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(remaining(&first), "4");
    for master in cluster.masters() {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1500)
            .arg("ALL")
            .query(&mut master.connection())
            .unwrap();
    }
    let started = Instant::now();
    let second = test::call_service(&app, request()).await;
    let waited = started.elapsed();
    assert_eq!(second.status(), 503);
    assert!(waited < Duration::from_millis(1_400), "waited {waited:?}");
    thread::sleep(Duration::from_millis(800));
    // The refused request was run once when Redis woke: 4, then 3 left, then 2.
    let third = test::call_service(&app, request()).await;
    assert_eq!(remaining(&third), "2");
}

#[actix_web::test]
async fn a_stalled_redis_never_holds_a_request_longer_than_the_timeout() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let store = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    // Every client paused for 2 s: commands queue up unanswered.
    let mut admin = server.connection();
    stalled(
        &app,
        Duration::from_millis(2000),
        move || {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(2000)
                .arg("ALL")
                .query(&mut admin)
                .expect("CLIENT PAUSE");
        },
        "client-pause",
    )
    .await;

    // The server itself busy for 1 s.
    let mut admin = server.connection();
    stalled(
        &app,
        Duration::from_millis(1000),
        move || {
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(1)
                .query(&mut admin)
                .expect("DEBUG SLEEP");
        },
        "debug-sleep",
    )
    .await;
}
