//! Rolling a limiter out: builder routes declared in code (`RateLimiter::declare`), counted
//! as declared and refused at startup when wrong; the App's shadow switch, a route's
//! `enforce` and an override's; the default policy in shadow; and the warning for
//! forwarding headers no trusted proxy reads. Against a real Redis where a decision is
//! the proof.

mod support;

use std::{sync::OnceLock, time::Duration};

use actix_service::{IntoServiceFactory as _, ServiceFactory as _};
use actix_web::{
    dev::{AppConfig, Service, ServiceResponse},
    get,
    http::StatusCode,
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use metrics_util::{
    debugging::{DebugValue, DebuggingRecorder, Snapshotter},
    MetricKind,
};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage::{self, AppFactory},
    identity::TrustedProxies,
    overrides::{Overrides, Source},
    rate_limit,
    settings::{Failure, Identities, Keys, Undeclared},
    store::{MemoryStore, RedisStore},
    Algorithm, Limit, RateLimiter, Window,
};
use support::{CapturedLog, Down, RedisServer, T0};

#[rate_limit(limit = 1, window = "1m", identity = "ip", fail = "closed")]
#[get("/rollout/follows")]
async fn follows() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(
    limit = 1,
    window = "1m",
    identity = "ip",
    fail = "closed",
    enforce = true
)]
#[get("/rollout/enforced")]
async fn enforced() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 1, window = "1m", identity = "ip", enforce = false)]
#[get("/rollout/trial")]
async fn trial() -> HttpResponse {
    HttpResponse::Ok().finish()
}

async fn legacy() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// An App with a builder route, the attribute routes above, and `limiter` wrapping it.
fn app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .wrap(limiter)
        .service(follows)
        .service(enforced)
        .service(trial)
        .service(web::resource("/legacy/{id}").route(web::get().to(legacy)))
        .route("/undeclared", web::get().to(legacy))
}

async fn redis_store(redis: &RedisServer) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

fn get(path: &str) -> actix_http::Request {
    TestRequest::get()
        .uri(path)
        .peer_addr("203.0.113.9:4000".parse().unwrap())
        .to_request()
}

/// The statuses of `n` requests to `path`, one after another.
async fn statuses<S, B>(app: &S, n: usize, path: &str) -> Vec<u16>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(test::call_service(app, get(path)).await.status().as_u16());
    }
    out
}

/// Whether `app` starts: its service built, or the error its middleware refused with.
async fn starts(app: App<impl AppFactory>) -> bool {
    app.into_factory()
        .new_service(AppConfig::default())
        .await
        .is_ok()
}

/// The metrics recorder of this test binary, installed once.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        snapshotter
    })
}

/// What the recorder holds (a snapshot drains it; only one test reads metrics).
type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// `ratelimit_decisions_total` of `route` with `decision` in `snapshot`.
fn decisions(snapshot: &Snapshot, route: &str, decision: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            key.kind() == MetricKind::Counter
                && key.key().name() == "ratelimit_decisions_total"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "route" && l.value() == route)
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "decision" && l.value() == decision)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[actix_web::test]
async fn a_builder_route_declared_in_code_is_limited_and_counted_as_declared() {
    let redis = RedisServer::start();
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(ManualClock::at(T0))
        .declare(
            "GET /legacy/{id}",
            r#"limit = 2, window = "1m", identity = "ip""#,
        )
        .declare("GET /undeclared", r#"exempt = "served by the CDN""#);
    // The coverage check sees the limiter's declarations: every route is covered.
    let table = coverage::require_coverage(app(limiter.clone()))
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let row = |pattern: &str| {
        table
            .routes
            .iter()
            .find(|r| r.pattern == pattern)
            .unwrap_or_else(|| panic!("no row for {pattern}"))
    };
    assert_eq!(row("/legacy/{id}").source(), Some(Source::Code));
    assert_eq!(row("/undeclared").source(), Some(Source::Code));
    assert_eq!(row("/rollout/follows").source(), Some(Source::Declared));
    let text = table.to_text();
    let legacy_line = text.lines().find(|l| l.contains("/legacy/{id}")).unwrap();
    assert!(
        legacy_line.contains("2/1m sliding_window") && legacy_line.contains("code"),
        "{text}"
    );
    // Without the limiter, the builder routes are uncovered.
    let bare = coverage::require_coverage(
        App::new().service(web::resource("/legacy/{id}").route(web::get().to(legacy))),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        bare.contains("RateLimiter::declare(\"GET /legacy/{id}\""),
        "the hint names the way: {bare}"
    );

    let service = test::init_service(app(limiter)).await;
    let first = test::call_service(&service, get("/legacy/7")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers().get("x-ratelimit-limit").unwrap(), "2");
    assert_eq!(statuses(&service, 2, "/legacy/8").await, [200, 429]);
    // One pattern, one budget; counted in Redis under the route's pattern.
    let mut conn = redis.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rl:{GET:/legacy/:id*")
        .query(&mut conn)
        .unwrap();
    assert!(!keys.is_empty(), "counted in Redis: {keys:?}");
    // The exempt one passes without a count.
    assert_eq!(statuses(&service, 5, "/undeclared").await, [200; 5]);
}

#[actix_web::test]
async fn a_bad_declaration_in_code_refuses_startup_naming_the_setting() {
    let log = CapturedLog::start(tracing::Level::ERROR);
    let bad_text = RateLimiter::new(MemoryStore::new())
        .declare("GET /legacy/{id}", r#"limt = 10, window = "1m""#);
    let error = coverage::require_coverage(app(bad_text.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`RateLimiter::declare(\"GET /legacy/{id}\", ..)`: unknown key `limt`")
            && error.contains("did you mean `limit`?"),
        "{error}"
    );
    assert!(!starts(app(bad_text)).await, "a bad text refuses to start");
    assert!(log.text().contains("unknown key `limt`"), "{}", log.text());

    // A route the App does not serve: the check names it, and the limiter it ran with
    // refuses to start after it.
    let unknown = RateLimiter::new(MemoryStore::new())
        .declare("GET /legacy/{id}", r#"limit = 10, window = "1m""#)
        .declare("GET /legacy/{name}/x", r#"limit = 10, window = "1m""#)
        .declare("POST /legacy/{id}", r#"limit = 10, window = "1m""#)
        .declare("GET /rollout/follows", r#"limit = 10, window = "1m""#);
    assert!(
        starts(app(unknown.clone())).await,
        "not known before the App's routes are"
    );
    let error = coverage::require_coverage(app(unknown.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("the App serves no route `/legacy/{name}/x`"),
        "{error}"
    );
    assert!(
        error.contains("`/legacy/{id}` is not served with `POST`; it answers `GET`"),
        "{error}"
    );
    assert!(
        error.contains("carries `#[rate_limit]` on `rollout::follows` already"),
        "{error}"
    );
    assert!(!starts(app(unknown)).await);
    // Well formed, and the limiter starts.
    let good = RateLimiter::new(MemoryStore::new())
        .declare("GET /legacy/{id}", r#"limit = 10, window = "1m""#)
        .declare("GET /undeclared", r#"limit = 10, window = "1m""#);
    coverage::require_coverage(app(good.clone())).await.unwrap();
    assert!(starts(app(good)).await);
}

#[actix_web::test]
async fn in_shadow_requests_over_the_limit_pass_counted_and_logged_and_enforce_true_refuses() {
    snapshotter();
    let log = CapturedLog::start(tracing::Level::INFO);
    let redis = RedisServer::start();
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(ManualClock::at(T0))
        .shadow(true)
        .declare(
            "GET /legacy/{id}",
            r#"limit = 1, window = "1m", identity = "ip""#,
        );
    let service = test::init_service(app(limiter)).await;
    // A forgotten switch is not silent: the App says at startup that it refuses nothing.
    assert!(
        log.text().contains("the App is in shadow"),
        "{}",
        log.text()
    );
    let shadowed = test::call_service(&service, get("/rollout/follows")).await;
    assert!(
        !shadowed.headers().contains_key("x-ratelimit-limit"),
        "no headers in shadow"
    );
    assert_eq!(statuses(&service, 2, "/rollout/follows").await, [200, 200]);
    assert_eq!(statuses(&service, 3, "/legacy/1").await, [200, 200, 200]);
    // `enforce = true` refuses while the App is in shadow.
    assert_eq!(statuses(&service, 2, "/rollout/enforced").await, [200, 429]);
    // The would-be refusals, in the metric and the log; the store was asked every time.
    let snapshot = snapshotter().snapshot().into_vec();
    assert_eq!(
        decisions(&snapshot, "GET /rollout/follows", "shadow_rejected"),
        2
    );
    assert_eq!(decisions(&snapshot, "GET /rollout/follows", "allowed"), 1);
    assert_eq!(
        decisions(&snapshot, "GET /legacy/{id}", "shadow_rejected"),
        2
    );
    assert_eq!(decisions(&snapshot, "GET /rollout/enforced", "rejected"), 1);
    let text = log.text();
    let would_be = text
        .lines()
        .filter(|l| l.contains("shadow limit exceeded") && l.contains("GET /rollout/follows"))
        .count();
    assert_eq!(would_be, 2, "{text}");
    assert!(redis.scripts_run() >= 8, "every request asked the store");

    // `enforce = false` only logs while the App enforces.
    let limiter = RateLimiter::new(redis_store(&redis).await).clock(ManualClock::at(T0 + 120_000));
    let service = test::init_service(app(limiter)).await;
    assert_eq!(
        statuses(&service, 3, "/rollout/trial").await,
        [200, 200, 200]
    );
    assert_eq!(statuses(&service, 2, "/rollout/follows").await, [200, 429]);
}

#[actix_web::test]
async fn an_override_sets_enforce_on_a_route() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    std::fs::write(
        &path,
        "[routes]\n\"GET /rollout/follows\" = 'limit = 1, window = \"1m\", identity = \"ip\", enforce = true'\n\"GET /rollout/enforced\" = 'limit = 1, window = \"1m\", identity = \"ip\", enforce = false'\n\"GET /legacy/{id}\" = 'limit = 1, window = \"1m\", identity = \"ip\", enforce = true'\n",
    )
    .unwrap();
    let overrides = Overrides::new().file(&path);
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(ManualClock::at(T0))
        .shadow(true)
        .declare(
            "GET /legacy/{id}",
            r#"limit = 1, window = "1m", identity = "ip""#,
        )
        .overrides(overrides.clone());
    let service = test::init_service(app(limiter)).await;
    // Flipped on where the App is in shadow, off where the route said `enforce = true`.
    assert_eq!(statuses(&service, 2, "/rollout/follows").await, [200, 429]);
    assert_eq!(
        statuses(&service, 3, "/rollout/enforced").await,
        [200, 200, 200]
    );
    // A declaration in code takes overrides by its name too.
    assert_eq!(statuses(&service, 2, "/legacy/3").await, [200, 429]);
    assert!(overrides.refused().is_empty(), "{:?}", overrides.refused());
}

#[actix_web::test]
async fn the_default_policy_can_be_shadowed() {
    let one_per_minute = || vec![Limit::new(1, Window::from_secs(60), Algorithm::SlidingLog)];
    let enforcing =
        RateLimiter::new(MemoryStore::new()).undeclared(Undeclared::new().limits(one_per_minute()));
    let service = test::init_service(app(enforcing)).await;
    assert_eq!(statuses(&service, 2, "/undeclared").await, [200, 429]);

    for limiter in [
        // Undeclared routes stay in shadow while declared ones enforce.
        RateLimiter::new(MemoryStore::new())
            .undeclared(Undeclared::new().limits(one_per_minute()).enforce(false)),
        // The whole App in shadow, the default policy with it.
        RateLimiter::new(MemoryStore::new())
            .undeclared(Undeclared::new().limits(one_per_minute()))
            .shadow(true),
    ] {
        let service = test::init_service(app(limiter)).await;
        assert_eq!(statuses(&service, 3, "/undeclared").await, [200, 200, 200]);
    }
    let enforcing_default = RateLimiter::new(MemoryStore::new())
        .undeclared(Undeclared::new().limits(one_per_minute()).enforce(true))
        .shadow(true);
    assert_eq!(
        enforcing_default.default_policy("GET").enforce(),
        Some(true)
    );
    let service = test::init_service(app(enforcing_default)).await;
    assert_eq!(statuses(&service, 2, "/undeclared").await, [200, 429]);
}

#[actix_web::test]
async fn a_shadowed_route_passes_while_the_store_fails() {
    let down = Down::default();
    let limiter = RateLimiter::new(down.clone()).shadow(true);
    let service = test::init_service(app(limiter)).await;
    // `fail = "closed"`, in shadow: passes; enforced: 503.
    assert_eq!(statuses(&service, 2, "/rollout/follows").await, [200, 200]);
    assert_eq!(statuses(&service, 1, "/rollout/enforced").await, [503]);
    assert!(down.calls() >= 3, "the store was asked");
}

#[actix_web::test]
async fn forwarding_headers_without_a_trusted_proxy_warn_once_a_minute_at_most() {
    let log = CapturedLog::start(tracing::Level::WARN);
    let clock = ManualClock::at(T0);
    let limiter =
        RateLimiter::new(MemoryStore::new())
            .clock(clock.clone())
            .keys(Keys::new().secret(
                ratelimit_runtime::key::KeySecret::new("a secret of sixteen bytes").unwrap(),
            ))
            .failure(Failure::new().instances(1));
    let service = test::init_service(app(limiter)).await;
    let forwarded = |header: &str, value: &str| {
        TestRequest::get()
            .uri("/undeclared")
            .insert_header((header.to_owned(), value.to_owned()))
            .peer_addr("10.0.0.5:4000".parse().unwrap())
            .to_request()
    };
    let warnings = || {
        log.text()
            .lines()
            .filter(|l| l.contains("while the limiter trusts no proxy"))
            .count()
    };
    let _ = test::call_service(&service, get("/undeclared")).await;
    assert_eq!(warnings(), 0, "no header, no warning");
    for _ in 0..3 {
        let _ = test::call_service(&service, forwarded("x-forwarded-for", "198.51.100.1")).await;
    }
    assert_eq!(warnings(), 1);
    let line = log.text();
    assert!(
        line.contains("X-Forwarded-For") && line.contains("TrustedProxies::hops"),
        "names the header and the setting: {line}"
    );
    clock.set(T0 + 59_999);
    let _ = test::call_service(&service, forwarded("forwarded", "for=198.51.100.1")).await;
    assert_eq!(warnings(), 1, "at most once a minute");
    clock.set(T0 + 60_000);
    let _ = test::call_service(&service, forwarded("forwarded", "for=198.51.100.1")).await;
    assert_eq!(warnings(), 2);

    // With a trusted proxy, the headers are read: nothing to warn about.
    let trusted = RateLimiter::new(MemoryStore::new())
        .clock(clock.clone())
        .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)));
    let service = test::init_service(app(trusted)).await;
    clock.set(T0 + 500_000);
    let _ = test::call_service(&service, forwarded("x-forwarded-for", "198.51.100.1")).await;
    assert_eq!(warnings(), 2);
}

/// A would-be refusal in shadow locks nobody out: once the route enforces, a client the
/// shadow period "refused" starts with the limit's own budget, not a lockout.
#[actix_web::test]
async fn a_lockout_is_not_written_while_the_route_is_in_shadow() {
    let redis = RedisServer::start();
    let declared =
        r#"limit = 1, window = "1m", identity = "ip", algorithm = "fixed_window", block = "1h""#;
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(ManualClock::at(T0))
        .shadow(true)
        .declare("GET /legacy/{id}", declared);
    let service = test::init_service(app(limiter)).await;
    assert_eq!(statuses(&service, 3, "/legacy/1").await, [200, 200, 200]);
    // Enforcing, a window later: allowed once, then refused and locked out for the hour.
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(ManualClock::at(T0 + 61_000))
        .declare("GET /legacy/{id}", declared);
    let service = test::init_service(app(limiter)).await;
    assert_eq!(statuses(&service, 2, "/legacy/1").await, [200, 429]);
    let limiter = RateLimiter::new(redis_store(&redis).await)
        .clock(ManualClock::at(T0 + 125_000))
        .declare("GET /legacy/{id}", declared);
    let service = test::init_service(app(limiter)).await;
    assert_eq!(
        statuses(&service, 1, "/legacy/1").await,
        [429],
        "locked out"
    );
}

/// A declaration in code names a pattern and a method: where two resources serve them (one
/// behind a custom guard), it would limit or exempt both, so it refuses startup.
#[actix_web::test]
async fn a_declaration_in_code_on_a_pattern_two_resources_serve_refuses_startup() {
    let limiter = RateLimiter::new(MemoryStore::new()).declare("GET /shared", "exempt = \"probe\"");
    let shared = App::new()
        .wrap(limiter)
        .service(
            web::resource("/shared")
                .guard(actix_web::guard::Host("internal.example"))
                .route(web::get().to(legacy)),
        )
        .service(web::resource("/shared").route(web::get().to(legacy)));
    let error = coverage::require_coverage(shared)
        .await
        .expect_err("refused")
        .to_string();
    assert!(error.contains("`GET /shared` is served by"), "{error}");
    assert!(error.contains("custom guard"), "{error}");
}
