//! Request bodies on routes counted by username: the handler gets them intact, usernames are
//! normalised, and bodies the limiter cannot read the way the handler does count in one
//! budget per address instead of a fresh one per request.

use actix_web::{post, test, web, App, HttpResponse, Responder};
use ratelimit_runtime::settings::Identities;
use ratelimit_runtime::{
    clock::ManualClock, identity::UsernameReader, rate_limit, store::MemoryStore, RateLimiter,
};

use crate::{
    app, from, redis_limiter, status_of,
    support::{RedisServer, T0},
};

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
        .identity(
            Identities::new().username(UsernameReader::field("username").body_limit(64 * 1024)),
        );
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
        status_of(
            &app,
            send("198.51.100.1", "text/plain", "username=alice".into()),
        )
        .await,
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

/// Bodies actix-web's extractors decode before the handler reads them: a gzip form (which
/// the limiter decompresses as actix does), a form in the charset it names and JSON under a
/// form's label count against alice's budget, from any address; a brotli one (which the
/// limiter does not decompress) counts in its address's one budget for unreadable bodies.
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
    let cases: [(&str, Option<&str>, Vec<u8>, bool); 4] = [
        (form, Some("gzip"), gzip, true),
        (form, Some("br"), b"not read".to_vec(), false),
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

/// Bodies a client builds to be read one way by the handler and another by the limiter do not get a
/// fresh budget per request for one username. A UTF-16 form whose content type hides
/// `charset=utf-8` in a quoted parameter before the real `charset=utf-16le` must not be read as a
/// UTF-8 form, in which the client placed a `username` of its choosing, while `web::Form` decodes
/// UTF-16 and reads alice. And JSON labelled as a form, read by a lenient `web::Json`, carries
/// `&username=decoy&` in a string that a form reading would take for the field.
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
