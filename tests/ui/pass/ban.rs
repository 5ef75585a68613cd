use actix_web::{get, post, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, Count};

#[rate_limit(limit = 10, window = "1m", ban = "20 in 10m for 1h")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 5, window = "5m", count = "failures", ban = "3 in 1h for 1d", shadow = false)]
#[rate_limit(limit = 100, window = "1d", identity = "ip")]
#[rate_limit(tier = "pro", limit = 50, window = "5m", count = "failures")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(search).service(login);
    let policy = |name: &str| {
        *registry::declarations()
            .find(|d| d.function() == name)
            .expect("registered")
            .policy()
            .limited()
            .expect("limited")
    };
    let ban = policy("search").ban().expect("a ban");
    assert_eq!(ban.to_string(), "20 in 10m for 1h");
    let sign_in = policy("login");
    let ban = sign_in.ban().expect("a ban");
    assert_eq!((ban.times(), ban.within().as_millis(), ban.duration().as_millis()), (3, 3_600_000, 86_400_000));
    // The tiers are banned as the route is.
    assert_eq!(sign_in.tier("pro").unwrap().ban(), Some(ban));
    assert!(ban.limit(Count::Failures).is_ban());
}
