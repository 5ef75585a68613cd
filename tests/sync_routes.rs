//! Routes that sync (`sync = "100ms"`) over HTTP, on a harness-started Redis and on the
//! memory store, time injected: each instance (a limiter of its own on one Redis) decides
//! from a share of the budget it took in one script call, calls again when the share is
//! spent or the interval has passed, gives an unspent rest back, and never admits more than
//! the limit in a window; a store that fails applies the route's `fail`.

mod support;

use std::time::{Duration, Instant};

use actix_web::{dev::ServiceResponse, get, test, App, HttpResponse, Responder};
use ratelimit_runtime::{clock::ManualClock, rate_limit, store::MemoryStore, RateLimiter};
use support::{until_ok, RedisServer, T0};

/// 6,000 a minute by address, synced every 100 ms: a share of 10.
#[rate_limit(
    limit = 6000,
    window = "1m",
    algorithm = "fixed_window",
    identity = "ip",
    sync = "100ms",
    fail = "closed"
)]
#[get("/feed")]
async fn feed() -> impl Responder {
    HttpResponse::Ok()
}

fn get(ip: &str) -> actix_web::test::TestRequest {
    test::TestRequest::get()
        .uri("/feed")
        .peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn remaining<B>(res: &ServiceResponse<B>) -> u32 {
    res.headers()
        .get("x-ratelimit-remaining")
        .expect("the header")
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn limiter(server: &RedisServer, clock: &ManualClock) -> RateLimiter {
    let store = ratelimit_runtime::store::RedisStore::builder(server.url())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("store");
    RateLimiter::new(store).clock(clock.clone())
}

/// One instance of the app: `/feed` behind a limiter of its own on `server`.
async fn instance(
    server: &RedisServer,
    clock: &ManualClock,
) -> impl actix_web::dev::Service<
    actix_http::Request,
    Response = ServiceResponse<impl actix_web::body::MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(App::new().service(feed).wrap(limiter(server, clock).await)).await
}

/// What the fixed-window counters of `ip` hold in all.
fn counted(server: &RedisServer, ip: &str) -> u64 {
    let mut connection = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*ip:{ip}*"))
        .query(&mut connection)
        .unwrap();
    keys.iter()
        .map(|key| {
            let values: Vec<u64> = redis::cmd("HVALS").arg(key).query(&mut connection).unwrap();
            values.iter().sum::<u64>()
        })
        .sum()
}

/// Ten requests spend one share (one script call), the eleventh takes the next; another
/// instance takes its own; a share spent from is kept past its interval, one left idle for a
/// whole interval goes back and the next share is as large as the last interval spent.
#[actix_web::test]
async fn an_instance_decides_from_its_share_and_reconciles() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let one = instance(&server, &clock).await;
    let two = instance(&server, &clock).await;
    let ip = "203.0.113.7";
    // The script is loaded by a first call of another client.
    assert_eq!(
        test::call_service(&one, get("192.0.2.1").to_request())
            .await
            .status(),
        200
    );

    let calls = server.scripts_run();
    for i in 0..10 {
        let res = test::call_service(&one, get(ip).to_request()).await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            remaining(&res),
            5_999 - i,
            "the store's 5,990 and the share left"
        );
    }
    assert_eq!(server.scripts_run() - calls, 1, "ten requests, one call");
    assert_eq!(counted(&server, ip), 10, "the share is counted at once");
    assert_eq!(
        test::call_service(&one, get(ip).to_request())
            .await
            .status(),
        200
    );
    assert_eq!(
        server.scripts_run() - calls,
        2,
        "the eleventh takes the next share"
    );
    let other = test::call_service(&two, get(ip).to_request()).await;
    assert_eq!(
        remaining(&other),
        5_979,
        "the store's 5,970 and its own share's 9"
    );
    assert_eq!(counted(&server, ip), 30);

    // The interval passes: a share spent from in it is kept, without a call.
    clock.advance(Duration::from_millis(100));
    let kept = test::call_service(&one, get(ip).to_request()).await;
    assert_eq!(kept.status(), 200);
    assert_eq!(server.scripts_run() - calls, 3, "the share kept");
    // A whole interval without a request: the first instance's unspent 8 go back, and it
    // takes a share as large as its last interval spent (1).
    clock.advance(Duration::from_millis(200));
    let fresh = test::call_service(&one, get(ip).to_request()).await;
    assert_eq!(fresh.status(), 200);
    until_ok(Duration::from_secs(5), || async {
        match counted(&server, ip) {
            23 => Ok(()),
            other => Err(format!("{other} counted, 30 - 8 + 1 expected")),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));
}

/// Three instances sharing one budget, offered more than it: no more than the limit is
/// admitted in the window, at most three shares fewer (rests given back late), in far
/// fewer calls than requests; the next window admits again.
#[actix_web::test]
async fn instances_together_admit_at_most_the_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let mut apps = Vec::new();
    for _ in 0..3 {
        apps.push(instance(&server, &clock).await);
    }
    let ip = "198.51.100.7";
    let calls = server.scripts_run();
    let (mut admitted, mut refused) = (0, 0);
    for i in 0..8_000 {
        if i % 3 == 0 {
            clock.advance(Duration::from_millis(1));
        }
        let res = test::call_service(&apps[i % 3], get(ip).to_request()).await;
        match res.status().as_u16() {
            200 => admitted += 1,
            429 => {
                refused += 1;
                let wait: u64 = res
                    .headers()
                    .get("retry-after")
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=60).contains(&wait), "Retry-After {wait}");
            }
            other => panic!("status {other}"),
        }
    }
    let calls = server.scripts_run() - calls;
    println!("admitted {admitted}, refused {refused}, {calls} script calls");
    assert!((5_970..=6_000).contains(&admitted), "admitted {admitted}");
    assert_eq!(admitted + refused, 8_000);
    assert!(calls <= 8_000 / 8, "{calls} calls for 8,000 requests");
    clock.advance(Duration::from_secs(60));
    for app in &apps {
        assert_eq!(
            test::call_service(app, get(ip).to_request()).await.status(),
            200
        );
    }
}

/// The memory store takes no shares: every request is decided as it comes.
#[actix_web::test]
async fn on_the_memory_store_every_request_is_decided_exactly() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(feed).wrap(limiter)).await;
    for left in [5_999, 5_998, 5_997] {
        let res = test::call_service(&app, get("203.0.113.8").to_request()).await;
        assert_eq!(remaining(&res), left);
    }
}

/// A share call that fails applies the route's `fail = "closed"` within the timeout.
#[actix_web::test]
async fn a_failing_store_refuses_within_the_timeout() {
    let mut server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = instance(&server, &clock).await;
    assert_eq!(
        test::call_service(&app, get("203.0.113.9").to_request())
            .await
            .status(),
        200
    );
    server.kill();
    let started = Instant::now();
    let res = test::call_service(&app, get("203.0.113.10").to_request()).await;
    assert_eq!(res.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// While the store hangs, the requests of one hot key waiting for the call in flight are
/// bounded by the timeout too: twenty at once all answer 503 within it, not one after
/// another.
#[actix_web::test]
async fn waiting_for_a_hung_call_is_bounded_too() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = instance(&server, &clock).await;
    let first = test::call_service(&app, get("203.0.113.11").to_request()).await;
    assert_eq!(first.status(), 200);
    server.pause();
    let started = Instant::now();
    let calls = (0..20).map(|_| test::call_service(&app, get("203.0.113.12").to_request()));
    let answers = futures_util::future::join_all(calls).await;
    let took = started.elapsed();
    server.resume();
    for res in answers {
        assert_eq!(res.status(), 503);
    }
    assert!(
        took < Duration::from_secs(2),
        "{took:?} for twenty requests"
    );
}
