//! Tiers in the attribute (`#[rate_limit(tier = "pro", ..)]`): a request whose `Tier` the
//! route declares counts under that tier's stack, in keys of its own (`|tier.pro`); every
//! other request under the route's default, over a real Redis and the memory store. An
//! override for a tier replaces its declared stack (counting on where the declared limit
//! counted), a route's override keeps to the default, an override naming a tier the App
//! does not know is refused with a suggestion, the route table lists each tier's policy,
//! and `ratelimit-admin` sees the declared tiers the services publish. Time is injected.

mod support;

use std::{process::Command, time::Duration};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceRequest, ServiceResponse},
    get,
    middleware::{from_fn, Next},
    test::{self, TestRequest},
    App, HttpMessage as _, HttpResponse,
};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage::{self, AppFactory},
    identity::UserId,
    overrides::{Overrides, Source, Tier},
    rate_limit, registry,
    store::{MemoryStore, RedisStore},
    IdentityPart, Policy, RateLimiter,
};
use redis::Commands as _;
use support::{admin_command, replace_file, until, RedisServer, T0};

/// Free users: 2 a minute by user id. Pro: 5 a minute and 7 an hour (a stacked tier), by the
/// route's identity. Team: 3 a minute, by address.
#[rate_limit(limit = 2, window = "1m", identity = "user_id")]
#[rate_limit(tier = "pro", limit = 5, window = "1m")]
#[rate_limit(tier = "pro", limit = 7, window = "1h")]
#[rate_limit(tier = "team", limit = 3, window = "1m", identity = "ip")]
#[get("/search")]
async fn search() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 10, window = "1m", identity = "user_id")]
#[rate_limit(tier = "pro", limit = 20, window = "1m")]
#[get("/reports")]
async fn reports() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// A tier written wrong in one attribute: `por` for `pro`.
#[rate_limit(limit = 10, window = "1m", identity = "user_id")]
#[rate_limit(tier = "por", limit = 20, window = "1m")]
#[get("/exports")]
async fn exports() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Stand-in auth: `x-user` is the user id, `x-tier` the user's tier.
async fn auth(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(user) = header("x-user") {
        req.extensions_mut().insert(UserId(user));
    }
    if let Some(tier) = header("x-tier") {
        req.extensions_mut().insert(Tier::new(&tier));
    }
    next.call(req).await
}

fn routes(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .service(search)
        .service(reports)
        .wrap(limiter)
        .wrap(from_fn(auth))
}

async fn app(
    limiter: RateLimiter,
) -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(routes(limiter)).await
}

/// A request of `user` (of `tier`, if any) from `ip`.
fn search_by(user: &str, tier: Option<&str>, ip: &str) -> TestRequest {
    let mut req = TestRequest::get()
        .uri("/search")
        .peer_addr(format!("{ip}:4000").parse().unwrap())
        .insert_header(("x-user", user));
    if let Some(tier) = tier {
        req = req.insert_header(("x-tier", tier));
    }
    req
}

/// The statuses of `n` requests made one after another, and the last one's
/// `X-RateLimit-Limit`.
async fn statuses<S, B>(
    app: &S,
    n: usize,
    request: impl Fn() -> TestRequest,
) -> (Vec<u16>, Option<String>)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let mut out = Vec::new();
    let mut limit = None;
    for _ in 0..n {
        let res = test::call_service(app, request().to_request()).await;
        out.push(res.status().as_u16());
        limit = res
            .headers()
            .get("x-ratelimit-limit")
            .map(|v| v.to_str().unwrap().to_owned());
    }
    (out, limit)
}

/// A pro user counts under the pro stack (its binding limit in the headers), a user of no
/// tier or of a tier the route does not declare under the default, each in keys of their
/// own; `keys` lists the store's keys. A reset by user id clears the pro budget too.
async fn tiers_count_apart<S, B>(app: &S, limiter: &RateLimiter, keys: impl Fn() -> Vec<String>)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    // Pro: 5 a minute, by user id (the route's identity), whatever the address.
    let (seen, limit) = statuses(app, 5, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200; 5]);
    assert_eq!(limit.as_deref(), Some("5"), "the pro stack's binding limit");
    let (seen, _) = statuses(app, 1, || search_by("ann", Some("pro"), "198.51.100.2")).await;
    assert_eq!(
        seen,
        [429],
        "ann's sixth request this minute, from another address"
    );
    // The same user id without a tier: the default's own budget of 2.
    let (seen, limit) = statuses(app, 3, || search_by("ann", None, "198.51.100.1")).await;
    assert_eq!(seen, [200, 200, 429]);
    assert_eq!(limit.as_deref(), Some("2"));
    // A tier the route gives no limits of its own counts under the default, in its keys.
    let (seen, _) = statuses(app, 3, || {
        search_by("cid", Some("enterprise"), "198.51.100.3")
    })
    .await;
    assert_eq!(seen, [200, 200, 429]);
    let (seen, _) = statuses(app, 1, || search_by("cid", None, "198.51.100.3")).await;
    assert_eq!(seen, [429], "the enterprise user spent the default budget");
    // Team counts by address, as its declaration says: two users at one address share it.
    let (seen, _) = statuses(app, 2, || search_by("dee", Some("team"), "203.0.113.9")).await;
    assert_eq!(seen, [200, 200]);
    let (seen, limit) = statuses(app, 2, || search_by("eve", Some("team"), "203.0.113.9")).await;
    assert_eq!(seen, [200, 429]);
    assert_eq!(limit.as_deref(), Some("3"));

    let keys = keys();
    let pro: Vec<&String> = keys.iter().filter(|k| k.contains("|tier.pro")).collect();
    let team: Vec<&String> = keys.iter().filter(|k| k.contains("|tier.team")).collect();
    let plain: Vec<&String> = keys.iter().filter(|k| !k.contains("|tier.")).collect();
    assert!(
        !pro.is_empty() && !team.is_empty() && !plain.is_empty(),
        "{keys:?}"
    );
    assert!(pro.iter().all(|k| k.contains("user_id:")), "{keys:?}");
    assert!(team.iter().all(|k| k.contains("ip:")), "{keys:?}");
    assert!(
        !keys.iter().any(|k| k.contains("tier.enterprise")),
        "{keys:?}"
    );

    // A reset names no tier: it clears the user's budget in every declared tier's keys.
    limiter
        .reset("GET /search", &[(IdentityPart::UserId, "ann")])
        .await
        .unwrap();
    let (seen, _) = statuses(app, 1, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200], "the pro budget was reset");
    let (seen, _) = statuses(app, 1, || search_by("ann", None, "198.51.100.1")).await;
    assert_eq!(seen, [200], "the default budget was reset");
}

async fn redis_store(redis: &RedisServer) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

#[actix_web::test]
async fn a_pro_request_counts_under_the_pro_stack_and_others_under_the_default_over_redis() {
    let redis = RedisServer::start();
    let clock = ManualClock::at(T0 + 1_000);
    let limiter = RateLimiter::new(redis_store(&redis).await).clock(clock);
    let app = app(limiter.clone()).await;
    let keys = || -> Vec<String> { redis.connection().keys("rl:*").unwrap() };
    tiers_count_apart(&app, &limiter, keys).await;
}

#[actix_web::test]
async fn a_pro_request_counts_under_the_pro_stack_and_others_under_the_default_in_memory() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let clock = ManualClock::at(T0 + 1_000);
    let limiter = RateLimiter::from_arc(store.clone()).clock(clock);
    let app = app(limiter.clone()).await;
    let keys = || store.entries().into_iter().map(|(key, _)| key).collect();
    tiers_count_apart(&app, &limiter, keys).await;
}

#[actix_web::test]
async fn the_stacked_tier_limit_holds_when_the_minute_limit_has_room_again() {
    let clock = ManualClock::at(T0 + 1_000);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = app(limiter).await;
    let pro = || search_by("ann", Some("pro"), "198.51.100.1");
    assert_eq!(
        statuses(&app, 6, pro).await.0,
        [200, 200, 200, 200, 200, 429]
    );
    // Two minutes later the 5-a-minute limit is whole again (a sliding window still weighs
    // the minute before); the 7-an-hour one has 2 left.
    clock.advance(Duration::from_secs(121));
    let (seen, limit) = statuses(&app, 3, pro).await;
    assert_eq!(seen, [200, 200, 429]);
    assert_eq!(limit.as_deref(), Some("7"), "the hour's limit binds");
}

#[actix_web::test]
async fn an_override_for_a_tier_replaces_its_declared_stack_and_a_routes_keeps_to_the_default() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(&path, "");
    let overrides = Overrides::new()
        .file(&path)
        .refresh(Duration::from_millis(50));
    let clock = ManualClock::at(T0 + 1_000);
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(clock.clone())
        .overrides(overrides.clone());
    let app = app(limiter).await;
    let pro = || search_by("ann", Some("pro"), "198.51.100.1");
    assert_eq!(
        statuses(&app, 2, pro).await.0,
        [200, 200],
        "2 of the declared 5"
    );

    // Pro's override keeps the declared minute and algorithm: it counts on in the declared
    // pro limit's key, where 2 are spent. The route's override changes the default only.
    replace_file(
        &path,
        "[routes]\n'GET /search tier \"pro\"' = 'limit = 3, window = \"1m\"'\n\"GET /search\" = 'limit = 4, window = \"1m\"'\n",
    );
    until(&overrides, "both overrides", |o| o.in_force().len() == 2).await;
    let (seen, limit) = statuses(&app, 2, pro).await;
    assert_eq!(
        seen,
        [200, 429],
        "the override's 3, counted on from the declared 2"
    );
    assert_eq!(limit.as_deref(), Some("3"));
    let (seen, _) = statuses(&app, 5, || search_by("bob", None, "198.51.100.5")).await;
    assert_eq!(seen, [200, 200, 200, 200, 429], "the route's override of 4");
    let (seen, limit) = statuses(&app, 4, || search_by("dee", Some("team"), "203.0.113.9")).await;
    assert_eq!(seen, [200, 200, 200, 429], "team keeps its declared 3");
    assert_eq!(limit.as_deref(), Some("3"));
    let keys: Vec<String> = redis.connection().keys("rl:*|tier.pro|*").unwrap();
    assert!(!keys.is_empty(), "the override counts in the tier's keys");
    // This instance remembers a refusal at most a second before asking the store again.
    clock.advance(Duration::from_millis(1_100));

    // The tier's override cleared: the declared pro stack again, in the same keys.
    replace_file(
        &path,
        "[routes]\n\"GET /search\" = 'limit = 4, window = \"1m\"'\n",
    );
    until(&overrides, "the route's override alone", |o| {
        o.in_force().len() == 1
    })
    .await;
    let (seen, limit) = statuses(&app, 3, pro).await;
    assert_eq!(seen, [200, 200, 429], "3 spent of the declared 5");
    assert_eq!(limit.as_deref(), Some("5"));
}

#[actix_web::test]
async fn an_override_naming_a_tier_the_app_does_not_know_is_refused_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    replace_file(
        &path,
        "[routes]\n'GET /search tier \"por\"' = 'limit = 1, window = \"1m\"'\n",
    );
    let overrides = Overrides::new()
        .file(&path)
        .refresh(Duration::from_millis(50))
        .tiers(["enterprise"]);
    let limiter = RateLimiter::new(MemoryStore::new()).overrides(overrides.clone());
    let app = app(limiter).await;
    // The App's routes (and so its tiers) are known from its first request.
    let (seen, _) = statuses(&app, 1, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200]);
    until(&overrides, "the refusal", |o| !o.refused().is_empty()).await;
    let refused = overrides.refused();
    assert_eq!(refused[0].0, Source::File);
    assert_eq!(
        refused[0].1,
        ["`GET /search tier \"por\"` names tier `por`, which no declaration of this App and no `Overrides::tiers` names; did you mean `pro`?; its tiers are `enterprise`, `pro`, `team`"],
    );
    assert!(overrides.in_force().is_empty());
    // The declared pro stack holds: 5 a minute.
    let (seen, _) = statuses(&app, 5, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200, 200, 200, 200, 429]);

    // A tier `Overrides::tiers` lists is taken, though no route declares it: its requests
    // count in its keys, under the override.
    replace_file(
        &path,
        "[routes]\n'GET /search tier \"enterprise\"' = 'limit = 1, window = \"1m\"'\n",
    );
    until(&overrides, "the listed tier's override", |o| {
        o.in_force().len() == 1
    })
    .await;
    let (seen, _) = statuses(&app, 2, || {
        search_by("cid", Some("enterprise"), "198.51.100.3")
    })
    .await;
    assert_eq!(seen, [200, 429]);

    // A name that cannot be a tier is a refused setting.
    let bad = RateLimiter::new(MemoryStore::new()).overrides(Overrides::new().tiers(["Gold"]));
    let error = bad.check_settings().unwrap_err().to_string();
    assert!(
        error.contains("`Overrides::tiers(..)`: tier `Gold` must be 1 to 32 of lower-case letters"),
        "{error}"
    );
}

#[actix_web::test]
async fn the_route_table_lists_each_tiers_policy_and_warns_of_a_tier_named_once() {
    let table = coverage::require_coverage(routes(RateLimiter::new(MemoryStore::new())))
        .await
        .unwrap();
    let text = table.to_text();
    let line = text.lines().find(|l| l.contains("/search")).unwrap();
    assert!(
        line.contains("tier pro: 5/1m sliding_window + 7/1h sliding_window (declared); tier team: 3/1m sliding_window by ip (declared)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&table.to_json()).unwrap();
    let row = json["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pattern"] == "/search")
        .unwrap();
    assert_eq!(row["limits"][0]["limit"], 2, "the default's");
    let pro = &row["tiers"]["pro"];
    assert_eq!(pro["source"], "declared");
    assert_eq!(pro["limits"][0]["limit"], 5);
    assert_eq!(pro["limits"][1]["window"], "1h");
    assert_eq!(pro["identity"], "user_id");
    assert!(pro["policy"]
        .as_str()
        .unwrap()
        .starts_with("limit = 5, window = \"1m\""));
    assert_eq!(row["tiers"]["team"]["identity"], "ip");
    let warnings = table.warnings();
    assert!(
        !warnings.iter().any(|w| w.starts_with("tier ")),
        "{warnings:?}"
    );

    // The API sees the same tiers.
    let declared = registry::declarations()
        .find(|d| d.function() == "search")
        .unwrap();
    let names: Vec<&str> = declared
        .policy()
        .limited()
        .unwrap()
        .tiers()
        .iter()
        .map(|t| t.name())
        .collect();
    assert_eq!(names, ["pro", "team"]);
    let free = declared.policy().for_tier("enterprise").unwrap();
    assert_eq!(free.limits()[0].max(), 2);

    // A tier one route names while others name a close one is a warning, not a refusal.
    let misspelled = App::new()
        .service(search)
        .service(reports)
        .service(exports)
        .wrap(RateLimiter::new(MemoryStore::new()));
    let table = coverage::require_coverage(misspelled).await.unwrap();
    let warnings = table.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("tier `por` is named by `tiers::exports` (tests/tiers.rs:")
            && warnings[0].contains("and `pro` by 2 other routes: did you mean `pro`?"),
        "{warnings:?}"
    );
}

/// `ratelimit-admin` with `args` on `redis`.
fn admin(redis: &RedisServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(admin_command())
        .env_remove("REDIS_CLUSTER_NODES")
        .env_remove("REDIS_SENTINEL_NODES")
        .env_remove("RATELIMIT_KEY_SECRET")
        .env_remove("RATELIMIT_OVERRIDES_FILE")
        .env("REDIS_URL", redis.url())
        .args(args)
        .output()
        .expect("run ratelimit-admin");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[actix_web::test]
async fn the_admin_command_sees_the_declared_tiers_the_services_publish() {
    // Built before the requests: the budgets read below run on Redis's clock in a 1-minute
    // window, so the command must not spend that time compiling in between.
    admin_command();
    let redis = RedisServer::start();
    let overrides = Overrides::new()
        .redis(redis.url())
        .refresh(Duration::from_millis(50));
    let limiter = RateLimiter::new(redis_store(&redis).await).overrides(overrides.clone());
    let app = app(limiter).await;
    let (seen, _) = statuses(&app, 3, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200; 3]);
    let mut published = String::new();
    for _ in 0..100 {
        published = redis
            .connection()
            .hget("rl:overrides:routes", "GET /search tier \"pro\"")
            .unwrap_or_default();
        if !published.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        published.starts_with("limit = 5, window = \"1m\""),
        "{published}"
    );
    let tiers: String = redis
        .connection()
        .hget("rl:overrides:routes", "tiers")
        .unwrap();
    assert_eq!(tiers, "pro team");

    let (ok, out, err) = admin(&redis, &["routes"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("GET /search\n  declared: limit = 2, window = \"1m\"")
            && out.contains("  tier pro (declared): limit = 5, window = \"1m\""),
        "{out}"
    );
    assert!(
        !out.contains("\ntiers\n"),
        "the tiers field is no route: {out}"
    );
    // The client's pro budget, in the tier's keys: 3 of 5 spent this minute.
    let (ok, out, err) = admin(
        &redis,
        &["state", "GET /search", "--user-id", "ann", "--tier", "pro"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("5 per 1m (sliding_window): count 3, remaining 2"),
        "{out}"
    );
    // A tier the services do not know is refused, as the services would refuse it.
    let (ok, _, err) = admin(
        &redis,
        &[
            "override",
            "set",
            "GET /search",
            "limit = 9, window = \"1m\"",
            "--tier",
            "por",
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("names tier `por`") && err.contains("did you mean `pro`?"),
        "{err}"
    );
    // An override of the pro tier is written, and in force within a refresh.
    let (ok, _, err) = admin(
        &redis,
        &[
            "override",
            "set",
            "GET /search",
            "limit = 4, window = \"1m\"; limit = 7, window = \"1h\"",
            "--tier",
            "pro",
        ],
    );
    assert!(ok, "{err}");
    until(&overrides, "the tier's override", |o| {
        o.in_force().len() == 1
    })
    .await;
    let (seen, _) = statuses(&app, 2, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200, 429], "the override's 4, counted on from 3");
    let (ok, _, err) = admin(
        &redis,
        &["reset", "GET /search", "--user-id", "ann", "--tier", "pro"],
    );
    assert!(ok, "{err}");
    // The service remembers its refusal at most a second before asking the store again.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (seen, _) = statuses(&app, 1, || search_by("ann", Some("pro"), "198.51.100.1")).await;
    assert_eq!(seen, [200], "reset in the tier's keys");
    assert!(matches!(
        overrides.in_force()[0].1.policy,
        Policy::Limited(p) if p.limits()[0].max() == 4
    ));
}
