//! A per-address and a per-username limit stacked on one sign-in route: one address spraying
//! usernames and many addresses guessing one password are both stopped, exactly, and no
//! limit is charged for a request another refused; on standalone Redis (one call), on a
//! 3-master Cluster (the identities' keys in different slots: one call each, and a give-back)
//! and in memory; and a failures-only limit with a cost beside a per-address one gives a
//! success's whole cost back on each of them.

mod support;

use ratelimit_runtime::identity::UsernameReader;
use ratelimit_runtime::settings::Identities;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    http::StatusCode,
    post,
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use futures_util::future::join_all;
use ratelimit_runtime::{
    clock::ManualClock,
    key::RouteKey,
    policy::{Algorithm, Limit, Window},
    rate_limit, IdentityPart, RateLimiter,
};
use serde::Deserialize;
use support::{Backend, T0};

#[derive(Deserialize)]
struct Login {
    username: String,
}

#[derive(Default)]
struct Reached(AtomicUsize);

#[rate_limit(limit = 100, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "username",
    algorithm = "sliding_log"
)]
#[post("/login")]
async fn login(_body: web::Json<Login>, reached: web::Data<Reached>) -> HttpResponse {
    reached.0.fetch_add(1, Ordering::SeqCst);
    HttpResponse::Unauthorized().finish()
}

/// A strict per-address limit beside a per-username one.
#[rate_limit(limit = 3, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(limit = 10, window = "5m", identity = "username")]
#[post("/strict")]
async fn strict(_body: web::Json<Login>, reached: web::Data<Reached>) -> HttpResponse {
    reached.0.fetch_add(1, Ordering::SeqCst);
    HttpResponse::Unauthorized().finish()
}

/// Limited in the process while the store is down: each share keeps its identity.
#[rate_limit(limit = 100, window = "1h", identity = "ip", fail = "local")]
#[rate_limit(limit = 10, window = "5m", identity = "username")]
#[post("/outage")]
async fn outage(_body: web::Json<Login>, reached: web::Data<Reached>) -> HttpResponse {
    reached.0.fetch_add(1, Ordering::SeqCst);
    HttpResponse::Unauthorized().finish()
}

#[derive(Deserialize)]
struct Credentials {
    password: String,
}

/// Failures only, 5 units of a name's 10: a success gives its whole cost back.
#[rate_limit(limit = 100, window = "1h", identity = "ip")]
#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "username",
    count = "failures",
    cost = 5
)]
#[post("/sign-in")]
async fn sign_in(body: web::Json<Credentials>) -> HttpResponse {
    if body.password == "right" {
        HttpResponse::Ok().finish()
    } else {
        HttpResponse::Unauthorized().finish()
    }
}

const PER_IP: Limit = Limit::new(100, Window::from_secs(3600), Algorithm::SlidingWindow);
const PER_NAME: Limit = Limit::new(10, Window::from_secs(300), Algorithm::SlidingLog);
const STRICT_IP: Limit = Limit::new(3, Window::from_secs(3600), Algorithm::SlidingWindow);
const STRICT_NAME: Limit = Limit::new(10, Window::from_secs(300), Algorithm::SlidingWindow);

async fn app(
    backend: &Backend,
    reached: &web::Data<Reached>,
) -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl MessageBody>,
    Error = actix_web::Error,
> {
    let limiter = RateLimiter::from_arc(backend.store())
        .clock(ManualClock::at(T0))
        .identity(
            Identities::new().username(UsernameReader::json_or_form::<Login>(|l| &l.username)),
        );
    test::init_service(
        App::new()
            .app_data(reached.clone())
            .service(login)
            .service(strict)
            .service(sign_in)
            .wrap(limiter),
    )
    .await
}

fn attempt(path: &str, ip: &str, username: &str) -> TestRequest {
    TestRequest::post()
        .uri(path)
        .peer_addr(format!("{ip}:40000").parse().unwrap())
        .set_json(serde_json::json!({ "username": username, "password": "guess" }))
}

fn key(path: &str, part: IdentityPart, value: &str) -> RouteKey {
    RouteKey::new("rl", "POST", path, &[(part, value)])
}

async fn mixed(name: &str, backend: Backend) {
    let reached = web::Data::new(Reached::default());
    let app = app(&backend, &reached).await;
    // 200 concurrent attempts: 20 addresses, 5 usernames.
    let statuses: Vec<StatusCode> = join_all((0..200).map(|i| {
        let req = attempt(
            "/login",
            &format!("10.0.0.{}", i % 20),
            &format!("user{}", i % 5),
        );
        test::call_service(&app, req.to_request())
    }))
    .await
    .iter()
    .map(|r| r.status())
    .collect();
    // 10 per username reach the handler; the per-address budget (100) never binds.
    assert_eq!(reached.0.load(Ordering::SeqCst), 50, "{name}");
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(refused, 150, "{name}");
    for user in 0..5 {
        let counted = backend
            .counted(
                &key("/login", IdentityPart::Username, &format!("user{user}")),
                &PER_NAME,
                T0,
            )
            .await;
        assert_eq!(counted, 10, "{name}: user{user}");
    }
    // The per-address limit counted only what the per-username one allowed.
    let mut by_address = 0;
    for ip in 0..20 {
        by_address += backend
            .counted(
                &key("/login", IdentityPart::Ip, &format!("10.0.0.{ip}")),
                &PER_IP,
                T0,
            )
            .await;
    }
    assert_eq!(
        by_address, 50,
        "{name}: refused requests charged no address"
    );

    // One address spraying names: the per-address limit (3) stops it, and the names it tried
    // are charged only for what passed.
    let reached = web::Data::new(Reached::default());
    let app = self::app(&backend, &reached).await;
    let statuses: Vec<StatusCode> = join_all((0..12).map(|i| {
        let req = attempt("/strict", "192.0.2.9", &format!("victim{}", i % 2));
        test::call_service(&app, req.to_request())
    }))
    .await
    .iter()
    .map(|r| r.status())
    .collect();
    let passed = statuses
        .iter()
        .filter(|s| **s != StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(passed, 3, "{name}: {statuses:?}");
    let mut by_name = 0;
    for victim in 0..2 {
        by_name += backend
            .counted(
                &key(
                    "/strict",
                    IdentityPart::Username,
                    &format!("victim{victim}"),
                ),
                &STRICT_NAME,
                T0,
            )
            .await;
    }
    assert_eq!(
        by_name, 3,
        "{name}: names charged only for what the address limit allowed"
    );
    let by_ip = backend
        .counted(
            &key("/strict", IdentityPart::Ip, "192.0.2.9"),
            &STRICT_IP,
            T0,
        )
        .await;
    assert_eq!(by_ip, 3, "{name}");

    // Failures only with a cost: each success gives its whole cost (5) back, on a Cluster
    // too, where the address's and the name's parts are separate calls with no receipt, so
    // successes never wear the name's budget down; two failures spend it.
    let sign_in_with = |password: &str| {
        TestRequest::post()
            .uri("/sign-in")
            .peer_addr("192.0.2.20:40000".parse().unwrap())
            .set_json(serde_json::json!({ "username": "alice", "password": password }))
            .to_request()
    };
    for expected in [200, 200, 200, 200, 401, 401, 429] {
        let password = if expected == 401 { "wrong" } else { "right" };
        let res = test::call_service(&app, sign_in_with(password)).await;
        assert_eq!(res.status().as_u16(), expected, "{name}");
    }
    backend.finish().await;
}

#[actix_web::test]
async fn while_the_store_is_down_the_local_shares_still_count_names_and_addresses() {
    let down = support::Down::default();
    let limiter = RateLimiter::new(down.clone())
        .clock(ManualClock::at(T0))
        .identity(
            Identities::new().username(UsernameReader::json_or_form::<Login>(|l| &l.username)),
        );
    let reached = web::Data::new(Reached::default());
    let app = test::init_service(
        App::new()
            .app_data(reached.clone())
            .service(outage)
            .wrap(limiter),
    )
    .await;
    // Many addresses guessing one name: the name's share (10) stops them.
    for i in 0..30 {
        let req = attempt("/outage", &format!("10.1.0.{i}"), "target");
        test::call_service(&app, req.to_request()).await;
    }
    assert_eq!(reached.0.load(Ordering::SeqCst), 10);
    assert!(down.calls() >= 30, "the store was asked and failed");
}

/// A refusal is logged by the identity of the limit that refused.
#[actix_web::test]
async fn a_refusal_names_the_identity_of_the_limit_that_refused() {
    let captured = support::CapturedLog::start(tracing::Level::WARN);
    let backend = Backend::memory();
    let reached = web::Data::new(Reached::default());
    let app = app(&backend, &reached).await;
    for i in 0..11 {
        let req = attempt("/login", &format!("10.2.0.{i}"), "target");
        test::call_service(&app, req.to_request()).await;
    }
    let log = captured.text();
    assert!(log.contains("identity=username"), "{log}");
    assert!(!log.contains("identity=ip "), "{log}");
}

#[actix_web::test]
async fn per_address_and_per_username_limits_on_standalone_redis() {
    mixed("redis", Backend::standalone().await).await;
}

#[actix_web::test]
async fn per_address_and_per_username_limits_on_a_cluster() {
    // The address's and the names' keys live in different slots: the check is split, and a
    // refusal by one part gives back what the other counted.
    let slot = |part, value| support::key_slot(&key("/strict", part, value).limit_key(&STRICT_IP));
    for victim in ["victim0", "victim1"] {
        assert_ne!(
            slot(IdentityPart::Ip, "192.0.2.9"),
            slot(IdentityPart::Username, victim)
        );
    }
    let slot = |part, value| support::key_slot(&key("/sign-in", part, value).limit_key(&STRICT_IP));
    assert_ne!(
        slot(IdentityPart::Ip, "192.0.2.20"),
        slot(IdentityPart::Username, "alice")
    );
    mixed("cluster", Backend::cluster().await).await;
}

#[actix_web::test]
async fn per_address_and_per_username_limits_in_memory() {
    mixed("memory", Backend::memory()).await;
}
