//! Middleware of a route's own, or of its scope, between the limiter and the handler: what
//! it refuses (with an answer or with an error) still counts against the route's limit, what
//! it rewrites reaches the handler, and its redirects and errors keep the limit's headers.

use std::time::Duration;

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceRequest, ServiceResponse},
    get,
    http::header::{HeaderName, HeaderValue},
    middleware::Next,
    post,
    test::{self, TestRequest},
    web, App, Error, HttpMessage as _, HttpRequest, HttpResponse, Responder,
};
use ratelimit_runtime::{
    clock::ManualClock, identity::UserId, rate_limit, store::MemoryStore, RateLimiter,
};

use crate::{
    from, status_of,
    support::{
        auth::{answers_401, errs_401},
        T0,
    },
};

#[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "closed")]
#[get("/admin", wrap = "actix_web::middleware::from_fn(answers_401)")]
async fn admin() -> impl Responder {
    HttpResponse::Ok().body("admin")
}

#[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "closed")]
#[get("/vault", wrap = "actix_web::middleware::from_fn(errs_401)")]
async fn vault() -> impl Responder {
    HttpResponse::Ok().body("vault")
}

/// Counted per API key, behind the auth that refuses unknown ones: with an answer here,
/// with an error below.
#[rate_limit(limit = 2, window = "1m", identity = "api_key", fail = "closed")]
#[get("/keyed-admin", wrap = "actix_web::middleware::from_fn(answers_401)")]
async fn keyed_admin() -> impl Responder {
    HttpResponse::Ok().body("admin")
}

#[rate_limit(limit = 2, window = "1m", identity = "api_key", fail = "closed")]
#[get("/keyed-vault", wrap = "actix_web::middleware::from_fn(errs_401)")]
async fn keyed_vault() -> impl Responder {
    HttpResponse::Ok().body("vault")
}

/// Rewrites a request header, as middleware that normalises requests does: it needs the
/// request unshared (`ServiceRequest::headers_mut`).
async fn tags_request(
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
async fn tagged(req: HttpRequest) -> impl Responder {
    let tag = req.headers().get("x-tagged").cloned();
    HttpResponse::Ok().body(tag.map(|v| v.as_bytes().to_vec()).unwrap_or_default())
}

/// A sign-in counted per address and submitted username, behind auth of its own.
#[rate_limit(limit = 2, window = "1m", identity = "ip+username", fail = "closed")]
#[post("/signin", wrap = "actix_web::middleware::from_fn(answers_401)")]
async fn signin() -> impl Responder {
    HttpResponse::Ok().body("signed in")
}

/// The same, served under a scope whose middleware refuses with an error.
#[rate_limit(limit = 2, window = "1m", identity = "ip+username", fail = "closed")]
#[post("/signin")]
async fn scoped_signin() -> impl Responder {
    HttpResponse::Ok().body("signed in")
}

/// Sends a client that is not signed in to the login page; a signed-in one goes on with
/// its user id.
async fn login_redirect(
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
async fn profile() -> impl Responder {
    HttpResponse::Ok().body("profile")
}

/// Served under a scope whose middleware refuses with an error.
#[rate_limit(limit = 3, window = "1m", identity = "ip", fail = "closed")]
#[get("/panel")]
async fn panel() -> impl Responder {
    HttpResponse::Ok().body("panel")
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
        let app = test::init_service(App::new().service(admin).service(vault).wrap(limiter)).await;
        refusals_count_against_the_limit(&app, &clock, path, &path[1..]).await;
    }
}

/// A refused API key may be made up: each guess must not get a budget of its own, whether
/// the route's auth refuses with an answer or with an error; both count by address, guesses
/// refused with a 401 answer included.
#[actix_web::test]
async fn guessed_api_keys_count_by_address_when_the_routes_auth_refuses_them() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(keyed_admin)
            .service(keyed_vault)
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
                    .wrap(actix_web::middleware::from_fn(errs_401))
                    .service(panel),
            )
            .wrap(limiter),
    )
    .await;
    refusals_count_against_the_limit(&app, &clock, "/admin/panel", "panel").await;
}

#[actix_web::test]
async fn a_routes_own_middleware_may_rewrite_the_request() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(App::new().service(tagged).wrap(limiter)).await;
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
    let app = test::init_service(App::new().service(signin).wrap(limiter)).await;
    refused_sign_ins_spend_the_usernames_budget(&app, "/signin").await;

    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/account")
                    .wrap(actix_web::middleware::from_fn(errs_401))
                    .service(scoped_signin),
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
            .service(web::scope("/admin").wrap(limiter.clone()).service(panel))
            .wrap(limiter),
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(status_of(&app, from("203.0.113.7").uri("/admin/panel")).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "3 per minute declared");
}

#[actix_web::test]
async fn a_scopes_redirect_to_its_login_page_leaves_the_declared_limit_alone() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/account")
                    .wrap(actix_web::middleware::from_fn(login_redirect))
                    .service(profile),
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

async fn fails_with_an_error() -> Result<HttpResponse, actix_web::Error> {
    Err(actix_web::error::ErrorBadRequest("bad input"))
}

/// An error from further in (a scope's auth layer, as actix-web-httpauth refuses; a handler)
/// answers with the limit's headers like any other limited answer.
#[actix_web::test]
async fn an_error_from_further_in_keeps_the_limits_headers() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/admin")
                    .wrap(actix_web::middleware::from_fn(errs_401))
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
