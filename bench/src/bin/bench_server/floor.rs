//! (d) The floor: a hand-written middleware doing exactly one `EVALSHA` of a trivial script
//! (INCR + PEXPIRE, `scripts/floor.lua`) per request over one multiplexed connection. No
//! Redis-backed limiter can do less than this one round trip.
//!
//! (f) The same middleware with one multiplexed connection per actix worker, made on the
//! worker's own thread, as this project's stores do: what the floor costs with this
//! project's connection layout.

use actix_web::{
    body::{EitherBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    middleware::{from_fn, Next},
    web, App, Error, HttpResponse, HttpServer,
};
use ratelimit_bench::{
    route::{ALLOW_LIMIT, ALLOW_WINDOW_SECS, FLOOD_LIMIT, FLOOD_WINDOW_SECS},
    Budget,
};
use redis::aio::MultiplexedConnection;

use crate::{client_ip::client_ip, handler, options::Options};

/// The script, loaded once at start-up with `SCRIPT LOAD`.
const FLOOR_SCRIPT: &str = include_str!("../../../scripts/floor.lua");

/// The limit of one scope, with the process's one connection ((d) only).
struct FloorLimit {
    connection: Option<MultiplexedConnection>,
    sha: String,
    /// What this server's keys of the scope start with: the scope, after the process id, so
    /// (d), (f) and (f′) never count in one another's keys (with shared keys, whichever ran
    /// first would pay for creating the keys in the exact checks).
    key_stem: String,
    limit: u64,
    window_ms: u64,
}

async fn limit_request(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    let limit = req
        .app_data::<web::Data<FloorLimit>>()
        .expect("every floor scope has its limit")
        .clone();
    let key = format!("{}:{}", limit.key_stem, client_ip(&req));
    let mut connection = match &limit.connection {
        Some(connection) => connection.clone(),
        None => req
            .app_data::<web::Data<MultiplexedConnection>>()
            .expect("(f) makes one connection per worker")
            .get_ref()
            .clone(),
    };
    let count: redis::RedisResult<u64> = redis::cmd("EVALSHA")
        .arg(&limit.sha)
        .arg(1)
        .arg(&key)
        .arg(limit.window_ms)
        .query_async(&mut connection)
        .await;
    let refused = match count {
        Ok(count) if count <= limit.limit => None,
        Ok(_) => Some(HttpResponse::TooManyRequests().finish()),
        Err(_) => Some(HttpResponse::ServiceUnavailable().finish()),
    };
    match refused {
        None => Ok(next.call(req).await?.map_into_left_body()),
        Some(response) => Ok(req.into_response(response).map_into_right_body()),
    }
}

/// Serves (d) with `per_worker` false, (f) with it true.
pub async fn serve(
    options: &Options,
    per_worker: bool,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    let client = redis::Client::open(options.redis_url()).map_err(std::io::Error::other)?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(std::io::Error::other)?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(FLOOR_SCRIPT)
        .query_async(&mut connection)
        .await
        .map_err(std::io::Error::other)?;
    let scope_limit = |budget: Budget, limit: u32, window_secs: u64| {
        web::Data::new(FloorLimit {
            connection: (!per_worker).then(|| connection.clone()),
            sha: sha.clone(),
            key_stem: format!("floor:{}:{}", std::process::id(), budget.segment()),
            limit: u64::from(limit),
            window_ms: window_secs * 1000,
        })
    };
    let allow = scope_limit(Budget::Allow, ALLOW_LIMIT, ALLOW_WINDOW_SECS);
    let flood = scope_limit(Budget::Flood, FLOOD_LIMIT, FLOOD_WINDOW_SECS);
    Ok(HttpServer::new(move || {
        let mut app = App::new();
        if per_worker {
            let client = client.clone();
            // Made on the worker's thread: its driver task runs on the worker's runtime.
            app = app.data_factory(move || {
                let client = client.clone();
                async move { client.get_multiplexed_async_connection().await }
            });
        }
        for (budget, limit) in [(Budget::Allow, &allow), (Budget::Flood, &flood)] {
            app = app.service(
                web::scope(&format!("/{}", budget.segment()))
                    .app_data(limit.clone())
                    .wrap(from_fn(limit_request))
                    .route("", web::get().to(handler::ok)),
            );
        }
        app
    })
    .workers(options.workers)
    .listen(listener)?
    .run())
}
