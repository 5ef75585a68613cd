//! Hostile input: forwarding headers, usernames and bodies an attacker controls. Nothing
//! panics, keys stay bounded and in one slot, normalisation is consistent, and the handler
//! always receives the body intact.

mod support;

use ratelimit_runtime::settings::Identities;
use std::net::IpAddr;

use actix_web::{
    dev::Service,
    get,
    http::header::{HeaderMap, HeaderName, HeaderValue},
    post,
    test::{self, TestRequest},
    web, App, HttpResponse, Responder,
};
use futures_util::stream;
use proptest::prelude::*;
use ratelimit_runtime::{
    clock::ManualClock,
    identity::{canonical_username, ForwardedHeader, TrustedProxies},
    key::RouteKey,
    rate_limit,
    store::MemoryStore,
    Algorithm, IdentityPart, Limit, RateLimiter, Window,
};
use support::key_slot;

fn limits() -> [Limit; 4] {
    [
        Limit::new(10, Window::from_secs(60), Algorithm::SlidingWindow),
        Limit::new(10, Window::from_secs(1), Algorithm::Gcra),
        Limit::new(10, Window::from_secs(300), Algorithm::SlidingLog),
        Limit::new(10, Window::from_secs(3600), Algorithm::FixedWindow),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keys_stay_bounded_printable_and_in_one_slot(
        pattern in ".{0,300}",
        username in any::<String>(),
        user in any::<String>(),
        api_key in ".{0,2000}",
        header in any::<String>(),
    ) {
        let key = RouteKey::new(
            "rl",
            "POST",
            &pattern,
            &[
                (IdentityPart::Ip, "203.0.113.7"),
                (IdentityPart::Username, &username),
                (IdentityPart::UserId, &user),
                (IdentityPart::ApiKey, &api_key),
                (IdentityPart::Header("x-tenant"), &header),
            ],
        );
        let tag = key.hash_tag();
        prop_assert!(!tag.contains('{') && !tag.contains('}'), "braces in the tag {}", tag);
        prop_assert!(key.as_str().len() <= 400, "key of {} bytes", key.as_str().len());
        prop_assert!(key.as_str().chars().all(|c| c.is_ascii_graphic()), "{}", key.as_str());
        let base_slot = key_slot(key.as_str());
        for limit in limits() {
            let stem = key.limit_key(&limit);
            prop_assert_eq!(key_slot(&stem), base_slot);
            prop_assert_eq!(key_slot(&format!("{stem}:1700000040000")), base_slot);
        }
        if !api_key.is_empty() {
            prop_assert!(!key.as_str().contains(&api_key) || api_key.len() < 4);
        }
    }

    #[test]
    fn usernames_differing_only_in_case_outer_space_and_invisibles_share_a_budget(
        name in "[a-zA-Z0-9ÄÖÜäöüßÉéΣσ._-]{1,40}",
        left in "[ \t]{0,3}",
        right in "[ \t\u{200b}\u{2060}]{0,3}",
        at in 0usize..40,
    ) {
        let key = |u: &str| {
            let canonical = canonical_username(u);
            RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Username, &canonical)])
        };
        let mut upper = name.to_uppercase();
        let at = upper.char_indices().map(|(i, _)| i).nth(at).unwrap_or(upper.len());
        upper.insert(at, '\u{200b}');
        let padded = format!("{left}{upper}{right}");
        prop_assert_eq!(key(&name.to_lowercase()), key(&padded));
    }

    #[test]
    fn forwarding_headers_never_panic(values in proptest::collection::vec(any::<String>(), 0..4), hops in 0usize..4) {
        let mut headers = HeaderMap::new();
        for value in &values {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(HeaderName::from_static("x-forwarded-for"), value.clone());
                headers.append(HeaderName::from_static("forwarded"), value);
            }
        }
        let peer: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let _ = TrustedProxies::hops(hops).resolve(peer, &headers);
        let _ = TrustedProxies::hops(hops).header(ForwardedHeader::Forwarded).resolve(peer, &headers);
    }

    #[test]
    fn entries_a_client_prepends_never_change_the_client_address(
        spoofed in proptest::collection::vec("[0-9a-fA-F.:%\\[\\] a-z=;\"]{0,30}", 0..50),
        client in any::<[u8; 4]>(),
    ) {
        let honest = IpAddr::from(client).to_string();
        let mut chain = spoofed.clone();
        chain.push(honest.clone());
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(&chain.join(", ")) {
            headers.insert(HeaderName::from_static("x-forwarded-for"), value);
            let peer: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
            prop_assert_eq!(TrustedProxies::hops(1).resolve(peer, &headers), Some(IpAddr::from(client)));
        }
    }

    /// RFC 7239 `Forwarded`: the client writes whatever it likes left of the proxy's element
    /// (open quotes included) and, through its `Host`, the text of a value the proxy quotes
    /// inside that element; neither changes the address the element names.
    #[test]
    fn forwarded_text_a_client_controls_never_changes_the_client_address(
        prepended in "[0-9a-z.:;,=\"\\\\ \\[\\]]{0,40}",
        host in "[0-9a-z.:;,=\"\\\\ ]{0,40}",
        host_first in any::<bool>(),
        client in any::<[u8; 4]>(),
    ) {
        let honest = IpAddr::from(client);
        // A proxy quotes the value and escapes `\` and `"` in it (RFC 9110 quoted-string).
        let quoted = format!("\"{}\"", host.replace('\\', "\\\\").replace('"', "\\\""));
        let element = if host_first {
            format!("proto=https;host={quoted};for={honest}")
        } else {
            format!("for={honest};host={quoted};proto=https")
        };
        let line = format!("{prepended}, {element}");
        let value = HeaderValue::from_str(&line).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("forwarded"), value);
        let peer: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let resolved = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded).resolve(peer, &headers);
        prop_assert_eq!(resolved, Some(honest), "{}", line);
    }
}

#[test]
fn a_chain_of_thousands_of_entries_is_read_from_the_right() {
    let mut chain: Vec<String> = (0..10_000)
        .map(|i| format!("10.{}.{}.1", i / 256 % 256, i % 256))
        .collect();
    chain.push("198.51.100.77".to_owned());
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static("x-forwarded-for"),
        HeaderValue::from_str(&chain.join(",")).unwrap(),
    );
    let resolved = TrustedProxies::hops(1).resolve(Some("10.0.0.1".parse().unwrap()), &headers);
    assert_eq!(resolved, Some("198.51.100.77".parse().unwrap()));
}

#[test]
fn ipv6_zones_and_brackets_in_forwarding_headers() {
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static("forwarded"),
        HeaderValue::from_static("for=\"[fe80::1%25eth0]:443\""),
    );
    let resolved = TrustedProxies::hops(1)
        .header(ForwardedHeader::Forwarded)
        .resolve(Some("10.0.0.1".parse().unwrap()), &headers);
    assert_eq!(resolved, Some("fe80::1".parse().unwrap()));
}

#[rate_limit(limit = 2, window = "1m", identity = "ip")]
#[get("/who")]
async fn who() -> impl Responder {
    HttpResponse::Ok()
}

/// End to end: a client behind a proxy that writes `Forwarded` and quotes the `Host` it
/// copies cannot buy a budget per request by writing a new `for=` into its `Host`.
#[actix_web::test]
async fn a_quoted_host_in_the_trusted_forwarded_element_cannot_choose_the_client_address() {
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(1_700_000_040_000))
        .identity(
            Identities::new()
                .trusted_proxies(TrustedProxies::hops(1).header(ForwardedHeader::Forwarded)),
        );
    let app = test::init_service(App::new().service(who).wrap(limiter)).await;
    for (client, template) in [
        (
            "203.0.113.7",
            "for=203.0.113.7;host=\"x,for={fake}\";proto=https",
        ),
        (
            "198.51.100.9",
            "proto=https;host=\"x;for={fake}\";for=198.51.100.9",
        ),
    ] {
        let mut statuses = Vec::new();
        for fake in ["6.6.6.1", "6.6.6.2", "6.6.6.3", "6.6.6.4"] {
            let req = TestRequest::get()
                .uri("/who")
                .peer_addr("10.0.0.3:40000".parse().unwrap())
                .insert_header(("forwarded", template.replace("{fake}", fake)))
                .to_request();
            statuses.push(test::call_service(&app, req).await.status().as_u16());
        }
        assert_eq!(
            statuses,
            [200, 200, 429, 429],
            "client {client}: {template}"
        );
    }
}

#[rate_limit(
    limit = 2,
    window = "1m",
    identity = "ip+username",
    algorithm = "sliding_log"
)]
#[post("/login")]
async fn login(body: web::Bytes) -> impl Responder {
    HttpResponse::Ok().body(body)
}

async fn service() -> impl Service<
    actix_http::Request,
    Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
    Error = actix_web::Error,
> {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(1_700_000_040_000));
    test::init_service(
        App::new()
            .service(login)
            .app_data(web::PayloadConfig::new(8 * 1024 * 1024))
            .wrap(limiter),
    )
    .await
}

fn post(content_type: &str, body: impl Into<web::Bytes>) -> actix_http::Request {
    TestRequest::post()
        .uri("/login")
        .peer_addr("203.0.113.7:5000".parse().unwrap())
        .insert_header(("content-type", content_type.to_owned()))
        .set_payload(body.into())
        .to_request()
}

#[actix_web::test]
async fn bodies_that_are_not_json_deeply_nested_or_binary_reach_the_handler_intact() {
    let app = service().await;
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let bodies: Vec<(&str, web::Bytes)> = vec![
        (
            "application/json",
            web::Bytes::from_static(b"not json at all {{{"),
        ),
        ("application/json", web::Bytes::from(nested)),
        (
            "application/x-www-form-urlencoded",
            web::Bytes::from(binary.clone()),
        ),
        ("application/json", web::Bytes::from(binary)),
        (
            "application/json",
            web::Bytes::from_static(b"{\"username\": {\"$ne\": null}}"),
        ),
        (
            "application/json",
            web::Bytes::from_static(b"{\"username\": \"\\u0000}{\\r\\n\"}"),
        ),
    ];
    for (content_type, body) in bodies {
        let res = test::call_service(&app, post(content_type, body.clone())).await;
        // The username is missing or odd for all of them: every one counts, none is lost.
        let status = res.status().as_u16();
        assert!(status == 200 || status == 429, "{status}");
        if status == 200 {
            assert_eq!(test::read_body(res).await, body);
        }
    }
}

#[actix_web::test]
async fn hostile_usernames_share_a_budget_with_themselves() {
    let app = service().await;
    for name in [
        "a}b{c",
        "crlf\r\ninjected",
        "nul\u{0}byte",
        "ÅNGSTRÖM",
        &"m".repeat(1_000_000),
    ] {
        let body = serde_json::json!({ "username": name }).to_string();
        let statuses: Vec<u16> = {
            let mut statuses = Vec::new();
            for _ in 0..3 {
                statuses.push(
                    test::call_service(&app, post("application/json", body.clone()))
                        .await
                        .status()
                        .as_u16(),
                );
            }
            statuses
        };
        assert_eq!(
            statuses[2],
            429,
            "`{}`…: {statuses:?}",
            &name[..name.len().min(10)]
        );
    }
}

#[actix_web::test]
async fn a_streamed_body_larger_than_the_buffer_is_passed_on_whole() {
    let app = service().await;
    let chunk = web::Bytes::from(vec![b'x'; 16 * 1024]);
    let chunks = 64; // 1 MiB, no Content-Length
    let make = || {
        let chunk = chunk.clone();
        let body = stream::iter(
            (0..chunks).map(move |_| Ok::<_, actix_web::error::PayloadError>(chunk.clone())),
        );
        let boxed: actix_http::BoxedPayloadStream = Box::pin(body);
        let req = TestRequest::post()
            .uri("/login")
            .peer_addr("203.0.113.8:5000".parse().unwrap())
            .insert_header(("content-type", "application/json"))
            .to_request();
        let (req, _) = req.replace_payload(actix_http::Payload::from(boxed));
        req
    };
    for _ in 0..2 {
        let res = test::call_service(&app, make()).await;
        assert_eq!(res.status(), 200);
        assert_eq!(test::read_body(res).await.len(), chunk.len() * chunks);
    }
    // Still limited (by IP, as the username could not be read).
    assert_eq!(test::call_service(&app, make()).await.status(), 429);
}

#[actix_web::test]
async fn a_body_stream_that_fails_midway_reaches_the_handler_as_an_error() {
    let app = service().await;
    let body = stream::iter(vec![
        Ok(web::Bytes::from_static(b"{\"username\":")),
        Err(actix_web::error::PayloadError::Incomplete(None)),
    ]);
    let boxed: actix_http::BoxedPayloadStream = Box::pin(body);
    let req = TestRequest::post()
        .uri("/login")
        .peer_addr("203.0.113.9:5000".parse().unwrap())
        .insert_header(("content-type", "application/json"))
        .to_request();
    let (req, _) = req.replace_payload(actix_http::Payload::from(boxed));
    let res = test::call_service(&app, req).await;
    assert_eq!(
        res.status(),
        400,
        "the extractor sees the stream error, not a truncated body"
    );
}

/// Bodies the username reader read (its typed reader's calls).
static NAMES_READ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[derive(serde::Deserialize)]
struct SignIn {
    username: String,
}

#[rate_limit(limit = 2, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(
    limit = 100,
    window = "5m",
    identity = "username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/sign-in")]
async fn sign_in(body: web::Json<SignIn>) -> impl Responder {
    body.into_inner().username
}

/// A client over a limit that counts no username (per address) is answered 429 by the flood
/// shield before its body is read: a flood of large (or compressed) bodies from an address
/// already refused costs no reading, decompressing or canonicalizing.
#[actix_web::test]
async fn an_address_already_refused_is_answered_before_its_body_is_read() {
    let limiter = RateLimiter::new(MemoryStore::new()).identity(Identities::new().route_username(
        "POST /sign-in",
        ratelimit_runtime::identity::UsernameReader::json::<SignIn>(|s| {
            NAMES_READ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            &s.username
        }),
    ));
    let app = test::init_service(App::new().service(sign_in).wrap(limiter)).await;
    let send = |ip: &str, name: &str| {
        TestRequest::post()
            .uri("/sign-in")
            .peer_addr(format!("{ip}:5000").parse().unwrap())
            .insert_header(("content-type", "application/json"))
            .set_payload(format!(r#"{{"username":"{name}"}}"#))
            .to_request()
    };
    let read = || NAMES_READ.load(std::sync::atomic::Ordering::SeqCst);
    let mut statuses = Vec::new();
    for name in ["a", "b", "c"] {
        statuses.push(
            app.call(send("192.0.2.1", name))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    // The third was refused by the store (per address), and the shield remembers it.
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(read(), 3, "each body read once by the limiter");
    for name in ["d", "e", "f", "g"] {
        let response = app.call(send("192.0.2.1", name)).await.unwrap();
        assert_eq!(response.status().as_u16(), 429);
        assert!(response.headers().contains_key("retry-after"));
    }
    assert_eq!(read(), 3, "a body of an address already refused was read");
    // Another address is read and decided as usual.
    let other = app.call(send("192.0.2.2", "h")).await.unwrap();
    assert_eq!(other.status().as_u16(), 200);
    assert_eq!(read(), 4);
}
