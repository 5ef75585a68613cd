//! The seed's policy table, each limit declared on its handler.

use actix_web::{get, post, web, HttpMessage, HttpRequest, HttpResponse, Responder};
use metrics_exporter_prometheus::PrometheusHandle;
use ratelimit_runtime::{budget, identity::UserId, rate_limit, IdentityPart, RateLimiter};
use serde::Deserialize;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(login)
        .service(password_reset)
        .service(search)
        .service(export_report)
        .service(create_order)
        .service(get_order)
        .service(health)
        .service(metrics);
}

#[derive(Deserialize)]
pub struct Credentials {
    pub username: String,
    #[allow(dead_code)]
    password: String,
}

/// JSON or form body: `{"username": "..."}`, with `"token": "..."` to complete a reset.
#[derive(Deserialize)]
pub struct UsernameOnly {
    pub username: String,
    #[serde(default)]
    token: Option<String>,
}

fn either<T>(json: Option<web::Json<T>>, form: Option<web::Form<T>>) -> Option<T> {
    json.map(web::Json::into_inner)
        .or_else(|| form.map(web::Form::into_inner))
}

/// The stand-in account store's password, the same for every name.
pub const DEMO_PASSWORD: &str = "demo";

/// Two limits on two identities: an address gets 100 attempts an hour (one address spraying
/// usernames), and a name 10 wrong passwords in 5 minutes (many addresses guessing one
/// password): after those the next attempt is refused and locks the name out for 15 (a
/// lockout by name alone lets anyone lock a user out: the price of stopping many addresses
/// guessing one password; a completed password reset lets the user back in).
#[rate_limit(limit = 100, window = "1h", identity = "ip", fail = "closed")]
#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "username",
    algorithm = "sliding_log",
    count = "failures",
    block = "15m",
    fail = "closed"
)]
#[post("/login")]
async fn login(
    json: Option<web::Json<Credentials>>,
    form: Option<web::Form<Credentials>>,
) -> impl Responder {
    match either(json, form) {
        Some(credentials) if credentials.password == DEMO_PASSWORD => {
            HttpResponse::Ok().json(serde_json::json!({
                "status": "signed in",
                "username": credentials.username,
            }))
        }
        Some(credentials) => HttpResponse::Unauthorized().json(serde_json::json!({
            "status": "wrong password",
            "username": credentials.username,
        })),
        None => HttpResponse::BadRequest().json(serde_json::json!({
            "error": "expected a JSON or form body with `username` and `password`",
        })),
    }
}

/// The stand-in reset token: a request with it stands for a completed reset (the link's token
/// redeemed), which clears the name's failed sign-ins and its lockout. A request for a link
/// clears nothing: anyone can ask for one, and a clear on every request would give an
/// attacker a fresh budget per request. The token is a secret (`DEMO_RESET_TOKEN`, else made
/// at random at start): one anybody knows would let anybody unlock any account, and give
/// each address a whole budget against one account after every reset.
pub struct ResetToken(pub String);

#[rate_limit(
    limit = 5,
    window = "15m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/password-reset")]
async fn password_reset(
    json: Option<web::Json<UsernameOnly>>,
    form: Option<web::Form<UsernameOnly>>,
    limiter: web::Data<RateLimiter>,
    token: web::Data<ResetToken>,
) -> impl Responder {
    let Some(body) = either(json, form) else {
        return HttpResponse::BadRequest().json(serde_json::json!({
            "error": "expected a JSON or form body with `username` (and `token` to complete a reset)",
        }));
    };
    if body.token.as_deref() != Some(token.0.as_str()) {
        return HttpResponse::Accepted().json(serde_json::json!({
            "status": "reset link sent if the account exists",
            "username": body.username,
        }));
    }
    let name = [(IdentityPart::Username, body.username.as_str())];
    let cleared = limiter.reset("POST /login", &name).await.is_ok();
    HttpResponse::Ok().json(serde_json::json!({
        "status": "password changed",
        "username": body.username,
        "sign_in_budget_cleared": cleared,
    }))
}

#[derive(Deserialize)]
pub struct SearchQuery {
    #[serde(default)]
    q: String,
}

// One quota per API key across the API: every search spends a unit of it, every export ten.
budget!(API = limit = 1000, window = "1h", identity = "api_key");

#[rate_limit(limit = 300, window = "1m", identity = "api_key", fail = "open")]
#[rate_limit(budget = API)]
#[get("/api/search")]
async fn search(query: web::Query<SearchQuery>) -> impl Responder {
    HttpResponse::Ok().json(serde_json::json!({ "query": query.q, "results": [] }))
}

/// An export weighs ten searches: 60 an hour, and ten units of the key's API quota each;
/// at most two of a key's exports run at once.
#[rate_limit(
    limit = 600,
    window = "1h",
    identity = "api_key",
    algorithm = "fixed_window",
    fail = "closed",
    cost = 10
)]
#[rate_limit(budget = API, cost = 10)]
#[rate_limit(concurrency = 2, identity = "api_key")]
#[post("/reports/export")]
async fn export_report() -> impl Responder {
    HttpResponse::Accepted().json(serde_json::json!({ "status": "export queued" }))
}

#[rate_limit(limit = 30, window = "1m", identity = "user_id", fail = "closed")]
#[post("/orders")]
async fn create_order(req: HttpRequest) -> impl Responder {
    let user = req.extensions().get::<UserId>().map(|u| u.0.clone());
    HttpResponse::Created().json(serde_json::json!({ "status": "created", "user": user }))
}

#[rate_limit(limit = 120, window = "1m")]
#[rate_limit(limit = 20, window = "1s", algorithm = "gcra")]
#[get("/orders/{id}")]
async fn get_order(id: web::Path<u64>) -> impl Responder {
    HttpResponse::Ok().json(serde_json::json!({ "id": id.into_inner() }))
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

#[rate_limit(exempt = "Prometheus scrape of the limiter's own metrics")]
#[get("/metrics")]
async fn metrics(handle: web::Data<PrometheusHandle>) -> impl Responder {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(handle.render())
}

/// Mounted only by the test-only variant, without a declaration.
pub async fn uncovered() -> HttpResponse {
    HttpResponse::Ok().finish()
}
