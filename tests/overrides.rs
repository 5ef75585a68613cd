//! Overrides at run time in one process, against a real Redis: a file re-read without a
//! restart (never half-written), the Redis hash, rules refused as a whole with the
//! attribute's messages, allow and deny lists (no store call either way), and tier limits
//! exact under concurrency in keys of their own.

mod support;

use ratelimit_runtime::settings::Identities;
use std::time::Duration;

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get,
    http::StatusCode,
    middleware::from_fn,
    test::{self, TestRequest},
    App, HttpMessage as _, HttpResponse,
};
use futures_util::future::join_all;
use ratelimit_runtime::{
    identity::{ApiKeySource, UserId},
    overrides::{api_key_fingerprint, Overrides, Source, Tier},
    rate_limit,
    store::RedisStore,
    Algorithm, FailMode, Identity, IdentityPart, Limit, RateLimiter, RoutePolicy, Window,
};
use redis::Commands as _;
use support::{replace_file, until, RedisServer};

#[rate_limit(limit = 100, window = "1m", identity = "ip", fail = "closed")]
#[get("/search")]
async fn search() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 100, window = "1m", identity = "user_id", fail = "closed")]
#[get("/reports")]
async fn reports() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Stand-in auth: `x-user` is the user id; a user named `pro-…` is on the `pro` tier.
async fn auth(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let user = req
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(user) = user {
        if user.starts_with("pro-") {
            req.extensions_mut().insert(Tier::new("pro"));
        }
        req.extensions_mut().insert(UserId(user));
    }
    next.call(req).await
}

async fn app(
    limiter: RateLimiter,
) -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(
        App::new()
            .service(search)
            .service(reports)
            .service(health)
            .wrap(limiter)
            .wrap(from_fn(auth)),
    )
    .await
}

async fn store(redis: &RedisServer) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

fn get(path: &str, ip: &str) -> TestRequest {
    TestRequest::get()
        .uri(path)
        .peer_addr(format!("{ip}:4000").parse().unwrap())
}

/// The statuses of `n` requests made one after another.
async fn statuses<S, B>(app: &S, n: usize, request: impl Fn() -> TestRequest) -> Vec<u16>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            test::call_service(app, request().to_request())
                .await
                .status()
                .as_u16(),
        );
    }
    out
}

/// A client described, and how to make its request.
type Case = (&'static str, Box<dyn Fn() -> TestRequest>);

fn limit_in_force(overrides: &Overrides, route: &str) -> Option<u32> {
    overrides
        .in_force()
        .into_iter()
        .find(|(s, _)| s.route == route && s.tier.is_none())
        .and_then(|(_, o)| Some(o.policy.limited()?.limits()[0].max()))
}

#[actix_web::test]
async fn a_file_override_reloads_without_a_restart_and_a_half_written_file_is_never_applied() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(
        &path,
        "[routes]\n\"GET /search\" = 'limit = 2, window = \"1m\"'\n",
    );
    let overrides = Overrides::new()
        .file(&path)
        .refresh(Duration::from_millis(50));
    let limiter = RateLimiter::new(store(&redis).await).overrides(overrides.clone());
    // Read before the App serves (the limiter waits for the first read), and checked against
    // its routes, which the App's limiter learns on its first request.
    assert!(overrides.refused().is_empty());
    let app = app(limiter).await;
    let seen = statuses(&app, 3, || get("/search", "203.0.113.1")).await;
    assert_eq!(seen, [200, 200, 429], "the file's limit of 2 holds");
    assert_eq!(limit_in_force(&overrides, "GET /search"), Some(2));
    let (_, first) = &overrides.in_force()[0];
    assert_eq!(first.source, Source::File);

    // A new limit (another window, so a fresh count) without a restart.
    replace_file(
        &path,
        "[routes]\n\"GET /search\" = 'limit = 4, window = \"2m\"'\n",
    );
    until(&overrides, "the new file", |o| {
        limit_in_force(o, "GET /search") == Some(4)
    })
    .await;
    let seen = statuses(&app, 5, || get("/search", "203.0.113.2")).await;
    assert_eq!(seen, [200, 200, 200, 200, 429]);

    // Written in place and caught half-way: never applied, whatever the reads see.
    let whole = "[routes]\n\"GET /search\" = 'limit = 6, window = \"3m\"'\n";
    std::fs::write(&path, &whole[..whole.len() - 12]).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        limit_in_force(&overrides, "GET /search"),
        Some(4),
        "the half-written file stays out"
    );
    let refused = overrides.refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].1[0].starts_with("not TOML"), "{refused:?}");
    std::fs::write(&path, whole).unwrap();
    until(&overrides, "the completed file", |o| {
        limit_in_force(o, "GET /search") == Some(6)
    })
    .await;
    assert!(overrides.refused().is_empty());

    // Removing the override restores the declared policy (100 per minute).
    replace_file(&path, "");
    until(&overrides, "no override", |o| o.in_force().is_empty()).await;
    let seen = statuses(&app, 10, || get("/search", "203.0.113.3")).await;
    assert!(seen.iter().all(|s| *s == 200), "{seen:?}");
}

#[actix_web::test]
async fn invalid_overrides_are_refused_whole_with_the_attributes_messages() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let _: () = conn
        .hset("rl:overrides", "GET /search", r#"limit = 2, window = "1m""#)
        .unwrap();
    let overrides = Overrides::new()
        .redis(redis.url())
        .refresh(Duration::from_millis(50));
    let limiter = RateLimiter::new(store(&redis).await).overrides(overrides.clone());
    let app = app(limiter).await;
    let seen = statuses(&app, 3, || get("/search", "203.0.113.1")).await;
    assert_eq!(seen, [200, 200, 429]);
    assert_eq!(overrides.in_force()[0].1.source, Source::Redis);

    for (field, value, message) in [
        ("GET /search", r#"limt = 5, window = "1m""#, "unknown key `limt`; expected one of `limit`, `window`, `identity`, `algorithm`, `fail`, `count`, `block`, `cost`, `cost_from`, `budget`, `concurrency`, `lease`, `wait`, `ban`, `sync`, `shadow`, `headers`, `enforce`, `tier`, `exempt`, `crate`; did you mean `limit`?"),
        ("GET /serch", r#"limit = 5, window = "1m""#, "`GET /serch` names no declared route of this App; did you mean `GET /search`?"),
        ("GET /search", r#"limit = 5, window = "40d""#, "31 days"),
        ("GET /health", r#"limit = 5, window = "1m""#, "`GET /health` is declared exempt"),
        ("GET /search", r#"limit = 5000, window = "1m", algorithm = "sliding_log""#, "sliding_log"),
    ] {
        // The valid rule stays beside the invalid one: the whole hash is refused.
        let _: () = conn.hset("rl:overrides", field, value).unwrap();
        let started = std::time::Instant::now();
        while overrides.refused().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(2), "{value}: not refused");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let refused = overrides.refused();
        assert_eq!(refused[0].0, Source::Redis);
        assert!(refused[0].1.iter().any(|m| m.contains(message)), "{value}: {refused:?}");
        assert_eq!(limit_in_force(&overrides, "GET /search"), Some(2), "{value}: the previous rules stay");
        // Put right again before the next case.
        let _: () = conn.del("rl:overrides").unwrap();
        let _: () = conn
            .hset("rl:overrides", "GET /search", r#"limit = 2, window = "1m""#)
            .unwrap();
        until(&overrides, "the valid hash again", |o| o.refused().is_empty()).await;
    }
    let seen = statuses(&app, 3, || get("/search", "203.0.113.9")).await;
    assert_eq!(seen, [200, 200, 429], "the valid override held throughout");

    // A refusal names every problem at once: the routes of the rules that read are checked
    // beside a rule that does not.
    let _: () = conn
        .hset("rl:overrides", "GET /search", "limt = 5")
        .unwrap();
    let _: () = conn
        .hset("rl:overrides", "GET /serch", r#"limit = 5, window = "1m""#)
        .unwrap();
    let _: () = conn
        .hset("rl:overrides", "GET /health", r#"limit = 5, window = "1m""#)
        .unwrap();
    until(&overrides, "the refusal", |o| !o.refused().is_empty()).await;
    let problems = &overrides.refused()[0].1;
    for named in [
        "limt",
        "`GET /serch` names no declared route",
        "`GET /health` is declared exempt",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(named)),
            "{named}: {problems:?}"
        );
    }
}

#[actix_web::test]
async fn allowed_and_denied_clients_of_every_kind_cost_no_store_call() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    // API keys are listed by fingerprint (no key secret here, as the limiter has none).
    let allowed_key = api_key_fingerprint("monitoring-key", None);
    let denied_key = api_key_fingerprint("stolen-key", None);
    replace_file(
        &path,
        &format!(
            r#"
        [routes]
        "GET /search" = 'limit = 1, window = "1m"'
        "GET /reports" = 'limit = 1, window = "1m"'
        [allow]
        ips = ["10.0.0.0/8", "2001:db8:aaaa::/48"]
        api_keys = ["{allowed_key}"]
        user_ids = ["ops-bot"]
        [deny]
        ips = ["203.0.113.0/24", "2001:db8:bad::/48", "10.6.6.6"]
        api_keys = ["{denied_key}"]
        user_ids = ["mallory"]
        "#
        ),
    );
    let overrides = Overrides::new()
        .file(&path)
        .refresh(Duration::from_millis(50));
    let limiter = RateLimiter::new(store(&redis).await)
        .identity(Identities::new().api_key(ApiKeySource::new("x-api-key", false)))
        .overrides(overrides.clone());
    let app = app(limiter).await;
    // The first request reads the routes; the overrides apply from it on.
    let _ = statuses(&app, 1, || get("/search", "198.51.100.200")).await;
    let before = redis.scripts_run();

    let cases: Vec<Case> = vec![
        ("ipv4 range", Box::new(|| get("/search", "10.1.2.3"))),
        (
            "ipv6 range",
            Box::new(|| get("/search", "[2001:db8:aaaa::7]")),
        ),
        (
            "api key",
            Box::new(|| {
                get("/search", "198.51.100.1").insert_header(("x-api-key", "monitoring-key"))
            }),
        ),
        (
            "user id",
            Box::new(|| get("/reports", "198.51.100.2").insert_header(("x-user", "ops-bot"))),
        ),
    ];
    for (what, request) in &cases {
        let seen = statuses(&app, 5, request).await;
        assert_eq!(seen, [200; 5], "allowed by {what}: never limited");
    }
    let denied: Vec<Case> = vec![
        ("ipv4 range", Box::new(|| get("/search", "203.0.113.50"))),
        (
            "ipv6 range",
            Box::new(|| get("/search", "[2001:db8:bad::1]")),
        ),
        (
            "one address, inside an allowed range",
            Box::new(|| get("/search", "10.6.6.6")),
        ),
        (
            "api key",
            Box::new(|| get("/search", "198.51.100.3").insert_header(("x-api-key", "stolen-key"))),
        ),
        (
            "user id",
            Box::new(|| get("/reports", "198.51.100.4").insert_header(("x-user", "mallory"))),
        ),
    ];
    for (what, request) in &denied {
        let response = test::call_service(&app, request().to_request()).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "denied by {what}");
        assert_eq!(
            response.headers().get("content-type").unwrap(),
            "application/problem+json"
        );
        let body = test::read_body(response).await;
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["status"], 403, "{what}");
        assert!(
            body["detail"].as_str().unwrap().contains("deny list"),
            "{what}: {body}"
        );
    }
    assert_eq!(
        redis.scripts_run(),
        before,
        "no store call for a listed client"
    );
    // A client on neither list is limited, by the override.
    let seen = statuses(&app, 2, || get("/search", "198.51.100.77")).await;
    assert_eq!(seen, [200, 429]);
    assert_eq!(redis.scripts_run(), before + 2);
}

#[actix_web::test]
async fn tier_limits_are_exact_under_concurrency_and_keyed_apart() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(
        &path,
        "[routes]\n'GET /reports tier \"pro\"' = 'limit = 7, window = \"1m\"'\n\"GET /reports\" = 'limit = 3, window = \"1m\"'\n",
    );
    // No route declares limits for `pro`: the tier is listed for overrides to name.
    let overrides = Overrides::new().file(&path).tiers(["pro"]);
    let limiter = RateLimiter::new(store(&redis).await).overrides(overrides.clone());
    let app = app(limiter.clone()).await;
    // 50 concurrent requests of one pro user: exactly 7 pass.
    let pro = join_all((0..50).map(|_| {
        test::call_service(
            &app,
            get("/reports", "198.51.100.1")
                .insert_header(("x-user", "pro-ann"))
                .to_request(),
        )
    }))
    .await;
    let passed = pro.iter().filter(|r| r.status() == StatusCode::OK).count();
    assert_eq!(passed, 7, "the pro tier's limit, exactly");
    assert!(pro.iter().all(|r| matches!(r.status().as_u16(), 200 | 429)));
    // A user without a tier gets the route's override, in its own key.
    let plain = join_all((0..20).map(|_| {
        test::call_service(
            &app,
            get("/reports", "198.51.100.1")
                .insert_header(("x-user", "bob"))
                .to_request(),
        )
    }))
    .await;
    assert_eq!(
        plain
            .iter()
            .filter(|r| r.status() == StatusCode::OK)
            .count(),
        3
    );
    let keys: Vec<String> = redis.connection().keys("rl:*").unwrap();
    assert!(keys.iter().any(|k| k.contains("|tier.pro|")), "{keys:?}");
    assert!(keys.iter().any(|k| !k.contains("tier.")), "{keys:?}");
    // A reset by user id clears the user's budget in the tier's keys too: the app that
    // resets does not know the tier.
    let pro_ann = || {
        get("/reports", "198.51.100.1")
            .insert_header(("x-user", "pro-ann"))
            .to_request()
    };
    assert_eq!(test::call_service(&app, pro_ann()).await.status(), 429);
    limiter
        .reset("GET /reports", &[(IdentityPart::UserId, "pro-ann")])
        .await
        .unwrap();
    assert_eq!(test::call_service(&app, pro_ann()).await.status(), 200);
}

/// A tier whose override counts another identity than the route's is reset by that
/// identity, which the route's own limits do not count by.
#[actix_web::test]
async fn a_tier_counting_another_identity_is_reset_by_it() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(
        &path,
        "[routes]\n'GET /reports tier \"pro\"' = 'limit = 2, window = \"1m\", identity = \"ip\"'\n",
    );
    let overrides = Overrides::new().file(&path).tiers(["pro"]);
    let limiter = RateLimiter::new(store(&redis).await).overrides(overrides);
    let app = app(limiter.clone()).await;
    let pro_ann = || {
        get("/reports", "198.51.100.1")
            .insert_header(("x-user", "pro-ann"))
            .to_request()
    };
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(test::call_service(&app, pro_ann()).await.status().as_u16());
    }
    assert_eq!(seen, [200, 200, 429]);
    limiter
        .reset("GET /reports", &[(IdentityPart::Ip, "198.51.100.1")])
        .await
        .unwrap();
    assert_eq!(test::call_service(&app, pro_ann()).await.status(), 200);
}

#[actix_web::test]
async fn an_app_without_overrides_makes_no_other_redis_call() {
    let redis = RedisServer::start();
    let app = app(RateLimiter::new(store(&redis).await)).await;
    let seen = statuses(&app, 5, || get("/search", "203.0.113.1")).await;
    assert_eq!(seen, [200; 5]);
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.connection())
        .unwrap();
    assert!(!info.contains("cmdstat_hgetall"), "{info}");
    // One script per request (the first may be sent again as EVAL after NOSCRIPT).
    let scripts = redis.scripts_run();
    assert!(
        (5..=6).contains(&scripts),
        "{scripts} scripts for 5 requests: {info}"
    );
}

#[actix_web::test]
async fn a_clients_state_is_read_without_counting_under_the_policy_in_force() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(
        &path,
        "[routes]\n\"GET /search\" = 'limit = 4, window = \"1m\", algorithm = \"gcra\"'\n",
    );
    let limiter = RateLimiter::new(store(&redis).await).overrides(Overrides::new().file(&path));
    let app = app(limiter.clone()).await;
    let seen = statuses(&app, 2, || get("/search", "203.0.113.1")).await;
    assert_eq!(seen, [200, 200]);
    let client = [(ratelimit_runtime::IdentityPart::Ip, "203.0.113.1")];
    for _ in 0..3 {
        let states = limiter.state("GET /search", &client).await.unwrap();
        assert_eq!(states.len(), 1);
        assert_eq!(states[0].limit.max(), 4, "the override's limit");
        assert!(states[0].allowed);
        assert_eq!(states[0].remaining, 1, "two spent, one left after the next");
    }
    let seen = statuses(&app, 3, || get("/search", "203.0.113.1")).await;
    assert_eq!(seen, [200, 200, 429], "peeking counted nothing");
    let states = limiter.state("GET /search", &client).await.unwrap();
    assert!(!states[0].allowed && states[0].retry_after > Duration::ZERO);
    limiter.reset("GET /search", &client).await.unwrap();
    assert_eq!(
        statuses(&app, 1, || get("/search", "203.0.113.1")).await,
        [200],
        "reset under the override"
    );
    // The memory store shows a budget too, counting nothing.
    const ONE: &[Limit] = &[Limit::new(1, Window::from_secs(1), Algorithm::Gcra)];
    let policy = RoutePolicy::new(ONE, Identity::UserIdElseIp, FailMode::Open, false);
    let memory = RateLimiter::new(ratelimit_runtime::store::MemoryStore::new());
    for _ in 0..2 {
        let states = memory
            .state_under("GET /search", policy, None, &client)
            .await
            .unwrap();
        assert!(states[0].allowed && states[0].remaining == 0, "{states:?}");
    }
}
