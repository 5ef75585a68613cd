//! (b) actix-limitation 0.6: a Redis fixed window (`SET NX EX` + `INCR` + `TTL` in a
//! `MULTI` pipeline), keyed here by the same client address as every other variant.

use std::time::Duration;

use actix_limitation::{Limiter, RateLimiter};
use actix_web::{dev::ServiceRequest, web, App, HttpServer};
use ratelimit_bench::{
    route::{ALLOW_LIMIT, ALLOW_WINDOW_SECS, FLOOD_LIMIT, FLOOD_WINDOW_SECS},
    Budget,
};

use crate::{client_ip::client_ip, handler, options::Options};

fn limiter(url: &str, budget: Budget, limit: u32, window_secs: u64) -> std::io::Result<Limiter> {
    let scope = budget.segment();
    Limiter::builder(url)
        .key_by(move |req: &ServiceRequest| Some(format!("limitation:{scope}:{}", client_ip(req))))
        .limit(limit as usize)
        .period(Duration::from_secs(window_secs))
        .build()
        .map_err(std::io::Error::other)
}

pub async fn serve(
    options: &Options,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    let url = options.redis_url();
    let allow = web::Data::new(limiter(url, Budget::Allow, ALLOW_LIMIT, ALLOW_WINDOW_SECS)?);
    let flood = web::Data::new(limiter(url, Budget::Flood, FLOOD_LIMIT, FLOOD_WINDOW_SECS)?);
    Ok(HttpServer::new(move || {
        let mut app = App::new();
        for (budget, limiter) in [(Budget::Allow, &allow), (Budget::Flood, &flood)] {
            app = app.service(
                web::scope(&format!("/{}", budget.segment()))
                    .app_data(limiter.clone())
                    .wrap(RateLimiter::default())
                    .route("", web::get().to(handler::ok)),
            );
        }
        app
    })
    .workers(options.workers)
    .listen(listener)?
    .run())
}
