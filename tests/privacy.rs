//! Privacy: after traffic with usernames, API keys, bearer tokens and session headers
//! through the App against a real Redis (allowed, rejected, shielded, fallen back, and
//! failed while Redis is down), no Redis key or value and no log line contains any of them,
//! in any letter case.

mod support;

use std::time::Duration;

use actix_web::{
    get, post,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use ratelimit_runtime::{rate_limit, store::RedisStore, RateLimiter};
use support::{CapturedLog, RedisServer};

#[rate_limit(
    limit = 2,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login(_body: web::Bytes) -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 2, window = "1m", identity = "api_key", fail = "open")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 2,
    window = "1h",
    identity = "api_key",
    algorithm = "fixed_window",
    fail = "closed"
)]
#[post("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 2,
    window = "10s",
    identity = "header:x-session",
    algorithm = "gcra"
)]
#[get("/session")]
async fn session() -> impl Responder {
    HttpResponse::Ok()
}

const USERNAMES: [&str; 4] = [
    "Zaphod.Beeblebrox",
    "trillian@heartofgold.example",
    "  Ford Prefect ",
    "ARTHUR_DENT",
];
const PASSWORDS: [&str; 2] = ["PanGalacticGargleBlaster", "hunter2-Towel"];
const API_KEYS: [&str; 2] = ["sk_live_51HxYzQuestionOf42", "AKIAIMPROBABILITYDRIVE"];
const BEARER_TOKENS: [&str; 2] = [
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtYXJ2aW4ifQ.DeepThoughtSig",
    "ghp_VogonPoetryIsTheThirdWorst",
];
const SESSIONS: [&str; 2] = ["sess-Magrathea-7f3a9c", "sess-Milliways-e1d2"];

/// Everything that must never be stored or logged, lower-cased; the usernames also as the
/// limiter normalises them.
fn secrets() -> Vec<String> {
    let mut all: Vec<String> = USERNAMES
        .iter()
        .chain(&PASSWORDS)
        .chain(&API_KEYS)
        .chain(&BEARER_TOKENS)
        .chain(&SESSIONS)
        .map(|s| s.trim().to_lowercase())
        .collect();
    // Distinctive fragments too, in case a value is stored split or partly.
    all.extend(
        [
            "zaphod",
            "beeblebrox",
            "trillian",
            "heartofgold",
            "prefect",
            "arthur_dent",
        ]
        .map(String::from),
    );
    all.extend(["deepthoughtsig", "vogonpoetry", "magrathea", "milliways"].map(String::from));
    all
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

/// Every key in `server`, and every value (strings and sorted-set members) as text.
fn stored(server: &RedisServer) -> (Vec<String>, Vec<String>) {
    let mut conn = server.connection();
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut values = Vec::new();
    for key in &keys {
        let kind: String = redis::cmd("TYPE").arg(key).query(&mut conn).unwrap();
        match kind.as_str() {
            "string" => values.push(redis::cmd("GET").arg(key).query(&mut conn).unwrap()),
            "zset" => values.extend(
                redis::cmd("ZRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .query::<Vec<String>>(&mut conn)
                    .unwrap(),
            ),
            // Window counters: fields and values both.
            "hash" => values.extend(
                redis::cmd("HGETALL")
                    .arg(key)
                    .query::<Vec<String>>(&mut conn)
                    .unwrap(),
            ),
            other => panic!("unexpected type `{other}` of `{key}`"),
        }
    }
    (keys, values)
}

#[actix_web::test]
async fn no_username_api_key_or_token_reaches_redis_or_the_logs() {
    let captured = CapturedLog::start(tracing::Level::TRACE);

    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    // Real Redis TIME: keys are exactly what production writes.
    let limiter = RateLimiter::new(store);
    let app = test::init_service(
        App::new()
            .service(login)
            .service(search)
            .service(export)
            .service(session)
            .wrap(limiter),
    )
    .await;

    let mut statuses = Vec::new();
    // Four rounds: allowed, allowed, rejected, then shielded.
    for _ in 0..4 {
        for (i, username) in USERNAMES.iter().enumerate() {
            let password = PASSWORDS[i % PASSWORDS.len()];
            let json = serde_json::json!({ "username": username, "password": password });
            let req = from("203.0.113.7")
                .method(actix_web::http::Method::POST)
                .uri("/login")
                .insert_header(("content-type", "application/json"))
                .set_payload(json.to_string());
            statuses.push(test::call_service(&app, req.to_request()).await.status());
            let form = format!("username={}&password={password}", username.trim());
            let req = from("203.0.113.8")
                .method(actix_web::http::Method::POST)
                .uri("/login")
                .insert_header(("content-type", "application/x-www-form-urlencoded"))
                .set_payload(form);
            statuses.push(test::call_service(&app, req.to_request()).await.status());
        }
        for key in API_KEYS {
            let req = from("203.0.113.9")
                .uri("/search")
                .insert_header(("x-api-key", key));
            statuses.push(test::call_service(&app, req.to_request()).await.status());
            let req = from("203.0.113.9")
                .method(actix_web::http::Method::POST)
                .uri("/export")
                .insert_header(("x-api-key", key));
            statuses.push(test::call_service(&app, req.to_request()).await.status());
        }
        for token in BEARER_TOKENS {
            let bearer = format!("Bearer {token}");
            let req = from("203.0.113.10")
                .uri("/search")
                .insert_header(("authorization", bearer.as_str()));
            statuses.push(test::call_service(&app, req.to_request()).await.status());
        }
        for id in SESSIONS {
            let req = from("203.0.113.11")
                .uri("/session")
                .insert_header(("x-session", id));
            statuses.push(test::call_service(&app, req.to_request()).await.status());
        }
    }
    // Logins without a username count in the address's one budget for unreadable bodies,
    // and the rejection says so.
    for _ in 0..3 {
        let req = from("203.0.113.12")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .insert_header(("authorization", format!("Bearer {}", BEARER_TOKENS[0])))
            .set_payload(format!(r#"{{"password":"{}"}}"#, PASSWORDS[0]));
        statuses.push(test::call_service(&app, req.to_request()).await.status());
    }
    let allowed = statuses.iter().filter(|s| s.as_u16() == 200).count();
    let rejected = statuses.iter().filter(|s| s.as_u16() == 429).count();
    assert!(
        allowed > 0 && rejected > 0,
        "allowed {allowed}, rejected {rejected}"
    );

    let (keys, values) = stored(&server);
    println!(
        "{} keys, e.g. {:?}",
        keys.len(),
        keys.iter().take(3).collect::<Vec<_>>()
    );
    // Every identity got its own key, hashed.
    for part in [
        "|username:",
        "api_key:",
        "header:x-session:",
        "|ip:203.0.113.12|username:",
    ] {
        assert!(
            keys.iter().any(|k| k.contains(part)),
            "no key with `{part}`: {keys:?}"
        );
    }
    let usernames = keys
        .iter()
        .filter(|k| k.contains("|username:") && !k.contains("|ip:203.0.113.12|"))
        .count();
    assert_eq!(
        usernames, 8,
        "one log per canonical username and address: {keys:?}"
    );

    // A store outage, so the error path is logged too (fresh identities: not shielded).
    server.kill();
    let req = from("203.0.113.13")
        .method(actix_web::http::Method::POST)
        .uri("/export")
        .insert_header(("authorization", format!("Bearer {}", BEARER_TOKENS[1])));
    assert_eq!(
        test::call_service(&app, req.to_request()).await.status(),
        503
    );
    let json = serde_json::json!({ "username": "Zaphod.Beeblebrox.II", "password": PASSWORDS[1] });
    let req = from("203.0.113.14")
        .method(actix_web::http::Method::POST)
        .uri("/login")
        .insert_header(("content-type", "application/json"))
        .set_payload(json.to_string());
    assert_eq!(
        test::call_service(&app, req.to_request()).await.status(),
        503
    );

    let logs = captured.text();
    for expected in [
        "request rejected: rate limit exceeded",
        "request rejected by the flood shield",
        "rate-limit store error",
        "identity_fallback_from=username",
    ] {
        assert!(
            logs.contains(expected),
            "no `{expected}` in the logs:\n{logs}"
        );
    }
    let logs_lower = logs.to_lowercase();
    for secret in secrets() {
        for key in &keys {
            assert!(
                !key.to_lowercase().contains(&secret),
                "`{secret}` in the key `{key}`"
            );
        }
        for value in &values {
            assert!(
                !value.to_lowercase().contains(&secret),
                "`{secret}` in a stored value `{value}`"
            );
        }
        assert!(
            !logs_lower.contains(&secret),
            "`{secret}` leaked into the logs:\n{logs}"
        );
    }
    println!(
        "{} keys, {} stored values and {} log lines checked for {} secrets",
        keys.len(),
        values.len(),
        logs.lines().count(),
        secrets().len()
    );
}
