//! One `tracing` span per decision (`ratelimit.decision`), as a subscriber collects it: the
//! route's pattern, the outcome, who decided, the algorithm, the store and its latency, the
//! identity's kind; an error status on a store failure; never a raw identity, path or key.

mod support;

use std::{
    collections::BTreeMap,
    fmt,
    sync::{Mutex, OnceLock},
};

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    get,
    middleware::{from_fn, Next},
    post, test, App, Error, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock,
    rate_limit,
    settings::Failure,
    store::{RedisStore, Store},
    RateLimiter,
};
use support::{Down, RedisServer, T0};
use tracing::{
    field::{Field, Visit},
    span::{Attributes, Id, Record},
    Instrument as _, Subscriber,
};
use tracing_subscriber::{layer::Context, prelude::*, registry::LookupSpan, Layer};

/// A field's value, typed as the span recorded it.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    U64(u64),
    F64(f64),
    Other(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) | Value::Other(s) => f.write_str(s),
            Value::U64(n) => write!(f, "{n}"),
            Value::F64(x) => write!(f, "{x}"),
        }
    }
}

/// One closed decision span: its target, level, parent's name and fields.
#[derive(Debug, Clone, Default)]
struct Collected {
    target: String,
    level: String,
    parent: Option<String>,
    fields: BTreeMap<String, Value>,
}

impl Collected {
    fn str(&self, name: &str) -> Option<&str> {
        match self.fields.get(name) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_owned(), Value::Str(value.to_owned()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::U64(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::F64(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::Other(format!("{value:?}")));
    }
}

/// Collects every closed `ratelimit.decision` span, as an exporting layer
/// (tracing-opentelemetry's) sees it: the fields at creation, then each one recorded.
struct SpanCollector;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanCollector {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a new span");
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let collected = Collected {
            target: attrs.metadata().target().to_owned(),
            level: attrs.metadata().level().to_string(),
            parent: span.parent().map(|p| p.name().to_owned()),
            fields: fields.0,
        };
        span.extensions_mut().insert(collected);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span");
        let mut extensions = span.extensions_mut();
        if let Some(collected) = extensions.get_mut::<Collected>() {
            let mut fields = Fields(std::mem::take(&mut collected.fields));
            values.record(&mut fields);
            collected.fields = fields.0;
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("a closed span");
        if span.name() != "ratelimit.decision" {
            return;
        }
        let collected = span.extensions_mut().remove::<Collected>();
        if let Some(collected) = collected {
            spans().lock().unwrap().push(collected);
        }
    }
}

fn spans() -> &'static Mutex<Vec<Collected>> {
    static SPANS: Mutex<Vec<Collected>> = Mutex::new(Vec::new());
    &SPANS
}

/// The collector, installed once as this binary's global subscriber; each test reads the
/// spans of its own routes.
fn collect() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing_subscriber::registry()
            .with(SpanCollector)
            .try_init()
            .expect("the only subscriber of this test binary");
    });
}

/// The closed decision spans of `route` (`METHOD /pattern`) so far, in order.
fn spans_of(route: &str) -> Vec<Collected> {
    spans()
        .lock()
        .unwrap()
        .iter()
        .filter(|span| span.str("route") == Some(route))
        .cloned()
        .collect()
}

/// Every request inside a span of the app's own, as a tracing middleware would put it.
async fn in_request_span(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let span = tracing::info_span!("http.request");
    next.call(req).instrument(span).await
}

#[rate_limit(
    limit = 1,
    window = "1m",
    identity = "ip+username",
    algorithm = "sliding_log"
)]
#[post("/spans/login")]
async fn spans_login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 5, window = "1m", identity = "api_key")]
#[rate_limit(limit = 2, window = "1s", algorithm = "gcra")]
#[get("/spans/orders/{id}")]
async fn spans_order() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "health check")]
#[get("/spans/health")]
async fn spans_health() -> impl Responder {
    HttpResponse::Ok()
}

const USERNAME: &str = "margaret.hamilton";
const ADDRESS: &str = "198.51.100.23";
const API_KEY: &str = "key_9f8e7d6c5b4a";
const ORDER: &str = "4711";

#[actix_web::test]
async fn each_decision_has_a_span_with_its_route_outcome_and_store_latency_never_an_identity() {
    collect();
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let limiter = RateLimiter::new(store).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(spans_login)
            .service(spans_order)
            .service(spans_health)
            .wrap(limiter)
            .wrap(from_fn(in_request_span)),
    )
    .await;
    let login = || {
        test::TestRequest::post()
            .uri("/spans/login")
            .peer_addr(format!("{ADDRESS}:4000").parse().unwrap())
            .set_json(serde_json::json!({ "username": USERNAME, "password": "x" }))
            .to_request()
    };
    assert_eq!(test::call_service(&app, login()).await.status(), 200);
    assert_eq!(test::call_service(&app, login()).await.status(), 429);
    // Remembered by the flood shield: refused without asking the store.
    assert_eq!(test::call_service(&app, login()).await.status(), 429);
    let order = test::TestRequest::get()
        .uri(&format!("/spans/orders/{ORDER}"))
        .peer_addr(format!("{ADDRESS}:4000").parse().unwrap())
        .insert_header(("x-api-key", API_KEY))
        .to_request();
    assert_eq!(test::call_service(&app, order).await.status(), 200);
    let health = test::TestRequest::get()
        .uri("/spans/health")
        .peer_addr(format!("{ADDRESS}:4000").parse().unwrap())
        .to_request();
    assert_eq!(test::call_service(&app, health).await.status(), 200);

    let login_spans = spans_of("POST /spans/login");
    assert_eq!(
        login_spans.len(),
        3,
        "one span per decision: {login_spans:?}"
    );
    let outcomes: Vec<_> = login_spans.iter().map(|s| s.str("outcome")).collect();
    assert_eq!(
        outcomes,
        [Some("allowed"), Some("rejected"), Some("rejected")]
    );
    let decided_by: Vec<_> = login_spans.iter().map(|s| s.str("decided_by")).collect();
    assert_eq!(
        decided_by,
        [Some("store"), Some("store"), Some("flood_shield")]
    );
    for span in &login_spans {
        assert_eq!(span.target, "ratelimit::decision");
        assert_eq!(span.level, "INFO");
        // A child of the request's span: exported in the request's trace.
        assert_eq!(span.parent.as_deref(), Some("http.request"));
        assert_eq!(span.str("http.route"), Some("/spans/login"));
        assert_eq!(span.str("http.request.method"), Some("POST"));
        assert_eq!(span.str("policy"), Some("spans_login"));
        assert_eq!(span.str("algorithm"), Some("sliding_log"));
        assert_eq!(span.str("identity"), Some("ip+username"));
        assert_eq!(span.str("store"), Some("redis"));
        assert_eq!(span.str("counting"), Some("live"));
        assert_eq!(span.fields.get("otel.status_code"), None);
    }
    // The store's latency where the store was asked, as a number.
    for span in &login_spans[..2] {
        match span.fields.get("store_duration_ms") {
            Some(Value::F64(ms)) => assert!(*ms >= 0.0 && *ms < 10_000.0, "{ms}"),
            other => panic!("store_duration_ms: {other:?}"),
        }
    }
    assert_eq!(login_spans[2].fields.get("store_duration_ms"), None);
    let refused = &login_spans[1];
    assert_eq!(
        refused
            .fields
            .get("limit")
            .map(ToString::to_string)
            .as_deref(),
        Some("1 per 1m (sliding_log)")
    );
    assert!(
        matches!(refused.fields.get("retry_after_ms"), Some(Value::U64(ms)) if *ms > 0),
        "{refused:?}"
    );

    let order_spans = spans_of("GET /spans/orders/{id}");
    assert_eq!(order_spans.len(), 1, "{order_spans:?}");
    let order = &order_spans[0];
    assert_eq!(order.str("http.route"), Some("/spans/orders/{id}"));
    assert_eq!(order.str("outcome"), Some("allowed"));
    assert_eq!(order.str("algorithm"), Some("sliding_window+gcra"));
    // A route of no limit has no decision span.
    assert!(spans_of("GET /spans/health").is_empty());

    // No field holds an identity value, the raw path or the key.
    for span in login_spans.iter().chain(&order_spans) {
        for (name, value) in &span.fields {
            let value = value.to_string();
            for secret in [USERNAME, ADDRESS, API_KEY, ORDER] {
                assert!(
                    !value.contains(secret),
                    "field `{name}` holds `{secret}`: {value}"
                );
            }
        }
    }
}

#[rate_limit(limit = 10, window = "1m", identity = "ip", fail = "open")]
#[get("/spans/open")]
async fn spans_open() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", identity = "ip", fail = "closed")]
#[get("/spans/closed")]
async fn spans_closed() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1m", identity = "ip", fail = "local")]
#[get("/spans/local")]
async fn spans_local() -> impl Responder {
    HttpResponse::Ok()
}

#[actix_web::test]
async fn a_store_failure_sets_the_spans_error_status_and_the_outcome_the_route_fails_to() {
    collect();
    let store = Down::default();
    assert_eq!(store.kind(), "down");
    let limiter = RateLimiter::new(store)
        .clock(ManualClock::at(T0))
        .failure(Failure::new().instances(1));
    let app = test::init_service(
        App::new()
            .service(spans_open)
            .service(spans_closed)
            .service(spans_local)
            .wrap(limiter),
    )
    .await;
    let get = |path: &str| {
        test::TestRequest::get()
            .uri(path)
            .peer_addr("203.0.113.9:1".parse().unwrap())
            .to_request()
    };
    assert_eq!(
        test::call_service(&app, get("/spans/open")).await.status(),
        200
    );
    assert_eq!(
        test::call_service(&app, get("/spans/closed"))
            .await
            .status(),
        503
    );
    assert_eq!(
        test::call_service(&app, get("/spans/local")).await.status(),
        200
    );
    for (route, outcome, decided_by) in [
        ("GET /spans/open", "failed_open", None),
        ("GET /spans/closed", "failed_closed", None),
        // Limited in this process: the local decision's outcome, the store's error.
        ("GET /spans/local", "allowed", Some("local")),
    ] {
        let spans = spans_of(route);
        assert_eq!(spans.len(), 1, "{route}: {spans:?}");
        let span = &spans[0];
        assert_eq!(span.str("outcome"), Some(outcome), "{route}");
        assert_eq!(span.str("decided_by"), decided_by, "{route}");
        assert_eq!(span.str("store"), Some("down"), "{route}");
        assert_eq!(span.str("error.type"), Some("connection"), "{route}");
        assert_eq!(span.str("otel.status_code"), Some("ERROR"), "{route}");
        let description = span
            .fields
            .get("otel.status_description")
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            description.contains("store error"),
            "{route}: {description}"
        );
        assert!(!description.contains("203.0.113.9"), "{description}");
    }
}
