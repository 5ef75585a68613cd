//! The sign-in budget against real Redis: no body shape, look-alike spelling or dictionary
//! gets around a username's limit.

mod support;

use ratelimit_runtime::settings::{Identities, Keys};
use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::Duration,
};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    post,
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use proptest::{collection::vec, prelude::*, test_runner::TestRunner};
use ratelimit_runtime::{
    __private::short_hash,
    clock::ManualClock,
    identity::{canonical_username, ClientIdentity, UsernameReader},
    key::{KeySecret, RouteKey},
    rate_limit,
    store::{MemoryStore, RedisStore},
    IdentityPart, RateLimiter,
};
use serde::Deserialize;
use support::{CapturedLog, Down, RedisServer, T0};

#[derive(Deserialize)]
struct Login {
    username: String,
    #[allow(dead_code)]
    password: String,
}

/// Sign-ins the handler accepted, by the canonical name of the username it read.
#[derive(Default)]
struct Accepted(Mutex<HashMap<String, usize>>);

impl Accepted {
    fn of(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

const LIMIT: usize = 3;

/// A sign-in handler as apps write them: JSON or a form through actix-web's own extractors.
#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login(
    json: Option<web::Json<Login>>,
    form: Option<web::Form<Login>>,
    accepted: web::Data<Accepted>,
) -> HttpResponse {
    let Some(login) = json
        .map(web::Json::into_inner)
        .or(form.map(web::Form::into_inner))
    else {
        return HttpResponse::BadRequest().finish();
    };
    let name = canonical_username(&login.username);
    *accepted.0.lock().unwrap().entry(name).or_default() += 1;
    HttpResponse::Ok().finish()
}

/// One username per client, for the dictionary test.
#[rate_limit(limit = 1, window = "1h", identity = "username", fail = "closed")]
#[post("/recover")]
async fn recover(body: web::Bytes) -> HttpResponse {
    HttpResponse::Ok().body(body)
}

/// An App with the sign-in route, counting what its handler accepts in `accepted`.
async fn login_app(
    limiter: RateLimiter,
    accepted: &web::Data<Accepted>,
) -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(
        App::new()
            .app_data(accepted.clone())
            .service(login)
            .wrap(limiter),
    )
    .await
}

async fn limiter(server: &RedisServer) -> RateLimiter {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("store");
    RateLimiter::new(store).clock(ManualClock::at(T0))
}

fn typed(limiter: RateLimiter) -> RateLimiter {
    limiter.identity(
        Identities::new().username(UsernameReader::json_or_form::<Login>(|l| &l.username)),
    )
}

async fn status<S, B>(app: &S, req: TestRequest) -> u16
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    test::call_service(app, req.to_request())
        .await
        .status()
        .as_u16()
}

fn post_from(ip: &str, path: &str) -> TestRequest {
    TestRequest::post()
        .uri(path)
        .peer_addr(format!("{ip}:40000").parse().unwrap())
}

/// Spellings of one name that a normalising account store takes for the same account.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    Plain,
    Upper,
    Fullwidth,
    ZeroWidth,
    Padded,
    Decomposed,
    Kelvin,
    SharpS,
}

impl Spelling {
    const ALL: [Spelling; 8] = [
        Spelling::Plain,
        Spelling::Upper,
        Spelling::Fullwidth,
        Spelling::ZeroWidth,
        Spelling::Padded,
        Spelling::Decomposed,
        Spelling::Kelvin,
        Spelling::SharpS,
    ];

    /// `base` is `kärlss<n>`: a k, an umlaut and a double s to vary.
    fn of(self, base: &str) -> String {
        match self {
            Spelling::Plain => base.to_owned(),
            Spelling::Upper => base.to_uppercase(),
            Spelling::Fullwidth => base
                .chars()
                .map(|c| match c {
                    '!'..='~' => char::from_u32(c as u32 - 0x21 + 0xff01).unwrap(),
                    c => c,
                })
                .collect(),
            Spelling::ZeroWidth => {
                let mut s = base.to_owned();
                s.insert(1, '\u{200b}');
                s.push('\u{2060}');
                s
            }
            Spelling::Padded => format!(" {base}\t "),
            Spelling::Decomposed => base.replace('ä', "a\u{308}"),
            Spelling::Kelvin => base.replacen('k', "\u{212a}", 1),
            Spelling::SharpS => base.replace("ss", "ß"),
        }
    }
}

/// Body shapes: those `web::Json<Login>` or `web::Form<Login>` accept, and some they refuse.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Object,
    ObjectReorderedTextJson,
    Array,
    ArrayVendorJson,
    Escaped,
    PaddedWithCharset,
    Form,
    FormReorderedWithCharset,
    FormUtf16,
    DuplicateField,
    /// A JSON object, gzip-compressed (actix-web decompresses it for the handler).
    Gzipped,
    // Refused by the handler.
    TextPlain,
    NoContentType,
    WithoutPassword,
    Null,
    FormTwice,
}

const SHAPES: [Shape; 16] = [
    Shape::Object,
    Shape::ObjectReorderedTextJson,
    Shape::Array,
    Shape::ArrayVendorJson,
    Shape::Escaped,
    Shape::PaddedWithCharset,
    Shape::Form,
    Shape::FormReorderedWithCharset,
    Shape::FormUtf16,
    Shape::DuplicateField,
    Shape::Gzipped,
    Shape::TextPlain,
    Shape::NoContentType,
    Shape::WithoutPassword,
    Shape::Null,
    Shape::FormTwice,
];

fn percent(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

fn escaped(text: &str) -> String {
    let mut out = String::from("\"");
    for unit in text.encode_utf16() {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
    out
}

impl Shape {
    /// The content type (none for `None`) and the body submitting `name`.
    fn body(self, name: &str) -> (Option<&'static str>, Vec<u8>) {
        let json = |v: serde_json::Value| v.to_string().into_bytes();
        let name_json = serde_json::Value::from(name);
        let form = "application/x-www-form-urlencoded";
        match self {
            Shape::Object => (
                Some("application/json"),
                json(serde_json::json!({"username": name, "password": "x"})),
            ),
            Shape::ObjectReorderedTextJson => (
                Some("text/json"),
                format!(r#"{{"password":"x","extra":[1,{{"a":null}}],"username":{name_json}}}"#)
                    .into_bytes(),
            ),
            Shape::Array => (
                Some("application/json"),
                json(serde_json::json!([name, "x"])),
            ),
            Shape::ArrayVendorJson => (
                Some("application/vnd.example+json"),
                json(serde_json::json!([name, "x"])),
            ),
            Shape::Escaped => (
                Some("application/json"),
                format!(r#"{{"username":{},"password":"x"}}"#, escaped(name)).into_bytes(),
            ),
            Shape::PaddedWithCharset => (
                Some("application/json; charset=utf-8"),
                format!(
                    "{}{{\"username\":{name_json},\"password\":\"x\"}}{}",
                    " ".repeat(500),
                    "\n".repeat(500)
                )
                .into_bytes(),
            ),
            Shape::Form => (
                Some(form),
                format!("username={}&password=x", percent(name)).into_bytes(),
            ),
            Shape::FormReorderedWithCharset => (
                Some("application/x-www-form-urlencoded; charset=utf-8"),
                format!("password=x&more=1&username={}", percent(name)).into_bytes(),
            ),
            Shape::FormUtf16 => {
                let text = format!("username={}&password=x", percent(name));
                let bytes = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
                (
                    Some("application/x-www-form-urlencoded; charset=utf-16le"),
                    bytes,
                )
            }
            Shape::DuplicateField => (
                Some("application/json"),
                format!(r#"{{"username":"decoy","username":{name_json},"password":"x"}}"#)
                    .into_bytes(),
            ),
            Shape::Gzipped => {
                use std::io::Write as _;
                let mut gzip =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gzip.write_all(&json(
                    serde_json::json!({"username": name, "password": "x"}),
                ))
                .unwrap();
                (Some("application/json"), gzip.finish().unwrap())
            }
            Shape::TextPlain => (
                Some("text/plain"),
                json(serde_json::json!({"username": name, "password": "x"})),
            ),
            Shape::NoContentType => (None, json(serde_json::json!([name, "x"]))),
            Shape::WithoutPassword => (
                Some("application/json"),
                json(serde_json::json!({ "username": name })),
            ),
            Shape::Null => (Some("application/json"), b"null".to_vec()),
            Shape::FormTwice => (
                Some(form),
                format!("username=decoy&username={}&password=x", percent(name)).into_bytes(),
            ),
        }
    }
}

fn attempt(ip: &str, shape: Shape, name: &str) -> TestRequest {
    let (content_type, body) = shape.body(name);
    let mut req = post_from(ip, "/login").set_payload(body);
    if let Some(content_type) = content_type {
        req = req.insert_header(("content-type", content_type));
    }
    if matches!(shape, Shape::Gzipped) {
        req = req.insert_header(("content-encoding", "gzip"));
    }
    req
}

/// Runs `cases` generated mixes of shapes and spellings of one name from one address, each
/// against a fresh name, and returns the most sign-ins the handler accepted for one name,
/// and the fewest.
fn most_accepted_over_mixes(typed_reader: bool) -> (usize, usize) {
    let server = RedisServer::start();
    let system = actix_web::rt::System::new();
    let mut runner = TestRunner::new(proptest::test_runner::Config {
        cases: 24,
        failure_persistence: None,
        ..Default::default()
    });
    let strategy = vec(
        (0..SHAPES.len(), 0..Spelling::ALL.len()),
        LIMIT * 4..LIMIT * 12,
    );
    let case = std::cell::Cell::new(0u32);
    let most = std::cell::Cell::new(0usize);
    let fewest = std::cell::Cell::new(usize::MAX);
    let result = runner.run(&strategy, |mix| {
        case.set(case.get() + 1);
        let base = format!("kärlss{}{}", u8::from(typed_reader), case.get());
        let accepted = system.block_on(async {
            let accepted = web::Data::new(Accepted::default());
            let mut limiter = limiter(&server).await;
            if typed_reader {
                limiter = typed(limiter);
            }
            let app = login_app(limiter, &accepted).await;
            // One address per case: its one budget for unreadable bodies is fresh too.
            let ip = format!("10.{}.{}.9", u8::from(typed_reader), case.get());
            // A plain sign-in first, so a name that is never accepted cannot pass as limited.
            status(&app, attempt(&ip, Shape::Object, &base)).await;
            for (shape, spelling) in mix {
                let name = Spelling::ALL[spelling].of(&base);
                status(&app, attempt(&ip, SHAPES[shape], &name)).await;
            }
            accepted.of(&canonical_username(&base))
        });
        most.set(most.get().max(accepted));
        fewest.set(fewest.get().min(accepted));
        let bound = if typed_reader { LIMIT } else { 2 * LIMIT };
        prop_assert!(
            accepted <= bound,
            "{accepted} sign-ins accepted for one name, bound {bound}"
        );
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    (most.get(), fewest.get())
}

/// With the handler's type, no mix of shapes and spellings passes more than the limit for
/// one name.
#[test]
fn with_the_handlers_type_no_body_shape_passes_more_than_the_limit() {
    let (most, fewest) = most_accepted_over_mixes(true);
    assert_eq!(most, LIMIT, "some mix spends the whole budget");
    assert!(fewest >= 1);
}

/// With the built-in field reader, shapes it cannot read (arrays, for one) share one budget
/// per address: the limit plus that one budget at most.
#[test]
fn with_the_field_reader_unreadable_shapes_share_one_budget_per_address() {
    let (most, fewest) = most_accepted_over_mixes(false);
    assert!(most > LIMIT, "arrays pass on the unreadable budget: {most}");
    assert!(most <= 2 * LIMIT, "{most}");
    assert!(fewest >= 1);
}

/// The issue's attack, as requests: objects, then arrays, then `text/json`, one name and one
/// address: ten accepted, not thirty.
#[actix_web::test]
async fn objects_arrays_and_text_json_share_the_names_budget() {
    let server = RedisServer::start();
    for typed_reader in [true, false] {
        let accepted = web::Data::new(Accepted::default());
        let mut limiter = limiter(&server)
            .await
            .keys(Keys::new().prefix(if typed_reader { "typed" } else { "field" }));
        if typed_reader {
            limiter = typed(limiter);
        }
        let app = login_app(limiter, &accepted).await;
        let captured = CapturedLog::start(tracing::Level::WARN);
        let mut statuses = Vec::new();
        for shape in [Shape::Object, Shape::Array, Shape::ObjectReorderedTextJson] {
            for _ in 0..LIMIT + 1 {
                statuses.push(status(&app, attempt("203.0.113.7", shape, "repro")).await);
            }
        }
        let passed = accepted.of("repro");
        let warnings = captured.text().matches("JSON array body").count();
        if typed_reader {
            assert_eq!(passed, LIMIT, "{statuses:?}");
            assert_eq!(warnings, 0, "{}", captured.text());
        } else {
            // Arrays are not read by the field reader: they spend the address's one budget
            // for unreadable bodies, and `text/json` objects the name's. The operator is
            // told, once a minute at most, and how to fix it.
            assert_eq!(passed, 2 * LIMIT, "{statuses:?}");
            assert_eq!(warnings, 1, "{}", captured.text());
            let text = captured.text();
            assert!(
                text.contains("POST /login")
                    && text.contains("Identities::username(UsernameReader::json_or_form"),
                "{text}"
            );
        }
    }
}

#[actix_web::test]
async fn look_alike_spellings_share_one_budget() {
    let server = RedisServer::start();
    let accepted = web::Data::new(Accepted::default());
    let app = login_app(typed(limiter(&server).await), &accepted).await;
    let mut statuses = Vec::new();
    for spelling in Spelling::ALL {
        let name = spelling.of("kärlss");
        statuses.push(status(&app, attempt("203.0.113.7", Shape::Object, &name)).await);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429, 429, 429, 429],
        "{:?}",
        Spelling::ALL
    );
    assert_eq!(accepted.of("kärlss"), LIMIT);
    // Another name keeps its own budget.
    let other = attempt("203.0.113.7", Shape::Object, "karlss");
    assert_eq!(status(&app, other).await, 200);
}

/// While the store fails, a request refused for an unreadable username gets what every
/// request of its fail-closed route gets, 503 (its 400 comes with a count, which the store
/// cannot make), and never reaches the handler.
#[actix_web::test]
async fn an_unreadable_username_on_a_closed_route_gets_503_while_the_store_fails() {
    let accepted = web::Data::new(Accepted::default());
    let reader = UsernameReader::json_or_form::<Login>(|l| &l.username).refuse_unreadable();
    let store = Down::default();
    let limiter = RateLimiter::new(store.clone())
        .identity(Identities::new().route_username("POST /login", reader));
    let app = login_app(limiter, &accepted).await;
    let res = test::call_service(&app, post_from("203.0.113.9", "/login").to_request()).await;
    assert_eq!(res.status(), 503);
    assert_eq!(store.calls(), 1, "the refused request was counted once");
    assert!(accepted.0.lock().unwrap().is_empty(), "the handler ran");
}

#[actix_web::test]
async fn a_route_may_refuse_bodies_without_a_readable_username() {
    let server = RedisServer::start();
    let accepted = web::Data::new(Accepted::default());
    let reader = UsernameReader::json_or_form::<Login>(|l| &l.username)
        .body_limit(1024)
        .refuse_unreadable();
    let limiter = limiter(&server)
        .await
        .identity(Identities::new().route_username("POST /login", reader));
    let app = login_app(limiter, &accepted).await;
    // Brotli is not decompressed by the limiter (gzip and deflate are).
    let compressed = post_from("203.0.113.8", "/login")
        .insert_header(("content-type", "application/json"))
        .insert_header(("content-encoding", "br"))
        .set_payload(&b"\x0b\x02\x80{}\x03"[..]);
    // A name of invisible characters only, as one of spaces, is no name.
    let invisible = post_from("203.0.113.5", "/login")
        .insert_header(("content-type", "application/json"))
        .set_payload("{\"username\":\"\u{200b}\u{2060}\",\"password\":\"x\"}");
    let text = post_from("203.0.113.7", "/login")
        .insert_header(("content-type", "text/plain"))
        .set_payload("username=repro&password=x");
    for (req, reason) in [
        (text, "content type"),
        (
            attempt("203.0.113.7", Shape::Null, "repro"),
            "does not parse",
        ),
        (post_from("203.0.113.7", "/login"), "no body"),
        (compressed, "compressed"),
        (invisible, "empty"),
    ] {
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), 400, "{reason}");
        assert_eq!(
            res.headers().get("content-type").unwrap(),
            "application/problem+json"
        );
        let body: serde_json::Value = test::read_body_json(res).await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{detail}");
        assert!(detail.starts_with("POST /login"), "{detail}");
    }
    // A body over the buffer is 413, as `web::Json` answers one over its limit, whether its
    // length is declared or only found by reading.
    let padded = format!(
        r#"{{"username":"repro","password":"x","pad":"{}"}}"#,
        "x".repeat(2048)
    );
    let declared = post_from("203.0.113.6", "/login")
        .insert_header(("content-type", "application/json"))
        .set_payload(padded.clone());
    // The same body with no length declared, in chunks, as a chunked upload sends it.
    let chunks: Vec<Result<web::Bytes, actix_web::error::PayloadError>> = padded
        .into_bytes()
        .chunks(512)
        .map(|chunk| Ok(web::Bytes::copy_from_slice(chunk)))
        .collect();
    let stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = _>>> =
        Box::pin(futures_util::stream::iter(chunks));
    let (streamed, _) = post_from("203.0.113.6", "/login")
        .insert_header(("content-type", "application/json"))
        .insert_header(("transfer-encoding", "chunked"))
        .to_request()
        .replace_payload(actix_web::dev::Payload::Stream { payload: stream });
    for res in [
        test::call_service(&app, declared.to_request()).await,
        test::call_service(&app, streamed).await,
    ] {
        let status = res.status();
        let body: serde_json::Value = test::read_body_json(res).await;
        assert_eq!(status, 413, "{body}");
        assert_eq!(body["status"], 413);
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("larger than this route reads"), "{detail}");
    }
    // Refused, they still count, in the route's budget for unreadable requests of the
    // address: a client cannot send them without end.
    let mut statuses = Vec::new();
    let mut left = Vec::new();
    for _ in 0..=LIMIT {
        let res = test::call_service(&app, post_from("198.51.100.9", "/login").to_request()).await;
        statuses.push(res.status().as_u16());
        left.push(
            res.headers()
                .get("x-ratelimit-remaining")
                .map(|v| v.to_str().unwrap().to_owned()),
        );
    }
    assert_eq!(statuses, [400, 400, 400, 429]);
    // Each says what is left, as every limited answer does.
    let told: Vec<Option<&str>> = left.iter().map(Option::as_deref).collect();
    assert_eq!(told, [Some("2"), Some("1"), Some("0"), Some("0")]);
    assert_eq!(accepted.0.lock().unwrap().len(), 0, "no handler ran");
    // Readable sign-ins are counted as ever.
    let mut statuses = Vec::new();
    for _ in 0..=LIMIT {
        statuses.push(status(&app, attempt("203.0.113.7", Shape::Array, "repro")).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

/// 10,000 usernames a dictionary would hold (first names, words, with common suffixes).
fn dictionary() -> Vec<String> {
    let stems = [
        "admin",
        "root",
        "user",
        "test",
        "guest",
        "info",
        "support",
        "sales",
        "office",
        "mail",
        "james",
        "mary",
        "john",
        "patricia",
        "robert",
        "jennifer",
        "michael",
        "linda",
        "david",
        "elizabeth",
        "william",
        "barbara",
        "richard",
        "susan",
        "joseph",
        "jessica",
        "thomas",
        "sarah",
        "charles",
        "karen",
        "chris",
        "nancy",
        "daniel",
        "lisa",
        "matthew",
        "betty",
        "anthony",
        "margaret",
        "mark",
        "sandra",
        "donald",
        "ashley",
        "steven",
        "kimberly",
        "paul",
        "emily",
        "andrew",
        "donna",
        "joshua",
        "michelle",
        "kenneth",
        "carol",
        "kevin",
        "amanda",
        "brian",
        "dorothy",
        "george",
        "melissa",
        "timothy",
        "deborah",
        "ronald",
        "stephanie",
        "edward",
        "rebecca",
        "jason",
        "sharon",
        "jeffrey",
        "laura",
        "ryan",
        "cynthia",
        "jacob",
        "kathleen",
        "gary",
        "amy",
        "nicholas",
        "angela",
        "eric",
        "shirley",
        "jonathan",
        "anna",
        "stephen",
        "brenda",
        "larry",
        "pamela",
        "justin",
        "emma",
        "scott",
        "nicole",
        "brandon",
        "helen",
        "benjamin",
        "samantha",
        "samuel",
        "katherine",
        "gregory",
        "christine",
        "alexander",
        "debra",
        "frank",
        "rachel",
        "dragon",
    ];
    let suffixes = [
        "", "1", "12", "123", "1234", "01", "007", "69", "99", "2000", "2020", "2024", "_", "_1",
        ".", ".dev", "_dev", "-ops", "x", "xx", "admin", "_admin", "2", "3", "7", "88", "11", "22",
        "_test", "test", "!", "@work", ".work", "_jr", "sr", "_uk", "us", "de", "fr", "_it", "qa",
        "ops", "dev", "pro", "123!", "321", "1990", "1985", "1975", "2010", "_01", "_02", "_03",
        "a", "b", "c", "z", "_x", "_y", "_z", "9", "8", "6", "5", "4", "0", "00", "000", "1111",
        "4321", "777", "42", "13", "_42", "_13", "_99", "_2000", "_1990", "me", "_me", "home",
        "_home", "mail", "_mail", "web", "_web", "app", "_app", "one", "two", "_one", "_two",
        "real", "_real", "new", "_new", "old", "_old", "main", "_main",
    ];
    let names: Vec<String> = stems
        .iter()
        .flat_map(|stem| suffixes.iter().map(move |suffix| format!("{stem}{suffix}")))
        .take(10_000)
        .collect();
    assert_eq!(names.len(), 10_000);
    names
}

/// The `username:` segments of every key the store holds.
fn username_hashes(server: &RedisServer) -> Vec<String> {
    let mut con = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.iter()
        .map(|key| {
            let start = key.find("|username:").expect(key) + "|username:".len();
            let end = key[start..].find('}').unwrap() + start;
            key[start..end].to_owned()
        })
        .collect()
}

const SECRET: &str = "a test deployment secret, 38 bytes...";

#[actix_web::test]
async fn no_dictionary_reverses_the_keys_without_the_secret() {
    let server = RedisServer::start();
    let names = dictionary();
    let secret = || KeySecret::new(SECRET).unwrap();
    let app = test::init_service(
        App::new()
            .service(recover)
            .wrap(limiter(&server).await.keys(Keys::new().secret(secret()))),
    )
    .await;
    for (i, name) in names.iter().enumerate() {
        let req = post_from(&format!("10.0.{}.{}", i / 250, i % 250), "/recover")
            .insert_header(("content-type", "application/json"))
            .set_payload(serde_json::json!({ "username": name }).to_string());
        assert_eq!(status(&app, req).await, 200, "{name}");
    }
    let stored = username_hashes(&server);
    assert_eq!(stored.len(), names.len(), "one key per name");
    // Hashing the dictionary as a key without the secret would: nothing matches.
    let dictionary_hashes: HashSet<String> = names
        .iter()
        .flat_map(|name| [short_hash(name), format!("k.{}", short_hash(name))])
        .collect();
    assert!(stored.iter().all(|hash| !dictionary_hashes.contains(hash)));
    assert!(stored
        .iter()
        .all(|hash| hash.len() == 18 && hash.starts_with("k.")));
    // With the secret, a restarted process (a new secret from the same bytes) names the
    // same keys.
    let stored: HashSet<String> = stored.into_iter().collect();
    for name in &names {
        let identity = ClientIdentity {
            parts: vec![(IdentityPart::Username, canonical_username(name))],
            fell_back_from: None,
        };
        let key = RouteKey::for_client_keyed("rl", "POST", "/recover", &identity, &secret());
        let hash = key.as_str().rsplit("|username:").next().unwrap();
        assert!(stored.contains(hash.trim_end_matches('}')), "{name}: {key}");
    }
    // And another instance with the same secret counts in the same budget.
    let other = test::init_service(
        App::new()
            .service(recover)
            .wrap(limiter(&server).await.keys(Keys::new().secret(secret()))),
    )
    .await;
    let again = post_from("192.0.2.1", "/recover")
        .insert_header(("content-type", "application/json"))
        .set_payload(r#"{"username": "Admin"}"#);
    assert_eq!(status(&other, again).await, 429);
    // Without a secret the same name is in a plain hash, which the dictionary finds.
    let plain = test::init_service(
        App::new()
            .service(recover)
            .wrap(limiter(&server).await.keys(Keys::new().prefix("plain"))),
    )
    .await;
    let req = post_from("192.0.2.1", "/recover")
        .insert_header(("content-type", "application/json"))
        .set_payload(r#"{"username": "admin"}"#);
    assert_eq!(status(&plain, req).await, 200);
    let mut con = server.connection();
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("plain:*{}*", short_hash("admin")))
        .query(&mut con)
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
}

/// A reader given for a route the App does not declare (a scope's prefix left out, a typo)
/// would leave the route to the default reader: the limiter says so in an error line.
#[actix_web::test]
async fn a_reader_for_a_route_that_is_not_declared_is_an_error_in_the_log() {
    let captured = CapturedLog::start(tracing::Level::ERROR);
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(T0))
        .identity(
            Identities::new()
                .route_username("POST /login", UsernameReader::field("username"))
                .route_username("POST /api/login", UsernameReader::field("email")),
        );
    let accepted = web::Data::new(Accepted::default());
    let app = login_app(limiter, &accepted).await;
    assert_eq!(
        status(&app, attempt("203.0.113.7", Shape::Object, "repro")).await,
        200
    );
    let logs = captured.text();
    let unmatched: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("names no declared route"))
        .collect();
    assert_eq!(unmatched.len(), 1, "{logs}");
    assert!(unmatched[0].contains("route=POST /api/login"), "{logs}");
}
