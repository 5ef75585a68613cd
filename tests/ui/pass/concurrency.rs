use actix_web::{get, post, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, Limit, Window};

#[rate_limit(concurrency = 3, identity = "api_key")]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(concurrency = 5, lease = "30s", identity = "ip", fail = "closed")]
#[rate_limit(limit = 100, window = "1m", identity = "ip")]
#[rate_limit(tier = "pro", concurrency = 20, identity = "ip")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(export).service(search);
    let limits = |name: &str| {
        registry::declarations()
            .find(|d| d.function() == name)
            .expect("registered")
            .policy()
            .limited()
            .expect("limited")
    };
    assert_eq!(
        limits("export").limits(),
        [Limit::concurrent(3, Window::from_secs(10))]
    );
    let stacked = limits("search");
    assert_eq!(stacked.limits()[0], Limit::concurrent(5, Window::from_secs(30)));
    assert!(!stacked.limits()[1].is_concurrency());
    assert_eq!(stacked.limits()[1].max(), 100);
    assert_eq!(
        stacked.tiers()[0].limits()[0],
        Limit::concurrent(20, Window::from_secs(10))
    );
}
