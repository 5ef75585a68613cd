use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(limit = 100000, window = "1m", identity = "api_key", sync = "100ms")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 6000, window = "1m", algorithm = "gcra", sync = "100ms", cost = 2)]
#[rate_limit(tier = "pro", limit = 60000, window = "1m", algorithm = "fixed_window")]
#[get("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(search).service(export);
    let policy = |name: &str| {
        *registry::declarations()
            .find(|d| d.function() == name)
            .expect("registered")
            .policy()
            .limited()
            .expect("limited")
    };
    let every = std::time::Duration::from_millis(100);
    assert_eq!(policy("search").sync(), Some(every));
    // The tiers sync as the route does.
    assert_eq!(policy("export").tier("pro").unwrap().sync(), Some(every));
}
