//! One HTTP request on a limited route, through actix-web's test service, against a real
//! Redis started by the harness.

mod support;

use std::time::{Duration, Instant};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    get, post,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage::AppFactory,
    identity::{TrustedProxies, UserId, UsernameReader},
    rate_limit,
    store::{MemoryStore, RedisStore},
    RateLimiter,
};
use support::{CapturedLog, RedisServer, T0};

#[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "open")]
#[get("/orders/{id}")]
async fn get_order(id: web::Path<u32>) -> impl Responder {
    HttpResponse::Ok().body(format!("order {id}"))
}

#[rate_limit(
    limit = 3,
    window = "1m",
    identity = "ip",
    algorithm = "fixed_window",
    fail = "open"
)]
#[get("/invoices/{id}")]
async fn get_invoice() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 2,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login(body: web::Bytes) -> impl Responder {
    // Echo the body so the test can compare it byte for byte.
    HttpResponse::Ok().body(body)
}

#[rate_limit(limit = 2, window = "1s", algorithm = "gcra")]
#[rate_limit(limit = 3, window = "1m")]
#[get("/stacked")]
async fn stacked() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1m", identity = "ip", shadow = true)]
#[get("/shadow")]
async fn shadow() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1m", identity = "user_id")]
#[get("/me")]
async fn me() -> impl Responder {
    HttpResponse::Ok()
}

async fn undeclared() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .service(get_order)
        .service(get_invoice)
        .service(login)
        .service(stacked)
        .service(shadow)
        .service(me)
        .route("/undeclared", web::get().to(undeclared))
        .app_data(web::PayloadConfig::new(4 * 1024 * 1024))
        .wrap(limiter)
}

async fn redis_limiter(server: &RedisServer, clock: &ManualClock) -> RateLimiter {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("store");
    RateLimiter::new(store).clock(clock.clone())
}

fn from(ip: &str) -> TestRequest {
    TestRequest::default().peer_addr(format!("{ip}:40000").parse().unwrap())
}

fn header(res: &ServiceResponse<impl MessageBody>, name: &str) -> String {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn status_of<S, B>(app: &S, req: TestRequest) -> u16
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    test::call_service(app, req.to_request())
        .await
        .status()
        .as_u16()
}

#[actix_web::test]
async fn a_route_pattern_shares_one_budget_and_the_next_request_gets_an_exact_429() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;

    for (i, id) in [1, 2, 1].into_iter().enumerate() {
        let res = test::call_service(
            &app,
            from("203.0.113.7")
                .uri(&format!("/orders/{id}"))
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), 200, "request {i}");
        assert_eq!(header(&res, "x-ratelimit-limit"), "3");
        assert_eq!(header(&res, "x-ratelimit-remaining"), (2 - i).to_string());
        assert_eq!(header(&res, "ratelimit-policy"), "\"get_order\";q=3;w=60");
    }
    // Two more seconds into the window: a sliding window needs the whole minute to pass.
    clock.advance(Duration::from_secs(2));
    let res = test::call_service(&app, from("203.0.113.7").uri("/orders/9").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&res, "x-ratelimit-limit"), "3");
    let retry: u64 = header(&res, "retry-after").parse().unwrap();
    assert!((1..=120).contains(&retry), "retry-after {retry}");
    assert_eq!(
        header(&res, "ratelimit"),
        format!("\"get_order\";r=0;t={}", header(&res, "x-ratelimit-reset"))
    );
    assert_eq!(header(&res, "content-type"), "application/problem+json");
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after"], retry);
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("GET /orders/{id}"));

    // Another route has its own budget, and so has another client.
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/invoices/1")).await,
        200
    );
    assert_eq!(
        status_of(&app, from("198.51.100.1").uri("/orders/1")).await,
        200
    );
}

#[actix_web::test]
async fn the_retry_after_of_a_fixed_window_is_the_time_to_the_window_end() {
    let server = RedisServer::start();
    // 59.5 s into a minute window.
    let clock = ManualClock::at(T0 + 59_500);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..3 {
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/invoices/1")).await,
            200
        );
    }
    let res = test::call_service(&app, from("203.0.113.7").uri("/invoices/1").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        header(&res, "retry-after"),
        "1",
        "500 ms rounds up to one second"
    );
    clock.advance(Duration::from_millis(500));
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/invoices/1")).await,
        200
    );
}

#[actix_web::test]
async fn spoofed_leftmost_forwarded_for_entries_do_not_change_the_budget() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let limiter = redis_limiter(&server, &clock)
        .await
        .trusted_proxies(TrustedProxies::hops(1));
    let app = test::init_service(app(limiter)).await;
    let via_proxy = |xff: &str| {
        from("10.0.0.2")
            .insert_header(("x-forwarded-for", xff.to_owned()))
            .uri("/orders/1")
    };
    assert_eq!(status_of(&app, via_proxy("198.51.100.20")).await, 200);
    assert_eq!(
        status_of(&app, via_proxy("1.1.1.1, 198.51.100.20")).await,
        200
    );
    assert_eq!(
        status_of(&app, via_proxy("2.2.2.2, 3.3.3.3, 198.51.100.20")).await,
        200
    );
    assert_eq!(
        status_of(&app, via_proxy("4.4.4.4, 198.51.100.20")).await,
        429
    );
    // The next client behind the same proxy has its own budget.
    assert_eq!(status_of(&app, via_proxy("198.51.100.21")).await, 200);
}

#[actix_web::test]
async fn with_zero_trusted_hops_the_forwarding_headers_are_ignored() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for i in 0..3 {
        let req = from("10.0.0.2")
            .insert_header(("x-forwarded-for", format!("192.0.2.{i}")))
            .uri("/orders/1");
        assert_eq!(status_of(&app, req).await, 200);
    }
    let req = from("10.0.0.2")
        .insert_header(("x-forwarded-for", "192.0.2.99"))
        .uri("/orders/1");
    assert_eq!(status_of(&app, req).await, 429);
}

#[actix_web::test]
async fn the_handler_receives_the_body_byte_for_byte_and_usernames_are_normalised() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let login_as = |body: &str, content_type: &str| {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", content_type.to_owned()))
            .set_payload(body.to_owned())
    };
    let json = r#"{"username": "Alice", "password": "hunter2", "extra": [1, 2, {"x": null}]}"#;
    let res = test::call_service(&app, login_as(json, "application/json").to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(test::read_body(res).await, json.as_bytes());
    let form = "password=pw&username=+alice+";
    let res = test::call_service(
        &app,
        login_as(form, "application/x-www-form-urlencoded").to_request(),
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(test::read_body(res).await, form.as_bytes());
    // `Alice` and ` alice ` share one budget of 2.
    let res = test::call_service(
        &app,
        login_as(r#"{"username":"ALICE"}"#, "application/json").to_request(),
    )
    .await;
    assert_eq!(res.status(), 429);
    // Another username from the same address has its own budget.
    let res = test::call_service(
        &app,
        login_as(r#"{"username":"bob"}"#, "application/json").to_request(),
    )
    .await;
    assert_eq!(res.status(), 200);
}

#[actix_web::test]
async fn a_one_mebibyte_body_is_bounded_passed_on_intact_and_still_limited() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let big = format!(
        r#"{{"username": "mallory", "padding": "{}"}}"#,
        "x".repeat(1024 * 1024)
    );
    let send = || {
        from("203.0.113.66")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .set_payload(big.clone())
            .to_request()
    };
    for _ in 0..2 {
        let res = test::call_service(&app, send()).await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            test::read_body(res).await.len(),
            big.len(),
            "the handler got the whole body"
        );
    }
    // The limiter could not read the username: the request counts as the IP with the one
    // username every unreadable body shares, still limited.
    assert_eq!(test::call_service(&app, send()).await.status(), 429);
}

#[rate_limit(limit = 2, window = "5m", identity = "username", fail = "closed")]
#[post("/reset")]
async fn reset(body: web::Bytes) -> impl Responder {
    HttpResponse::Ok().body(body)
}

#[actix_web::test]
async fn requests_without_a_readable_username_share_one_budget_per_address() {
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(T0))
        .username_reader(UsernameReader::field("username").body_limit(64 * 1024));
    let app = test::init_service(App::new().service(reset).wrap(limiter)).await;
    let send = |ip: &str, content_type: &str, body: String| {
        from(ip)
            .method(actix_web::http::Method::POST)
            .uri("/reset")
            .insert_header(("content-type", content_type))
            .set_payload(body)
    };
    // From one address, every shape the limiter cannot read spends one budget: padded past
    // the buffer (the handler still reads `alice`), a body that is neither JSON nor a form,
    // a form naming the field twice (a handler reading it into a map sees the last), no
    // body, a JSON array, `null`, an object without the field.
    let padded = format!(r#"{{"username": "alice"{}}}"#, " ".repeat(70 * 1024));
    let json = "application/json";
    let mut statuses = vec![
        status_of(&app, send("198.51.100.1", json, padded.clone())).await,
        status_of(&app, send("198.51.100.1", "text/plain", "username=alice".into())).await,
    ];
    let twice = "username=decoy&username=alice".to_owned();
    let form = "application/x-www-form-urlencoded";
    statuses.push(status_of(&app, send("198.51.100.1", form, twice)).await);
    let empty = from("198.51.100.1")
        .method(actix_web::http::Method::POST)
        .uri("/reset");
    statuses.push(status_of(&app, empty).await);
    for shape in [r#"["alice"]"#, "null", r#"{"user": "alice"}"#] {
        statuses.push(status_of(&app, send("198.51.100.1", json, shape.to_owned())).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429, 429]);
    // Another address has a budget of its own for them (this route keys by username
    // alone: the address is added to the key of unreadable requests).
    assert_eq!(
        status_of(&app, send("198.51.100.2", json, padded)).await,
        200
    );
    // Readable bodies keep their own budgets, JSON under any label included.
    let plain = |user: &str| format!(r#"{{"username": "{user}"}}"#);
    for content_type in [json, "text/plain"] {
        let req = send("198.51.100.1", content_type, plain("alice"));
        assert_eq!(status_of(&app, req).await, 200, "{content_type}");
    }
    let third = send("198.51.100.3", json, plain("ALICE"));
    assert_eq!(status_of(&app, third).await, 429);
}

/// Bodies actix-web's extractors decode before the handler reads them: a form in the charset
/// it names and JSON under a form's label count against alice's budget, from any address; a
/// compressed one (which the limiter does not decompress) counts in its address's one budget
/// for unreadable bodies.
#[actix_web::test]
async fn bodies_the_handler_decodes_count_against_the_name_or_the_addresss_one_budget() {
    use std::io::Write as _;

    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(b"username=alice").unwrap();
    let gzip = gzip.finish().unwrap();
    let utf16: Vec<u8> = "username=alice"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let form = "application/x-www-form-urlencoded";
    let cases: [(&str, Option<&str>, Vec<u8>, bool); 3] = [
        (form, Some("gzip"), gzip, false),
        (
            "application/x-www-form-urlencoded; charset=utf-16le",
            None,
            utf16,
            true,
        ),
        (form, None, br#"{"username":"alice"}"#.to_vec(), true),
    ];
    for (content_type, encoding, body, read_as_alice) in cases {
        let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
        let app = test::init_service(App::new().service(reset).wrap(limiter)).await;
        let mut statuses = Vec::new();
        for i in 0..4 {
            let ip = if read_as_alice {
                format!("198.51.100.{i}")
            } else {
                "198.51.100.1".to_owned()
            };
            let mut req = from(&ip)
                .method(actix_web::http::Method::POST)
                .uri("/reset")
                .insert_header(("content-type", content_type))
                .set_payload(body.clone());
            if let Some(encoding) = encoding {
                req = req.insert_header(("content-encoding", encoding));
            }
            statuses.push(status_of(&app, req).await);
        }
        assert_eq!(
            statuses,
            [200, 200, 429, 429],
            "{content_type} {encoding:?}"
        );
        if read_as_alice {
            // Alice's budget is spent: plain JSON from yet another address is refused.
            let req = from("198.51.100.9")
                .method(actix_web::http::Method::POST)
                .uri("/reset")
                .insert_header(("content-type", "application/json"))
                .set_payload(r#"{"username":"alice"}"#);
            assert_eq!(status_of(&app, req).await, 429, "{content_type}");
        }
    }
    // A `Content-Encoding` actix does not decode (an unknown token, or a second header)
    // leaves the body as it came: the limiter reads it too.
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(reset).wrap(limiter)).await;
    for (i, encoding) in ["x-none", "identity", "gzip, gzip"].iter().enumerate() {
        let req = from(&format!("198.51.100.{i}"))
            .method(actix_web::http::Method::POST)
            .uri("/reset")
            .insert_header(("content-type", "application/json"))
            .insert_header(("content-encoding", *encoding))
            .set_payload(r#"{"username":"alice"}"#);
        let expected = if i < 2 { 200 } else { 429 };
        assert_eq!(status_of(&app, req).await, expected, "{encoding}");
    }
}

#[derive(serde::Deserialize)]
struct Credentials {
    username: String,
}

/// The demo's login shape: JSON or a form through actix-web's own extractors (JSON whatever
/// its label, when the App says so), echoing the username the handler read.
#[rate_limit(
    limit = 2,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/echo-login")]
async fn echo_login(
    json: Option<web::Json<Credentials>>,
    form: Option<web::Form<Credentials>>,
) -> impl Responder {
    match json
        .map(web::Json::into_inner)
        .or(form.map(web::Form::into_inner))
    {
        Some(credentials) => HttpResponse::Ok().body(credentials.username),
        None => HttpResponse::BadRequest().finish(),
    }
}

/// Found by review (high, and medium): bodies a client built to be read one way by the
/// handler and another by the limiter got a fresh budget per request for one username.
/// A UTF-16 form whose content type hides `charset=utf-8` in a quoted parameter before the
/// real `charset=utf-16le` was read as a UTF-8 form, in which the client placed a
/// `username` of its choosing, while `web::Form` decoded UTF-16 and read alice. And JSON
/// labelled as a form, read by a lenient `web::Json`, carried `&username=decoy&` in a
/// string that the form reading took for the field.
#[actix_web::test]
async fn bodies_read_one_way_by_the_handler_and_another_by_the_limiter_do_not_pass() {
    let utf16 =
        |text: &str| -> Vec<u8> { text.encode_utf16().flat_map(u16::to_le_bytes).collect() };
    let decoy_in_utf16 = |i: usize| {
        let mut body = utf16("username=alice&x=");
        // Read as UTF-8 bytes: `&username=decoy<i>&`, padded to whole UTF-16 units.
        let mut smuggled = format!("&username=decoy{i}&").into_bytes();
        if smuggled.len() % 2 == 1 {
            smuggled.push(b'z');
        }
        body.extend_from_slice(&smuggled);
        body
    };
    let quoted = r#"application/x-www-form-urlencoded; x="y;charset=utf-8"; charset=utf-16le"#;
    let form = "application/x-www-form-urlencoded";
    let smuggling = |i: usize| {
        format!(r#"{{"username":"alice","password":"&username=decoy{i}&"}}"#).into_bytes()
    };
    // The second reaches the handler as JSON only where `web::Json` takes any label.
    let cases = [
        (
            quoted,
            (0..5).map(decoy_in_utf16).collect::<Vec<_>>(),
            false,
        ),
        (form, (0..5).map(smuggling).collect(), true),
    ];
    for (content_type, bodies, lenient) in cases {
        let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
        let json = web::JsonConfig::default().content_type_required(!lenient);
        let app =
            test::init_service(App::new().app_data(json).service(echo_login).wrap(limiter)).await;
        let mut answers = Vec::new();
        for body in bodies {
            let req = from("203.0.113.7")
                .method(actix_web::http::Method::POST)
                .uri("/echo-login")
                .insert_header(("content-type", content_type))
                .set_payload(body);
            let res = test::call_service(&app, req.to_request()).await;
            let status = res.status().as_u16();
            let read = test::read_body(res).await;
            answers.push((status, String::from_utf8_lossy(&read).into_owned()));
        }
        // The handler read alice each time it was reached.
        assert!(
            answers
                .iter()
                .all(|(status, name)| *status == 429 || name == "alice"),
            "{content_type}: {answers:?}"
        );
        let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
        assert_eq!(
            statuses,
            [200, 200, 429, 429, 429],
            "{content_type}: {answers:?}"
        );
    }
    // A UTF-16 form is read as `web::Form` reads it: it is alice, not a shared budget.
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(echo_login).wrap(limiter)).await;
    let sign_in_as = |content_type: &str, body: Vec<u8>| {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/echo-login")
            .insert_header(("content-type", content_type.to_owned()))
            .set_payload(body)
    };
    let utf16_form = "application/x-www-form-urlencoded; charset=utf-16le";
    for _ in 0..2 {
        let req = sign_in_as(utf16_form, utf16("username=alice"));
        assert_eq!(status_of(&app, req).await, 200);
    }
    let req = sign_in_as(form, b"username=alice".to_vec());
    assert_eq!(status_of(&app, req).await, 429, "alice's budget is spent");
    let req = sign_in_as(utf16_form, utf16("username=bob"));
    assert_eq!(status_of(&app, req).await, 200, "bob has his own");
}

#[actix_web::test]
async fn an_upgrade_header_does_not_hide_the_username() {
    // Only a WebSocket handshake turns the payload into the connection; with any other
    // `Upgrade` the handler reads the body as usual, and so does the limiter.
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(reset).wrap(limiter)).await;
    let mut statuses = Vec::new();
    for i in 0..3 {
        let req = from(&format!("198.51.100.{i}"))
            .method(actix_web::http::Method::POST)
            .uri("/reset")
            .insert_header(("upgrade", "h2c"))
            .insert_header(("content-type", "application/json"))
            .set_payload(r#"{"username": "alice"}"#);
        statuses.push(status_of(&app, req).await);
    }
    assert_eq!(
        statuses,
        [200, 200, 429],
        "2 per 5 minutes for alice, from any address"
    );
}

#[actix_web::test]
async fn stacked_limits_must_all_pass() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/stacked")).await,
        200
    );
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/stacked")).await,
        200
    );
    // 2 per second is spent.
    let res = test::call_service(&app, from("203.0.113.7").uri("/stacked").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"stacked.0\";q=2;w=1, \"stacked.1\";q=3;w=60"
    );
    assert!(header(&res, "ratelimit").starts_with("\"stacked.0\";r=0;"));
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/stacked")).await,
        200
    );
    // Now 3 per minute is spent, although the per-second budget is back.
    clock.advance(Duration::from_secs(2));
    let res = test::call_service(&app, from("203.0.113.7").uri("/stacked").to_request()).await;
    assert_eq!(res.status(), 429);
    assert!(
        header(&res, "ratelimit").starts_with("\"stacked.1\";r=0;"),
        "{}",
        header(&res, "ratelimit")
    );
}

#[actix_web::test]
async fn shadow_routes_never_reject() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..5 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/shadow").to_request()).await;
        assert_eq!(res.status(), 200);
    }
    let res = test::call_service(&app, from("203.0.113.7").uri("/shadow").to_request()).await;
    assert_eq!(res.status(), 200);
    assert!(
        res.headers().get("x-ratelimit-remaining").is_none()
            && res.headers().get("ratelimit").is_none(),
        "a shadow limit sends no headers that would make clients back off"
    );
}

#[actix_web::test]
async fn an_undeclared_route_gets_the_default_policy() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..120 {
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/undeclared")).await,
            200
        );
    }
    let res = test::call_service(&app, from("203.0.113.7").uri("/undeclared").to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "ratelimit-policy"), "\"default\";q=120;w=60");
    // Requests that match no route are limited too.
    let res = test::call_service(&app, from("203.0.113.8").uri("/no/such/page").to_request()).await;
    assert_eq!(res.status(), 404);
    assert_eq!(header(&res, "x-ratelimit-limit"), "120");
}

#[actix_web::test]
async fn user_id_comes_from_the_auth_layer_extension_not_a_header() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(app(limiter).wrap_fn(|req, srv| {
        use actix_web::HttpMessage;
        if let Some(user) = req
            .headers()
            .get("x-test-session")
            .and_then(|v| v.to_str().ok())
        {
            req.extensions_mut().insert(UserId(user.to_owned()));
        }
        srv.call(req)
    }))
    .await;
    let as_user = |user: &str| {
        from("203.0.113.7")
            .insert_header(("x-test-session", user.to_owned()))
            .uri("/me")
    };
    assert_eq!(status_of(&app, as_user("u1")).await, 200);
    assert_eq!(status_of(&app, as_user("u1")).await, 429);
    assert_eq!(
        status_of(&app, as_user("u2")).await,
        200,
        "another user, same address"
    );
    // Without a user the identity falls back to the IP and is still limited.
    assert_eq!(status_of(&app, from("203.0.113.9").uri("/me")).await, 200);
    assert_eq!(
        status_of(
            &app,
            from("203.0.113.9")
                .insert_header(("x-user-id", "forged"))
                .uri("/me")
        )
        .await,
        429
    );
}

#[actix_web::test]
async fn when_redis_dies_closed_routes_answer_503_and_open_routes_pass_then_both_recover() {
    let mut server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let login_req = || {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .set_payload(r#"{"username":"carol"}"#)
    };
    assert_eq!(status_of(&app, login_req()).await, 200);
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let res = test::call_service(&app, login_req().to_request()).await;
        assert_eq!(res.status(), 503);
        assert!(header(&res, "retry-after").parse::<u64>().unwrap() >= 1);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        let started = Instant::now();
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
            200
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }
    server.start_again();
    let mut recovered = false;
    for _ in 0..100 {
        if status_of(&app, login_req()).await == 200 {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        recovered,
        "the closed route recovers without an app restart"
    );
    let res = test::call_service(&app, from("203.0.113.7").uri("/orders/2").to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        header(&res, "x-ratelimit-limit"),
        "3",
        "decisions are made again"
    );
}

#[actix_web::test]
async fn shielded_keys_are_answered_without_a_script_call() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for _ in 0..3 {
        assert_eq!(
            status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
            200
        );
    }
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
        429
    );
    let mut con = server.connection();
    let calls = |con: &mut redis::Connection| -> u64 {
        let stats: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
        stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    let before = calls(&mut con);
    for _ in 0..50 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/orders/1").to_request()).await;
        assert_eq!(res.status(), 429);
        assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
    }
    assert_eq!(calls(&mut con), before, "no script call for a shielded key");
    // Other clients still reach Redis.
    assert_eq!(
        status_of(&app, from("203.0.113.8").uri("/orders/1")).await,
        200
    );
    assert_eq!(calls(&mut con), before + 1);
    // Once the retry time passes, the key is decided by Redis again.
    clock.advance(Duration::from_secs(120));
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/orders/1")).await,
        200
    );
}

/// `tracing` caches a callsite's interest process-wide when it is first reached; a callsite
/// another test thread reaches first must still reach this thread's capture (a CI run missed
/// "request rejected" that way).
#[test]
fn a_capture_sees_events_whose_callsite_another_thread_reached_first() {
    fn event() {
        tracing::warn!(target: "capture_check", "reached");
    }
    let captured = CapturedLog::start(tracing::Level::WARN);
    std::thread::spawn(event).join().unwrap();
    event();
    assert!(captured.text().contains("reached"), "{}", captured.text());
}

#[actix_web::test]
async fn logs_name_the_route_and_identity_kind_but_never_a_username_or_key() {
    let captured = CapturedLog::start(tracing::Level::DEBUG);

    let mut server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    let login_req = |user: &str| {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/login")
            .insert_header(("content-type", "application/json"))
            .insert_header(("authorization", "Bearer sk_live_TOPSECRET"))
            .set_payload(format!(
                r#"{{"username":"{user}","password":"PanGalactic"}}"#
            ))
    };
    for _ in 0..4 {
        test::call_service(&app, login_req("Zaphod.Beeblebrox").to_request()).await;
    }
    server.kill();
    // Another user: not in the flood shield, so the store is asked and is down.
    assert_eq!(status_of(&app, login_req("Trillian.Astra")).await, 503);

    let logs = captured.text();
    assert!(logs.contains("request rejected"), "{logs}");
    assert!(logs.contains("route=POST /login"), "{logs}");
    assert!(logs.contains("identity=ip+username"), "{logs}");
    assert!(logs.contains("rate-limit store"), "{logs}");
    let lower = logs.to_lowercase();
    for secret in [
        "zaphod",
        "beeblebrox",
        "trillian",
        "sk_live",
        "topsecret",
        "pangalactic",
    ] {
        assert!(
            !lower.contains(secret),
            "`{secret}` leaked into the logs:\n{logs}"
        );
    }
}

mod shared_path {
    use actix_web::{get, guard::GuardContext, HttpResponse, Responder};
    use ratelimit_runtime::rate_limit;

    pub fn is_v2(ctx: &GuardContext<'_>) -> bool {
        ctx.head().headers().contains_key("x-v2")
    }

    #[rate_limit(limit = 1, window = "1m", identity = "ip")]
    #[get("/items", guard = "is_v2")]
    pub async fn items_v2() -> impl Responder {
        HttpResponse::Ok().body("v2")
    }

    #[rate_limit(limit = 1, window = "1m", identity = "ip")]
    #[get("/shadowed")]
    pub async fn shadowed() -> impl Responder {
        HttpResponse::Ok().body("declared")
    }
}

async fn v1() -> HttpResponse {
    HttpResponse::Ok().body("v1")
}

#[actix_web::test]
async fn a_resource_sharing_a_declared_path_through_a_custom_guard_gets_the_default_policy() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(
        App::new()
            .service(shared_path::items_v2)
            .route("/items", web::get().to(v1))
            .wrap(limiter),
    )
    .await;
    let mut allowed = 0;
    for _ in 0..130 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/items").to_request()).await;
        if res.status() == 200 {
            assert_eq!(test::read_body(res).await, "v1");
            allowed += 1;
        }
    }
    assert_eq!(
        allowed, 120,
        "the undeclared resource is held to the default policy"
    );
}

#[actix_web::test]
async fn a_resource_shadowing_a_declared_route_is_limited_after_its_first_request() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(
        App::new()
            .route("/shadowed", web::get().to(v1))
            .service(shared_path::shadowed)
            .wrap(limiter),
    )
    .await;
    let mut allowed = 0;
    for _ in 0..130 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/shadowed").to_request()).await;
        if res.status() == 200 {
            assert_eq!(
                test::read_body(res).await,
                "v1",
                "actix serves the first resource"
            );
            allowed += 1;
        }
    }
    assert!(
        (120..=121).contains(&allowed),
        "allowed {allowed}: at most one request slips through"
    );
}

#[rate_limit(limit = 4, window = "1m", identity = "ip", fail = "closed")]
#[get("/per-worker")]
async fn per_worker() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Each actix worker checks over a Redis connection of its own (driven on that worker's
/// thread, so a check never crosses threads), and every worker counts in the same budget.
#[actix_web::test]
async fn every_worker_checks_over_its_own_connection_and_all_share_one_budget() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, &ManualClock::at(T0)).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http =
        actix_web::HttpServer::new(move || App::new().service(per_worker).wrap(limiter.clone()))
            .workers(2)
            .listen(listener)
            .unwrap()
            .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);

    // The store's own connection and one per worker, each warmed up with a PING.
    let started = Instant::now();
    while server.client_commands().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "expected 3 connections, Redis has {:?}",
            server.client_commands()
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }

    // A new TCP connection per request: actix hands them to its workers in turn.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let client = awc::Client::new();
        let response = client
            .get(format!("http://127.0.0.1:{port}/per-worker"))
            .insert_header(("connection", "close"))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);

    let mut clients = server.client_commands();
    clients.sort();
    // Both workers ran the script (the first one there with EVAL, after NOSCRIPT); the
    // store's own connection only said PING; no connection was opened per request.
    assert_eq!(clients.len(), 3, "{clients:?}");
    assert_eq!(clients[2], "ping", "{clients:?}");
    assert!(
        clients[..2].iter().all(|cmd| cmd == "evalsha"),
        "{clients:?}"
    );
    handle.stop(true).await;
}

mod own_middleware {
    use actix_web::{
        body::MessageBody,
        dev::{ServiceRequest, ServiceResponse},
        get,
        http::header::{HeaderName, HeaderValue},
        middleware::Next,
        post, Error, HttpMessage as _, HttpRequest, HttpResponse, Responder,
    };
    use ratelimit_runtime::{identity::UserId, rate_limit};

    pub use crate::support::auth::{answers_401, errs_401};

    #[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "closed")]
    #[get("/admin", wrap = "actix_web::middleware::from_fn(answers_401)")]
    pub async fn admin() -> impl Responder {
        HttpResponse::Ok().body("admin")
    }

    #[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "closed")]
    #[get("/vault", wrap = "actix_web::middleware::from_fn(errs_401)")]
    pub async fn vault() -> impl Responder {
        HttpResponse::Ok().body("vault")
    }

    /// Counted per API key, behind the auth that refuses unknown ones: with an answer here,
    /// with an error below.
    #[rate_limit(limit = 2, window = "1m", identity = "api_key", fail = "closed")]
    #[get("/keyed-admin", wrap = "actix_web::middleware::from_fn(answers_401)")]
    pub async fn keyed_admin() -> impl Responder {
        HttpResponse::Ok().body("admin")
    }

    #[rate_limit(limit = 2, window = "1m", identity = "api_key", fail = "closed")]
    #[get("/keyed-vault", wrap = "actix_web::middleware::from_fn(errs_401)")]
    pub async fn keyed_vault() -> impl Responder {
        HttpResponse::Ok().body("vault")
    }

    /// Rewrites a request header, as middleware that normalises requests does: it needs the
    /// request unshared (`ServiceRequest::headers_mut`).
    pub async fn tags_request(
        mut req: ServiceRequest,
        next: Next<impl MessageBody + 'static>,
    ) -> Result<ServiceResponse<impl MessageBody>, Error> {
        req.headers_mut().insert(
            HeaderName::from_static("x-tagged"),
            HeaderValue::from_static("yes"),
        );
        next.call(req).await
    }

    #[rate_limit(limit = 2, window = "1m", identity = "ip", fail = "closed")]
    #[get("/tagged", wrap = "actix_web::middleware::from_fn(tags_request)")]
    pub async fn tagged(req: HttpRequest) -> impl Responder {
        let tag = req.headers().get("x-tagged").cloned();
        HttpResponse::Ok().body(tag.map(|v| v.as_bytes().to_vec()).unwrap_or_default())
    }

    /// A sign-in counted per address and submitted username, behind auth of its own.
    #[rate_limit(limit = 2, window = "1m", identity = "ip+username", fail = "closed")]
    #[post("/signin", wrap = "actix_web::middleware::from_fn(answers_401)")]
    pub async fn signin() -> impl Responder {
        HttpResponse::Ok().body("signed in")
    }

    /// The same, served under a scope whose middleware refuses with an error.
    #[rate_limit(limit = 2, window = "1m", identity = "ip+username", fail = "closed")]
    #[post("/signin")]
    pub async fn scoped_signin() -> impl Responder {
        HttpResponse::Ok().body("signed in")
    }

    /// Sends a client that is not signed in to the login page; a signed-in one goes on with
    /// its user id.
    pub async fn login_redirect(
        req: ServiceRequest,
        next: Next<impl MessageBody + 'static>,
    ) -> Result<ServiceResponse<impl MessageBody>, Error> {
        let Some(user) = req.headers().get("authorization").cloned() else {
            let to_login = HttpResponse::SeeOther()
                .insert_header(("location", "/login"))
                .finish();
            return Ok(req.into_response(to_login).map_into_right_body());
        };
        let user = String::from_utf8_lossy(user.as_bytes()).into_owned();
        req.extensions_mut().insert(UserId(user));
        Ok(next.call(req).await?.map_into_left_body())
    }

    #[rate_limit(limit = 300, window = "1m", identity = "user_id")]
    #[get("/profile")]
    pub async fn profile() -> impl Responder {
        HttpResponse::Ok().body("profile")
    }

    /// Served under a scope whose middleware refuses with an error.
    #[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "closed")]
    #[get("/panel")]
    pub async fn panel() -> impl Responder {
        HttpResponse::Ok().body("panel")
    }

    /// Takes its time (a session lookup, say).
    pub async fn slow_session(
        req: ServiceRequest,
        next: Next<impl MessageBody + 'static>,
    ) -> Result<ServiceResponse<impl MessageBody>, Error> {
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
        next.call(req).await
    }

    #[rate_limit(limit = 2, window = "1m", identity = "ip", fail = "open")]
    #[get(
        "/reports",
        guard = "is_json",
        wrap = "actix_web::middleware::from_fn(slow_session)"
    )]
    pub async fn reports() -> impl Responder {
        HttpResponse::Ok().body("reports")
    }

    pub fn is_json(ctx: &actix_web::guard::GuardContext<'_>) -> bool {
        ctx.head().headers().contains_key("accept")
    }

    /// The default policy's algorithm and window, behind a custom guard.
    #[rate_limit(limit = 10, window = "1m")]
    #[get("/feed", guard = "is_json")]
    pub async fn feed() -> impl Responder {
        HttpResponse::Ok().body("feed")
    }
}

/// Three wrong passwords to `path` (limit 3 per minute by IP), refused by auth in front of
/// the route's guard, spend the budget: the next guess and the right password get the
/// route's 429, another client does not; once the window lets the client in again, the right
/// password reaches the handler (each refusal counted once), which answers `body`.
async fn refusals_count_against_the_limit<S, B>(
    app: &S,
    clock: &ManualClock,
    path: &str,
    body: &str,
) where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    let guess = |ip: &str, password: &str| {
        from(ip)
            .uri(path)
            .insert_header(("authorization", format!("Basic {password}")))
    };
    for i in 0..3 {
        let res = answer_of(app, guess("203.0.113.7", &format!("wrong{i}"))).await;
        assert_eq!(
            res.status(),
            401,
            "{path}: guess {i} is refused by the auth"
        );
    }
    let res = answer_of(app, guess("203.0.113.7", "wrong3")).await;
    assert_eq!(res.status(), 429, "{path}: the refusals spent the budget");
    assert!(res.headers().contains_key("x-ratelimit-limit"), "{path}");
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok());
    let retry: u64 = retry.and_then(|v| v.parse().ok()).expect("Retry-After");
    // Wrong and right passwords now look alike.
    let res = answer_of(app, guess("203.0.113.7", "right")).await;
    assert_eq!(res.status(), 429, "{path}");
    let res = answer_of(app, guess("203.0.113.8", "wrong")).await;
    assert_eq!(
        res.status(),
        401,
        "{path}: another client has its own budget"
    );
    clock.advance(Duration::from_secs(retry));
    let res = test::call_service(app, guess("203.0.113.7", "right").to_request()).await;
    assert_eq!(res.status(), 200, "{path}");
    assert_eq!(test::read_body(res).await, body, "{path}");
}

#[actix_web::test]
async fn what_a_routes_own_middleware_refuses_counts_against_its_limit() {
    // `/admin`'s middleware refuses with an answer, `/vault`'s with an error (as
    // actix-web-httpauth does), which actix's server turns into the answer.
    for path in ["/admin", "/vault"] {
        let clock = ManualClock::at(T0);
        let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
        let app = test::init_service(
            App::new()
                .service(own_middleware::admin)
                .service(own_middleware::vault)
                .wrap(limiter),
        )
        .await;
        refusals_count_against_the_limit(&app, &clock, path, &path[1..]).await;
    }
}

/// A refused API key may be made up: each guess must not get a budget of its own, whether
/// the route's auth refuses with an answer or with an error; both count by address (found by
/// review: guesses refused with a 401 answer were never limited).
#[actix_web::test]
async fn guessed_api_keys_count_by_address_when_the_routes_auth_refuses_them() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(own_middleware::keyed_admin)
            .service(own_middleware::keyed_vault)
            .wrap(limiter),
    )
    .await;
    for path in ["/keyed-admin", "/keyed-vault"] {
        let mut statuses = Vec::new();
        for guess in 0..5 {
            let req = from("203.0.113.7")
                .uri(path)
                .insert_header(("x-api-key", format!("guess-{guess}")))
                .to_request();
            // An error becomes the answer actix's server would send.
            statuses.push(match app.call(req).await {
                Ok(response) => response.status().as_u16(),
                Err(error) => error.error_response().status().as_u16(),
            });
        }
        assert_eq!(statuses, [401, 401, 429, 429, 429], "{path}");
    }
}

#[actix_web::test]
async fn what_a_scopes_middleware_refuses_with_an_error_counts_against_the_routes_limit() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/admin")
                    .wrap(actix_web::middleware::from_fn(own_middleware::errs_401))
                    .service(own_middleware::panel),
            )
            .wrap(limiter),
    )
    .await;
    refusals_count_against_the_limit(&app, &clock, "/admin/panel", "panel").await;
}

#[actix_web::test]
async fn a_routes_own_middleware_may_rewrite_the_request() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(own_middleware::tagged).wrap(limiter)).await;
    for _ in 0..2 {
        let res = test::call_service(&app, from("203.0.113.7").uri("/tagged").to_request()).await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            test::read_body(res).await,
            "yes",
            "the rewrite reached the handler"
        );
    }
    assert_eq!(
        status_of(&app, from("203.0.113.7").uri("/tagged")).await,
        429
    );
}

/// The answer of `app` to `req`, whether it came back as a response or as an error (which
/// actix's server renders with `ResponseError::error_response`).
async fn answer_of<S, B>(app: &S, req: TestRequest) -> HttpResponse
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    match app.call(req.to_request()).await {
        Ok(res) => res.into_parts().1.map_into_boxed_body(),
        Err(err) => {
            // Middleware on the way out may ask an error for its answer before the server
            // does: the answer must not change.
            let first = err.error_response();
            let again = err.error_response();
            assert_eq!(first.status(), again.status(), "{err}");
            assert_eq!(first.headers().len(), again.headers().len(), "{err}");
            first
        }
    }
}

/// Two refused sign-ins as alice (limit 2 per minute per address and username), one a form
/// and one JSON, spend alice's budget at that address: her right password then gets the
/// 429 too, so refusals cannot be told from a success; bob's budget is his own.
async fn refused_sign_ins_spend_the_usernames_budget<S, B>(app: &S, path: &str)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    let sign_in = |user: &str, password: &str, json: bool| {
        let (kind, body) = if json {
            ("application/json", format!(r#"{{"username":"{user}"}}"#))
        } else {
            (
                "application/x-www-form-urlencoded",
                format!("username={user}"),
            )
        };
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri(path)
            .insert_header(("authorization", format!("Basic {password}")))
            .insert_header(("content-type", kind))
            .set_payload(body)
    };
    let res = answer_of(app, sign_in("alice", "wrong", false)).await;
    assert_eq!(res.status(), 401, "{path}");
    let res = answer_of(app, sign_in("alice", "wrong", true)).await;
    assert_eq!(res.status(), 401, "{path}");
    let res = answer_of(app, sign_in("alice", "right", false)).await;
    assert_eq!(
        res.status(),
        429,
        "{path}: the refusals spent alice's budget"
    );
    let res = answer_of(app, sign_in("bob", "right", true)).await;
    assert_eq!(res.status(), 200, "{path}: bob has a budget of his own");
}

#[actix_web::test]
async fn refused_sign_ins_count_against_the_submitted_username() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(own_middleware::signin).wrap(limiter)).await;
    refused_sign_ins_spend_the_usernames_budget(&app, "/signin").await;

    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/account")
                    .wrap(actix_web::middleware::from_fn(own_middleware::errs_401))
                    .service(own_middleware::scoped_signin),
            )
            .wrap(limiter),
    )
    .await;
    refused_sign_ins_spend_the_usernames_budget(&app, "/account/signin").await;
}

#[actix_web::test]
async fn a_second_limiter_on_a_scope_does_not_count_a_declared_route_twice() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/admin")
                    .wrap(limiter.clone())
                    .service(own_middleware::panel),
            )
            .wrap(limiter),
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(status_of(&app, from("203.0.113.7").uri("/admin/panel")).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "3 per minute declared");
}

mod posts {
    use actix_web::{get, Responder};
    use ratelimit_runtime::rate_limit;

    #[rate_limit(limit = 1, window = "1m", identity = "ip", algorithm = "gcra")]
    #[get("/posts/{id:\\d+}")]
    pub async fn by_number() -> impl Responder {
        "by number"
    }

    #[rate_limit(limit = 100, window = "1m", identity = "ip")]
    #[get("/posts/{id}")]
    pub async fn by_slug() -> impl Responder {
        "by slug"
    }
}

#[actix_web::test]
async fn routes_that_differ_only_in_a_parameters_regex_count_apart() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(posts::by_number)
            .service(posts::by_slug)
            .wrap(limiter),
    )
    .await;
    let get = |path: &str| from("203.0.113.7").uri(path);
    assert_eq!(status_of(&app, get("/posts/1")).await, 200);
    assert_eq!(status_of(&app, get("/posts/1")).await, 429);
    // Neither the counter nor the flood shield's memory of that 429 is the other route's.
    let res = test::call_service(&app, get("/posts/hello").to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(test::read_body(res).await, "by slug");
}

#[actix_web::test]
async fn a_scopes_redirect_to_its_login_page_leaves_the_declared_limit_alone() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/account")
                    .wrap(actix_web::middleware::from_fn(
                        own_middleware::login_redirect,
                    ))
                    .service(own_middleware::profile),
            )
            .wrap(limiter),
    )
    .await;
    let anonymous = from("198.51.100.1").uri("/account/profile");
    assert_eq!(status_of(&app, anonymous).await, 303);
    // The redirect was a refusal, not another resource serving the path: the declared 300
    // per minute by user id applies, not the default 120 on top of it.
    let mut allowed = 0;
    for _ in 0..150 {
        let signed_in = from("203.0.113.7")
            .uri("/account/profile")
            .insert_header(("authorization", "u1"));
        if status_of(&app, signed_in).await == 200 {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 150);
}

mod items {
    use actix_web::{get, post, Responder};
    use ratelimit_runtime::rate_limit;

    #[rate_limit(exempt = "the empty form")]
    #[get("/items/new")]
    pub async fn new_item_form() -> impl Responder {
        "form"
    }

    #[rate_limit(limit = 200, window = "1m", identity = "ip", fail = "open")]
    #[post("/items/{id}")]
    pub async fn update_item() -> impl Responder {
        "updated"
    }
}

fn items_app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .service(items::new_item_form)
        .service(items::update_item)
        .wrap(limiter)
}

/// `POST /items/new` first matches `GET /items/new`'s path; the router passes over that
/// resource (wrong method) to `POST /items/{id}`, whose declaration alone must apply.
#[actix_web::test]
async fn a_declared_route_reached_past_another_methods_resource_keeps_its_own_policy() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let limiter = RateLimiter::from_arc(store.clone()).clock(ManualClock::at(T0));
    ratelimit_runtime::coverage::assert_covered(items_app(limiter.clone())).await;
    let app = test::init_service(items_app(limiter)).await;
    let post_new = || {
        from("203.0.113.7")
            .method(actix_web::http::Method::POST)
            .uri("/items/new")
    };
    let mut allowed = 0;
    for _ in 0..150 {
        if status_of(&app, post_new()).await == 200 {
            allowed += 1;
        }
    }
    let keys: Vec<String> = store.entries().into_iter().map(|(key, _)| key).collect();
    assert_eq!(
        allowed, 150,
        "200 per minute declared, not the default 120: {keys:?}"
    );
    assert!(
        keys.iter().all(|key| key.contains("POST:/items/:id|")),
        "{keys:?}"
    );

    // During an outage the route's own failure policy applies (open), not the default
    // policy's for POST (closed), and one store call waits, not two.
    let limiter = RateLimiter::new(Unreachable).timeout(Duration::from_millis(20));
    let app = test::init_service(items_app(limiter)).await;
    assert_eq!(status_of(&app, post_new()).await, 200);
}

/// A store that never answers, as a Redis behind a dead network path: every call runs into
/// the limiter's timeout.
struct Unreachable;

impl ratelimit_runtime::store::Store for Unreachable {
    fn check<'a>(
        &'a self,
        _: ratelimit_runtime::store::CheckRequest<'a>,
    ) -> ratelimit_runtime::store::CheckFuture<'a> {
        Box::pin(std::future::pending())
    }

    fn kind(&self) -> &'static str {
        "unreachable"
    }
}

/// A store that is down: every call fails at once, and is counted.
#[derive(Clone, Default)]
struct Down(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl ratelimit_runtime::store::Store for Down {
    fn check<'a>(
        &'a self,
        _: ratelimit_runtime::store::CheckRequest<'a>,
    ) -> ratelimit_runtime::store::CheckFuture<'a> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async {
            Err(ratelimit_runtime::store::StoreError::new(
                ratelimit_runtime::store::StoreErrorKind::Connection,
                "connection refused",
            ))
        })
    }

    fn kind(&self) -> &'static str {
        "down"
    }
}

#[actix_web::test]
async fn a_request_two_policies_apply_to_asks_a_failed_store_once() {
    // A custom guard shares `/feed`'s path, so the default policy and the declaration both
    // apply (README, Limitations): with the store down, the second check must not wait for
    // it again (each call may take up to the timeout).
    let store = Down::default();
    let limiter = RateLimiter::new(store.clone()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(own_middleware::feed).wrap(limiter)).await;
    let req = from("203.0.113.7")
        .uri("/feed")
        .insert_header(("accept", "application/json"));
    // Both fail open (a GET, and the declaration's default): the handler answers.
    assert_eq!(status_of(&app, req).await, 200);
    assert_eq!(store.0.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A store that answers after a delay (a degraded Redis), counting the answers it completes.
#[derive(Clone)]
struct Slow(
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    Duration,
    std::sync::Arc<MemoryStore>,
);

impl Slow {
    fn new(delay: Duration) -> Self {
        Slow(
            Default::default(),
            delay,
            std::sync::Arc::new(MemoryStore::new()),
        )
    }
}

impl ratelimit_runtime::store::Store for Slow {
    fn check<'a>(
        &'a self,
        request: ratelimit_runtime::store::CheckRequest<'a>,
    ) -> ratelimit_runtime::store::CheckFuture<'a> {
        let (answered, delay, memory) = (self.0.clone(), self.1, self.2.clone());
        let limits = request.limits.to_vec();
        let key = request.key.clone();
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let request = ratelimit_runtime::store::CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(T0),
            };
            memory.check(request).await
        })
    }

    fn kind(&self) -> &'static str {
        "slow"
    }
}

#[actix_web::test]
async fn a_request_two_policies_apply_to_waits_the_timeout_once_in_all() {
    // Each check alone fits in the 50 ms timeout; the two checks of one request (the
    // default policy and `/feed`'s declaration) must too, together: the second gets what
    // the first left, and is given up.
    let store = Slow::new(Duration::from_millis(40));
    let limiter = RateLimiter::new(store.clone())
        .clock(ManualClock::at(T0))
        .timeout(Duration::from_millis(50));
    let app = test::init_service(App::new().service(own_middleware::feed).wrap(limiter)).await;
    let req = from("203.0.113.7")
        .uri("/feed")
        .insert_header(("accept", "application/json"));
    // Fail open (a GET): the handler answers either way.
    assert_eq!(status_of(&app, req).await, 200);
    assert!(store.0.load(std::sync::atomic::Ordering::SeqCst) <= 1);
}

#[actix_web::test]
async fn time_spent_in_middleware_between_two_checks_is_not_store_time() {
    // `/reports`: the default policy and its declaration both apply (a custom guard), and
    // its own middleware takes 80 ms between the two checks. The store answers in 2 ms;
    // the declared 2 per minute must apply, not be given up for want of time.
    let limiter = RateLimiter::new(Slow::new(Duration::from_millis(2)))
        .clock(ManualClock::at(T0))
        .timeout(Duration::from_millis(50));
    let app = test::init_service(App::new().service(own_middleware::reports).wrap(limiter)).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let req = from("203.0.113.7")
            .uri("/reports")
            .insert_header(("accept", "application/json"));
        statuses.push(status_of(&app, req).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}

async fn refuse() -> HttpResponse {
    HttpResponse::Unauthorized().body("not here")
}

#[actix_web::test]
async fn a_resource_shadowing_a_declared_route_with_refusals_is_limited_by_it() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .route("/shadowed", web::get().to(refuse))
            .service(shared_path::shadowed)
            .wrap(limiter),
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(status_of(&app, from("203.0.113.7").uri("/shadowed")).await);
    }
    assert_eq!(statuses, [401, 429, 429], "the declared 1 per minute holds");
}

#[actix_web::test]
async fn where_two_policies_apply_the_routes_own_headers_stand() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(own_middleware::feed).wrap(limiter)).await;
    let feed = || {
        from("203.0.113.7")
            .uri("/feed")
            .insert_header(("accept", "application/json"))
    };
    // The default policy (120 per minute) applies to `/feed` as well as its declared 10:
    // the answer carries the declared limit's figures, not the default's laid over them.
    let res = test::call_service(&app, feed().to_request()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "x-ratelimit-limit"), "10");
    assert_eq!(header(&res, "x-ratelimit-remaining"), "9");
    assert!(header(&res, "ratelimit-policy").starts_with("\"feed\""));
    for _ in 0..9 {
        test::call_service(&app, feed().to_request()).await;
    }
    let res = test::call_service(&app, feed().to_request()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "x-ratelimit-limit"), "10");
    assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
}

async fn database_down() -> HttpResponse {
    HttpResponse::ServiceUnavailable().body("database down")
}

#[actix_web::test]
async fn an_undeclared_routes_own_503_keeps_the_default_policys_headers() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .route("/down", web::get().to(database_down))
            .wrap(limiter),
    )
    .await;
    let res = test::call_service(&app, from("203.0.113.7").uri("/down").to_request()).await;
    assert_eq!(res.status(), 503);
    assert_eq!(header(&res, "x-ratelimit-remaining"), "119");
}

async fn fails_with_an_error() -> Result<HttpResponse, actix_web::Error> {
    Err(actix_web::error::ErrorBadRequest("bad input"))
}

/// An error from further in (a scope's auth layer, as actix-web-httpauth refuses; a handler)
/// answers with the limit's headers like any other limited answer (found by review: the
/// error's answer had none).
#[actix_web::test]
async fn an_error_from_further_in_keeps_the_limits_headers() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/admin")
                    .wrap(actix_web::middleware::from_fn(own_middleware::errs_401))
                    .route("/undeclared", web::get().to(HttpResponse::Ok)),
            )
            .route("/fails", web::get().to(fails_with_an_error))
            .wrap(limiter),
    )
    .await;
    for (path, status, remaining) in [
        ("/admin/undeclared", 401, "119"),
        ("/admin/undeclared", 401, "118"),
        ("/fails", 400, "119"),
    ] {
        let req = from("203.0.113.7").uri(path).to_request();
        let res = match app.call(req).await {
            Ok(res) => res.into_parts().1.map_into_boxed_body(),
            Err(error) => {
                // Still the error it was, for logs.
                if path == "/fails" {
                    assert_eq!(error.to_string(), "bad input");
                }
                error.error_response()
            }
        };
        assert_eq!(res.status().as_u16(), status, "{path}");
        assert_eq!(
            res.headers()
                .get("x-ratelimit-remaining")
                .map(|v| v.to_str().unwrap()),
            Some(remaining),
            "{path}: {:?}",
            res.headers()
        );
    }
}

#[actix_web::test]
async fn a_custom_guard_does_not_make_the_default_policy_count_in_the_declared_budget() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(own_middleware::feed).wrap(limiter)).await;
    let mut allowed = 0;
    for _ in 0..20 {
        let req = from("203.0.113.7")
            .uri("/feed")
            .insert_header(("accept", "application/json"));
        if status_of(&app, req).await == 200 {
            allowed += 1;
        }
    }
    // Both policies apply (the path alone cannot tell which resource serves it), each in a
    // bucket of its own: the declared 10 binds, not 5.
    assert_eq!(allowed, 10);
}
