use actix_cors::Cors;
use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    get,
    middleware::{from_fn, Next},
    post, web, App, Error, HttpMessage, HttpResponse, HttpServer, Responder,
};
use ratelimit_runtime::{
    coverage::{self, AppFactory},
    identity::UserId,
    rate_limit,
    store::MemoryStore,
    RateLimiter,
};

#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed",
    enforce = true // refuses even in shadow
)]
#[post("/login")]
async fn login(body: web::Bytes) -> impl Responder {
    HttpResponse::Ok().body(body)
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> impl Responder {
    "ok"
}

async fn legacy() -> impl Responder {
    "a builder route"
}

/// Your auth layer: it puts the user's `UserId` in the request.
async fn auth(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if let Some(user) = bearer.and_then(|v| v.strip_prefix("Bearer ")) {
        let user = UserId(user.to_owned()); // stand-in: verify the token in your app
        req.extensions_mut().insert(user);
    }
    next.call(req).await
}

fn limiter() -> RateLimiter {
    RateLimiter::new(MemoryStore::new())
        .declare("GET /legacy", r#"limit = 30, window = "1m""#) // no attribute there
        .shadow(true) // logs would-be 429s; remove to enforce
}

fn app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .wrap(limiter) // innermost (the last `wrap` runs first)
        .wrap(from_fn(auth))
        .wrap(Cors::default().allowed_origin("https://app.example"))
        .service(login)
        .service(health)
        .route("/legacy", web::get().to(legacy))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt().init(); // the limiter's log lines
    let limiter = limiter();
    if let Err(uncovered) = coverage::require_coverage(app(limiter.clone())).await {
        eprintln!("{uncovered}"); // routes without a limit, bad settings
        std::process::exit(1);
    }
    let _ = limiter.check_store().await; // logs which store counts, and whether it answered
    HttpServer::new(move || app(limiter.clone()))
        .bind(("127.0.0.1", 8080))?
        .run()
        .await
}

#[cfg(test)]
mod tests {
    #[actix_web::test]
    async fn every_route_is_rate_limited() {
        ratelimit_runtime::coverage::require_coverage(super::app(super::limiter()))
            .await
            .unwrap();
    }
}
