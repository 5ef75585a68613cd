//! Counters and the store-latency histogram, tagged by route, policy and decision, through
//! the `metrics` facade (a recorder installed for this test binary only), and what the log
//! lines say.

mod support;

use std::{
    sync::{Mutex, OnceLock},
    time::Duration,
};

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    get, guard,
    middleware::Next,
    post, test, web, App, Error, HttpResponse, Responder,
};
use metrics_util::{
    debugging::{DebugValue, DebuggingRecorder, Snapshotter},
    CompositeKey, MetricKind,
};
use ratelimit_runtime::{
    clock::ManualClock,
    rate_limit,
    store::{MemoryStore, RedisStore},
    RateLimiter,
};
use support::{auth::answers_401, CapturedLog, Down, RedisServer, T0};

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

/// Held by each test of this binary while it runs: a snapshot drains the recorder's
/// histograms, and a sample recorded while another test's snapshot drains them can be lost
/// (`AtomicBucket::clear_with`), so the tests run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The recorder of this test binary, installed once; every test counts on routes of its own.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

/// One recorded series, totalled over every snapshot so far.
#[derive(Clone)]
struct Series {
    key: CompositeKey,
    /// A counter's total.
    count: u64,
    /// A histogram's samples.
    samples: usize,
}

/// Everything recorded so far. A snapshot takes what it reads (counters are reset to zero,
/// histograms drained), and tests run in parallel: every snapshot is added to one running
/// total, which each test reads for its own routes.
fn snapshot() -> Vec<Series> {
    static TOTAL: Mutex<Vec<Series>> = Mutex::new(Vec::new());
    let mut total = TOTAL.lock().unwrap();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let (count, samples) = match value {
            DebugValue::Counter(n) => (n, 0),
            DebugValue::Histogram(values) => (0, values.len()),
            DebugValue::Gauge(_) => (0, 0),
        };
        match total.iter_mut().find(|series| series.key == key) {
            Some(series) => {
                series.count += count;
                series.samples += samples;
            }
            None => total.push(Series {
                key,
                count,
                samples,
            }),
        }
    }
    total.clone()
}

/// The counter `name` summed over the series carrying every label of `labels`.
fn counted(snapshot: &[Series], name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshot
        .iter()
        .filter(|series| {
            series.key.kind() == MetricKind::Counter && series.key.key().name() == name
        })
        .filter(|series| {
            let have: Vec<(&str, &str)> = series
                .key
                .key()
                .labels()
                .map(|l| (l.key(), l.value()))
                .collect();
            labels.iter().all(|label| have.contains(label))
        })
        .map(|series| series.count)
        .sum()
}

fn counter(snapshot: &[Series], name: &str, route: &str, decision: &str) -> u64 {
    counted(snapshot, name, &[("route", route), ("decision", decision)])
}

#[actix_web::test]
async fn every_decision_is_counted_by_route_and_the_store_latency_is_recorded() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    snapshotter();
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

    let snapshot = snapshot();
    let decisions = "ratelimit_decisions_total";
    assert_eq!(counter(&snapshot, decisions, "GET /open", "allowed"), 1);
    // The declaring handler names the policy.
    let open_allowed = [
        ("route", "GET /open"),
        ("policy", "open"),
        ("decision", "allowed"),
    ];
    assert_eq!(counted(&snapshot, decisions, &open_allowed), 1);
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
        .filter(|series| {
            series.key.kind() == MetricKind::Histogram
                && series.key.key().name() == "ratelimit_store_duration_seconds"
                && series.key.key().labels().any(|l| {
                    l.key() == "route"
                        && ["GET /open", "POST /closed", "GET /shadow"].contains(&l.value())
                })
        })
        .map(|series| series.samples)
        .sum();
    assert_eq!(histogram_samples, 6, "one latency sample per store call");
}

fn from(ip: &str) -> test::TestRequest {
    test::TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn is_v2(ctx: &guard::GuardContext<'_>) -> bool {
    ctx.head()
        .headers()
        .get("x-api-version")
        .is_some_and(|v| v == "2")
}

#[rate_limit(limit = 1, window = "1m", identity = "ip")]
#[get("/items", guard = "is_v2")]
async fn items_v2() -> impl Responder {
    HttpResponse::Ok().body("v2")
}

#[rate_limit(limit = 3, window = "1m", identity = "ip")]
#[get("/items")]
async fn items_v1() -> impl Responder {
    HttpResponse::Ok().body("v1")
}

mod v1 {
    use super::*;

    #[rate_limit(limit = 3, window = "1m", identity = "ip")]
    #[get("/same-name")]
    pub async fn list() -> impl Responder {
        HttpResponse::Ok().body("v1")
    }
}

mod v2 {
    use super::*;

    #[rate_limit(limit = 1, window = "1m", identity = "ip")]
    #[get("/same-name", guard = "super::is_v2")]
    pub async fn list() -> impl Responder {
        HttpResponse::Ok().body("v2")
    }
}

mod tenant_a {
    use super::*;

    #[rate_limit(limit = 2, window = "1m", identity = "ip")]
    #[get("/orders")]
    pub async fn orders() -> impl Responder {
        HttpResponse::Ok()
    }
}

// Word for word `tenant_a::orders`: one marker name for both.
mod tenant_b {
    use super::*;

    #[rate_limit(limit = 2, window = "1m", identity = "ip")]
    #[get("/orders")]
    pub async fn orders() -> impl Responder {
        HttpResponse::Ok()
    }
}

/// Two handlers identical word for word, in two modules, mounted at one path under scopes a
/// guard tells apart, count apart, not in one budget (a hash of the marker, which is made
/// from the handler's text, is the same for both).
#[actix_web::test]
async fn identical_handlers_in_two_modules_on_one_path_count_apart() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let tenant = |name: &'static str| guard::Header("x-tenant", name);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/v")
                    .guard(tenant("a"))
                    .service(tenant_a::orders),
            )
            .service(
                web::scope("/v")
                    .guard(tenant("b"))
                    .service(tenant_b::orders),
            )
            .wrap(limiter),
    )
    .await;
    let mut statuses = Vec::new();
    for name in ["a", "a", "b", "b", "a", "b"] {
        let req = from("203.0.113.10")
            .uri("/v/orders")
            .insert_header(("x-tenant", name))
            .to_request();
        statuses.push(test::call_service(&app, req).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
}

/// Two handlers of one name (in two modules) declaring one path count in keys told apart by
/// a hash, and each has a `policy` label of its own.
#[actix_web::test]
async fn same_named_declarations_of_one_path_count_apart() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app =
        test::init_service(App::new().service(v2::list).service(v1::list).wrap(limiter)).await;
    let v1 = from("203.0.113.9").uri("/same-name").to_request();
    assert_eq!(test::call_service(&app, v1).await.status(), 200);
    let v2 = from("203.0.113.9")
        .uri("/same-name")
        .insert_header(("x-api-version", "2"))
        .to_request();
    assert_eq!(test::call_service(&app, v2).await.status(), 200);
    let policies: Vec<String> = snapshot()
        .iter()
        .filter(|series| {
            let labels: Vec<(&str, &str)> = series
                .key
                .key()
                .labels()
                .map(|l| (l.key(), l.value()))
                .collect();
            series.key.key().name() == "ratelimit_decisions_total"
                && labels.contains(&("route", "GET /same-name"))
                && labels.contains(&("decision", "allowed"))
                && series.count == 1
        })
        .filter_map(|series| {
            let policy = series.key.key().labels().find(|l| l.key() == "policy")?;
            Some(policy.value().to_owned())
        })
        .filter(|policy| policy != "default")
        .collect();
    assert_eq!(policies.len(), 2, "{policies:?}");
    assert!(
        policies.iter().all(|p| p.starts_with("list.")),
        "{policies:?}"
    );
    assert_ne!(policies[0], policies[1]);
}

/// Where a custom guard decides between two declarations of a path, the default policy
/// counts the request besides the declaration (README, limitations). Under one `route`
/// label, as are the two declarations, an allowed request would read as two: the `policy`
/// label tells them apart. One failed store call is one store error and one error line, the
/// second policy meeting it again logs at debug.
#[actix_web::test]
async fn policies_on_one_path_count_apart_and_one_store_failure_counts_once() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app =
        test::init_service(App::new().service(items_v2).service(items_v1).wrap(limiter)).await;
    let req = from("203.0.113.7").uri("/items").to_request();
    assert_eq!(test::call_service(&app, req).await.status(), 200);
    let snapshot = snapshot();
    let allowed = |policy| {
        counted(
            &snapshot,
            "ratelimit_decisions_total",
            &[
                ("route", "GET /items"),
                ("policy", policy),
                ("decision", "allowed"),
            ],
        )
    };
    assert_eq!(
        (allowed("items_v1"), allowed("default"), allowed("items_v2")),
        (1, 1, 0)
    );

    let captured = CapturedLog::start(tracing::Level::ERROR);
    let app = test::init_service(
        App::new()
            .service(items_v2)
            .service(items_v1)
            .wrap(RateLimiter::new(Down::default())),
    )
    .await;
    let req = from("203.0.113.8").uri("/items").to_request();
    // GET fails open.
    assert_eq!(test::call_service(&app, req).await.status(), 200);
    let errors = counted(
        &self::snapshot(),
        "ratelimit_store_errors_total",
        &[("route", "GET /items")],
    );
    let lines = captured
        .text()
        .lines()
        .filter(|l| l.contains("rate-limit store error"))
        .count();
    assert_eq!((errors, lines), (1, 1));
}

#[rate_limit(limit = 5, window = "1m", identity = "ip", fail = "closed")]
#[post("/admin", wrap = "actix_web::middleware::from_fn(answers_401)")]
async fn admin() -> impl Responder {
    HttpResponse::Ok()
}

/// A refusal counted after the fact (a route's own middleware answered 401) that meets a
/// store error is not reported as `failed_closed`, "refused with 503": the client got the
/// 401, and it passed uncounted.
#[actix_web::test]
async fn a_request_answered_before_the_limiter_is_not_reported_as_a_503() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let captured = CapturedLog::start(tracing::Level::ERROR);
    let app = test::init_service(
        App::new()
            .service(admin)
            .wrap(RateLimiter::new(Down::default())),
    )
    .await;
    let req = from("203.0.113.7")
        .method(actix_web::http::Method::POST)
        .uri("/admin")
        .to_request();
    assert_eq!(test::call_service(&app, req).await.status(), 401);
    let snapshot = snapshot();
    let decisions = "ratelimit_decisions_total";
    assert_eq!(
        counter(&snapshot, decisions, "POST /admin", "failed_closed"),
        0
    );
    assert_eq!(
        counter(&snapshot, decisions, "POST /admin", "failed_open"),
        1
    );
    let logs = captured.text();
    assert!(logs.contains("already answered, not counted"), "{logs}");
    assert!(!logs.contains("refused with 503"), "{logs}");
}

#[rate_limit(limit = 100, window = "1m", identity = "ip")]
#[rate_limit(limit = 1, window = "1s", algorithm = "gcra")]
#[get("/stacked")]
async fn stacked() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 5, window = "1m", identity = "ip+username", fail = "closed")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

/// A rejection's line names the limit that applied, not every stacked limit (the
/// specification asks for it); a store error's line names the identity part that was
/// missing, as the rejection's line does.
#[actix_web::test]
async fn log_lines_name_the_limit_that_applied_and_the_missing_identity_part() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let captured = CapturedLog::start(tracing::Level::WARN);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(stacked).wrap(limiter)).await;
    let req = || from("203.0.113.7").uri("/stacked").to_request();
    assert_eq!(test::call_service(&app, req()).await.status(), 200);
    assert_eq!(test::call_service(&app, req()).await.status(), 429);
    let logs = captured.text();
    let line = logs
        .lines()
        .find(|l| l.contains("request rejected: rate limit exceeded"))
        .unwrap_or_else(|| panic!("no rejection line in:\n{logs}"));
    assert!(line.contains("limit=1 per 1s (gcra)"), "{line}");

    let captured = CapturedLog::start(tracing::Level::ERROR);
    let app = test::init_service(
        App::new()
            .service(login)
            .wrap(RateLimiter::new(Down::default())),
    )
    .await;
    let req = from("203.0.113.7")
        .method(actix_web::http::Method::POST)
        .uri("/login")
        .to_request();
    assert_eq!(test::call_service(&app, req).await.status(), 503);
    let logs = captured.text();
    assert!(logs.contains("identity_fallback_from=username"), "{logs}");
}

/// A route-level cache: with `x-cached` it answers itself, without calling the handler.
async fn cache(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    if req.headers().contains_key("x-cached") {
        return Ok(req
            .into_response(HttpResponse::Ok().body("from cache"))
            .map_into_right_body());
    }
    Ok(next.call(req).await?.map_into_left_body())
}

#[rate_limit(limit = 1, window = "1m", identity = "ip")]
#[get("/cached", wrap = "actix_web::middleware::from_fn(cache)")]
async fn cached() -> impl Responder {
    HttpResponse::Ok().body("fresh")
}

/// A success answered in front of the route's guard (here its own cache) is counted after
/// the fact and kept; over the limit, it is not reported as `rejected` with a warning, since
/// the client got its 200: it counts as allowed, logged at info.
#[actix_web::test]
async fn a_served_request_counted_after_the_fact_is_not_reported_as_rejected() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let captured = CapturedLog::start(tracing::Level::INFO);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(cached).wrap(limiter)).await;
    let request = |from_cache: bool| {
        let mut req = from("203.0.113.7").uri("/cached");
        if from_cache {
            req = req.insert_header(("x-cached", "1"));
        }
        req.to_request()
    };
    assert_eq!(test::call_service(&app, request(false)).await.status(), 200);
    // Twice from the cache, over the limit: counted in the store, then by the flood shield.
    for _ in 0..2 {
        let served = test::call_service(&app, request(true)).await;
        assert_eq!(served.status(), 200);
        assert_eq!(test::read_body(served).await, "from cache");
    }
    let snapshot = snapshot();
    let decisions = "ratelimit_decisions_total";
    let logs = captured.text();
    assert_eq!(
        counter(&snapshot, decisions, "GET /cached", "rejected"),
        0,
        "{logs}"
    );
    assert_eq!(
        counter(&snapshot, decisions, "GET /cached", "allowed"),
        3,
        "{logs}"
    );
    assert!(!logs.contains("request rejected"), "{logs}");
    assert_eq!(
        logs.matches("served before the limiter saw it").count(),
        2,
        "{logs}"
    );
    // The next request the route's guard sees is refused.
    assert_eq!(test::call_service(&app, request(false)).await.status(), 429);
}

#[rate_limit(limit = 5, window = "1m", identity = "ip", fail = "open")]
#[get("/outage")]
async fn outage() -> impl Responder {
    HttpResponse::Ok()
}

/// While Redis is down, not every request logs an error line (200 requests, 200 lines): one
/// line per route and worker every ten seconds, the others at debug; the counter still
/// counts each.
#[actix_web::test]
async fn an_outage_is_one_error_line_and_a_store_error_counted_per_request() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let errors_before = counted(
        &snapshot(),
        "ratelimit_store_errors_total",
        &[("route", "GET /outage")],
    );
    let at_error = CapturedLog::start(tracing::Level::DEBUG);
    let app = test::init_service(
        App::new()
            .service(outage)
            .wrap(RateLimiter::new(Down::default())),
    )
    .await;
    for i in 0..200 {
        let req = from(&format!("203.0.113.{}", i % 250)).uri("/outage");
        assert_eq!(
            test::call_service(&app, req.to_request()).await.status(),
            200
        );
    }
    let errors = counted(
        &snapshot(),
        "ratelimit_store_errors_total",
        &[("route", "GET /outage")],
    ) - errors_before;
    assert_eq!(errors, 200);
    let logs = at_error.text();
    let lines = |level: &str| {
        logs.lines()
            .filter(|l| l.contains(level) && l.contains("rate-limit store error"))
            .count()
    };
    assert_eq!((lines("ERROR"), lines("DEBUG")), (1, 199), "{logs}");
    assert!(logs.contains("at_debug_since_last=0"), "{logs}");
}

/// One description: a metric's name, kind, unit and text.
type Described = (String, &'static str, Option<metrics::Unit>, String);

/// Records what the limiter describes.
#[derive(Default)]
struct Descriptions(Mutex<Vec<Described>>);

impl Descriptions {
    fn push(
        &self,
        kind: &'static str,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        let entry = (key.as_str().to_owned(), kind, unit, text.into_owned());
        self.0.lock().unwrap().push(entry);
    }
}

impl metrics::Recorder for Descriptions {
    fn describe_counter(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        self.push("counter", key, unit, text);
    }
    fn describe_gauge(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        self.push("gauge", key, unit, text);
    }
    fn describe_histogram(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        self.push("histogram", key, unit, text);
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[actix_web::test]
async fn describe_metrics_describes_every_metric_with_its_kind_and_unit() {
    let recorder = Descriptions::default();
    metrics::with_local_recorder(&recorder, ratelimit_runtime::describe_metrics);
    let described = recorder.0.into_inner().unwrap();
    let seconds = Some(metrics::Unit::Seconds);
    let count = Some(metrics::Unit::Count);
    let expected = [
        ("ratelimit_decisions_total", "counter", count),
        ("ratelimit_store_errors_total", "counter", count),
        ("ratelimit_store_duration_seconds", "histogram", seconds),
        ("ratelimit_in_flight", "gauge", count),
        ("ratelimit_bans_total", "counter", count),
        ("ratelimit_fallback_switches_total", "counter", count),
        ("ratelimit_listed_total", "counter", count),
        ("ratelimit_overrides_applied_total", "counter", count),
        ("ratelimit_overrides_refused_total", "counter", count),
    ];
    assert_eq!(described.len(), expected.len(), "{described:?}");
    for (name, kind, unit) in expected {
        let found = described.iter().find(|(n, ..)| n == name);
        let Some((_, found_kind, found_unit, text)) = found else {
            panic!("{name} is not described: {described:?}");
        };
        assert_eq!((*found_kind, *found_unit), (kind, unit), "{name}");
        assert!(text.len() > 20, "{name}: {text}");
    }
}
