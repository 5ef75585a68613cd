//! Counters and the store-latency histogram, tagged by route and decision, through the
//! `metrics` facade (a recorder installed for this test binary only).

mod support;

use std::time::Duration;

use actix_web::{get, post, test, App, HttpResponse, Responder};
use metrics_util::{
    debugging::{DebugValue, DebuggingRecorder, Snapshotter},
    CompositeKey, MetricKind,
};
use ratelimit_runtime::{clock::ManualClock, rate_limit, store::RedisStore, RateLimiter};
use support::{RedisServer, T0};

#[rate_limit(limit = 1, window = "1m", identity = "ip", fail = "open")]
#[get("/open")]
async fn open() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1m", identity = "ip", fail = "closed")]
#[post("/closed")]
async fn closed() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1m", identity = "ip", shadow = true)]
#[get("/shadow")]
async fn shadow() -> impl Responder {
    HttpResponse::Ok()
}

fn counter(
    snapshot: &[(CompositeKey, DebugValue)],
    name: &str,
    route: &str,
    decision: &str,
) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _)| key.kind() == MetricKind::Counter && key.key().name() == name)
        .filter(|(key, _)| {
            let labels: Vec<(&str, &str)> =
                key.key().labels().map(|l| (l.key(), l.value())).collect();
            labels.contains(&("route", route)) && labels.contains(&("decision", decision))
        })
        .map(|(_, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[actix_web::test]
async fn every_decision_is_counted_by_route_and_the_store_latency_is_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter: Snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(open)
            .service(closed)
            .service(shadow)
            .wrap(limiter),
    )
    .await;
    let get = |path: &str| {
        test::TestRequest::get()
            .uri(path)
            .peer_addr("203.0.113.7:1".parse().unwrap())
            .to_request()
    };
    let post = |path: &str| {
        test::TestRequest::post()
            .uri(path)
            .peer_addr("203.0.113.7:1".parse().unwrap())
            .to_request()
    };
    assert_eq!(test::call_service(&app, get("/open")).await.status(), 200);
    assert_eq!(test::call_service(&app, get("/open")).await.status(), 429);
    assert_eq!(test::call_service(&app, get("/shadow")).await.status(), 200);
    assert_eq!(test::call_service(&app, get("/shadow")).await.status(), 200);
    server.kill();
    assert_eq!(
        test::call_service(&app, post("/closed")).await.status(),
        503
    );
    // A new client, so the flood shield does not answer for it.
    let fresh = test::TestRequest::get()
        .uri("/open")
        .peer_addr("203.0.113.8:1".parse().unwrap())
        .to_request();
    assert_eq!(test::call_service(&app, fresh).await.status(), 200);

    let snapshot: Vec<(CompositeKey, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect();
    let decisions = "ratelimit_decisions_total";
    assert_eq!(counter(&snapshot, decisions, "GET /open", "allowed"), 1);
    assert_eq!(counter(&snapshot, decisions, "GET /open", "rejected"), 1);
    assert_eq!(counter(&snapshot, decisions, "GET /shadow", "allowed"), 1);
    assert_eq!(
        counter(&snapshot, decisions, "GET /shadow", "shadow_rejected"),
        1
    );
    assert_eq!(
        counter(&snapshot, decisions, "POST /closed", "failed_closed"),
        1
    );
    assert_eq!(counter(&snapshot, decisions, "GET /open", "failed_open"), 1);
    let histogram_samples: usize = snapshot
        .iter()
        .filter(|(key, _)| {
            key.kind() == MetricKind::Histogram
                && key.key().name() == "ratelimit_store_duration_seconds"
        })
        .map(|(_, value)| match value {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(histogram_samples, 6, "one latency sample per store call");
}
