//! Every bound of the grammar, at itself: the largest sliding log, the longest window, the
//! largest exact sliding window over it, the fastest GCRA, eight stacked limits.
use actix_web::{get, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(limit = 1000, window = "1m", algorithm = "sliding_log")]
#[get("/log")]
async fn largest_sliding_log() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 3362902, window = "31d")]
#[get("/window")]
async fn longest_exact_sliding_window() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1000, window = "1ms", algorithm = "gcra")]
#[get("/gcra")]
async fn fastest_gcra() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1, window = "1s")]
#[rate_limit(limit = 2, window = "2s")]
#[rate_limit(limit = 3, window = "3s")]
#[rate_limit(limit = 4, window = "4s")]
#[rate_limit(limit = 5, window = "5s")]
#[rate_limit(limit = 6, window = "6s")]
#[rate_limit(limit = 7, window = "7s")]
#[rate_limit(limit = 8, window = "31d", algorithm = "fixed_window")]
#[get("/stacked")]
async fn eight_stacked() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new()
        .service(largest_sliding_log)
        .service(longest_exact_sliding_window)
        .service(fastest_gcra)
        .service(eight_stacked);
    let limits = |function: &str| {
        registry::declarations()
            .find(|d| d.function() == function)
            .and_then(|d| d.policy().limited())
            .map(|p| p.limits().len())
    };
    assert_eq!(limits("largest_sliding_log"), Some(1));
    assert_eq!(limits("longest_exact_sliding_window"), Some(1));
    assert_eq!(limits("fastest_gcra"), Some(1));
    assert_eq!(limits("eight_stacked"), Some(8));
}
