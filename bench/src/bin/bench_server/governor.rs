//! (c) actix-governor 0.10: GCRA in process memory (a sharded map per route), keyed by the
//! same client address as every other variant. Counts per process, not across instances.

use std::time::Duration;

use actix_governor::{
    Governor, GovernorConfig, GovernorConfigBuilder, KeyExtractor, SimpleKeyExtractionError,
};
use actix_web::{dev::ServiceRequest, web, App, HttpServer};
use ratelimit_bench::{
    route::{ALLOW_LIMIT, ALLOW_WINDOW_SECS, FLOOD_LIMIT, FLOOD_WINDOW_SECS},
    Budget,
};

use crate::{client_ip::client_ip, handler, options::Options};

/// The client address of [`client_ip`], as a governor key.
#[derive(Debug, Clone, Copy)]
struct ForwardedIp;

impl KeyExtractor for ForwardedIp {
    type Key = String;
    type KeyExtractionError = SimpleKeyExtractionError<&'static str>;

    fn extract(&self, req: &ServiceRequest) -> Result<String, Self::KeyExtractionError> {
        Ok(client_ip(req))
    }
}

/// `limit` per `window_secs` as a GCRA quota: one cell every window / limit, burst = limit.
fn config(
    limit: u32,
    window_secs: u64,
) -> std::io::Result<
    GovernorConfig<ForwardedIp, actix_governor::governor::middleware::NoOpMiddleware>,
> {
    GovernorConfigBuilder::default()
        .key_extractor(ForwardedIp)
        .period(Duration::from_secs(window_secs) / limit)
        .burst_size(limit)
        .finish()
        .ok_or_else(|| std::io::Error::other("invalid governor quota"))
}

pub async fn serve(
    options: &Options,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    let allow = config(ALLOW_LIMIT, ALLOW_WINDOW_SECS)?;
    let flood = config(FLOOD_LIMIT, FLOOD_WINDOW_SECS)?;
    Ok(HttpServer::new(move || {
        let mut app = App::new();
        for (budget, config) in [(Budget::Allow, &allow), (Budget::Flood, &flood)] {
            app = app.service(
                web::scope(&format!("/{}", budget.segment()))
                    .wrap(Governor::new(config))
                    .route("", web::get().to(handler::ok)),
            );
        }
        app
    })
    .workers(options.workers)
    .listen(listener)?
    .run())
}
