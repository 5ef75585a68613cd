use actix_web::{get, post, web, App, HttpResponse, HttpServer, Responder};
use ratelimit_runtime::{
    coverage::{self, AppFactory},
    rate_limit,
    store::MemoryStore,
    RateLimiter,
};

#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login(body: web::Bytes) -> impl Responder {
    HttpResponse::Ok().body(body)
}

#[rate_limit(limit = 300, window = "1m", identity = "api_key")]
#[get("/api/search")]
async fn search() -> impl Responder {
    "results"
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> impl Responder {
    "ok"
}

fn app() -> App<impl AppFactory> {
    App::new().service(login).service(search).service(health)
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt().init(); // the limiter's log lines
    if let Err(uncovered) = coverage::require_coverage(app()).await {
        eprintln!("{uncovered}"); // every route without a limit or an exemption
        std::process::exit(1);
    }
    let limiter = RateLimiter::new(MemoryStore::new());
    let _ = limiter.check_store().await; // logs which store counts, and whether it answered
    HttpServer::new(move || app().wrap(limiter.clone()))
        .bind(("127.0.0.1", 8080))?
        .run()
        .await
}

#[cfg(test)]
mod tests {
    #[actix_web::test]
    async fn every_route_is_rate_limited() {
        ratelimit_runtime::coverage::require_coverage(super::app())
            .await
            .unwrap();
    }
}
