//! The default username reader names the user a handler's `web::Json<Login>` signs in,
//! whatever the body's other fields hold: a number out of range or a value nested deeper
//! than serde_json's recursion limit in a field the handler skips never moves an attempt from
//! the account's budget to the address's budget for unreadable bodies. (Breadth: the
//! property test in `ratelimit-runtime/src/identity/body/username_reading.rs`.)

use actix_web::{
    dev::{Service, ServiceResponse},
    post,
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use ratelimit_runtime::{rate_limit, store::MemoryStore, RateLimiter};
use serde::Deserialize;

#[derive(Deserialize)]
struct Login {
    username: String,
}

/// A sign-in handler as apps write it: `web::Json` skips fields its type does not name.
#[rate_limit(limit = 3, window = "1h", identity = "username")]
#[post("/login")]
async fn login(login: web::Json<Login>) -> HttpResponse {
    HttpResponse::Ok().body(login.into_inner().username)
}

async fn app() -> impl Service<
    actix_http::Request,
    Response = ServiceResponse<impl actix_web::body::MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(
        App::new()
            .service(login)
            .wrap(RateLimiter::new(MemoryStore::new())),
    )
    .await
}

fn attempt(ip: &str, body: impl Into<web::Bytes>) -> actix_http::Request {
    TestRequest::post()
        .uri("/login")
        .peer_addr(format!("{ip}:40000").parse().unwrap())
        .insert_header(("content-type", "application/json"))
        .set_payload(body.into())
        .to_request()
}

/// The status of each attempt, and the name the handler signed in when it ran.
async fn send<S, B>(app: &S, ip: &str, body: &str) -> (u16, String)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: actix_web::body::MessageBody,
{
    let res = test::call_service(app, attempt(ip, body.to_owned())).await;
    let status = res.status().as_u16();
    let text = test::read_body(res).await;
    (status, String::from_utf8_lossy(&text).into_owned())
}

fn nested(depth: usize) -> String {
    format!("{}1e400{}", "[".repeat(depth), "]".repeat(depth))
}

/// The issue's attack: one account guessed from 12 addresses with bodies the handler reads
/// as alice but whose other fields a `serde_json::Value` cannot hold. The limit of 3 holds
/// across the addresses: 3 sign-ins, 9 refusals.
#[actix_web::test]
async fn fields_the_handler_skips_never_hide_the_username() {
    let deep_objects = format!(
        r#"{{"username":"alice","p":{}1{}}}"#,
        r#"{"a":"#.repeat(200),
        "}".repeat(200)
    );
    for body in [
        r#"{"username":"alice","password":"x","p":1e400}"#.to_owned(),
        r#"{"p":-1e999,"password":"x","username":"alice"}"#.to_owned(),
        format!(
            r#"{{"username":"alice","password":"x","n":{}}}"#,
            "9".repeat(400)
        ),
        format!(
            r#"{{"username":"alice","password":"x","p":{}}}"#,
            nested(200)
        ),
        deep_objects,
        format!(r#"{{"user\u006eame":"alice","p":{}}}"#, nested(300)),
    ] {
        let app = app().await;
        let mut signed_in = 0;
        for client in 1..=12 {
            match send(&app, &format!("10.0.0.{client}"), &body).await {
                (200, name) => {
                    assert_eq!(name, "alice", "{body:.80}");
                    signed_in += 1;
                }
                (status, _) => assert_eq!(status, 429, "{body:.80}"),
            }
        }
        assert_eq!(signed_in, 3, "{body:.80}");
        // The account's budget is spent, the addresses' budgets for unreadable bodies not.
        assert_eq!(
            send(&app, "10.0.1.1", r#"{"username":"alice"}"#).await.0,
            429
        );
        assert_eq!(
            send(&app, "10.0.0.1", "not json").await.0,
            400,
            "{body:.80}"
        );
    }
}

/// A body the handler refuses names no user: the username twice (serde_derive's duplicate
/// field), or JSON followed by more characters, counts in the address's budget for
/// unreadable bodies and spends neither name's.
#[actix_web::test]
async fn bodies_the_handler_refuses_name_no_user() {
    for body in [
        r#"{"username":"bob","password":"x","username":"alice"}"#,
        r#"{"user\u006eame":"bob","username":"alice","p":1e400}"#,
        r#"{"username":"alice"} x"#,
        "\u{feff}{\"username\":\"alice\"}",
    ] {
        let app = app().await;
        for _ in 0..3 {
            assert_eq!(send(&app, "10.0.0.1", body).await.0, 400, "{body}");
        }
        assert_eq!(send(&app, "10.0.0.1", body).await.0, 429, "{body}");
        assert_eq!(send(&app, "10.0.0.1", "not json").await.0, 429, "{body}");
        for name in ["alice", "bob"] {
            let plain = format!(r#"{{"username":"{name}"}}"#);
            assert_eq!(send(&app, "10.0.0.2", &plain).await, (200, name.to_owned()));
        }
    }
}
