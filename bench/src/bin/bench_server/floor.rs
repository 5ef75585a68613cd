//! (d) The floor: a hand-written middleware doing exactly one `EVALSHA` of a trivial script
//! (INCR + PEXPIRE, `scripts/floor.lua`) per request over one multiplexed connection. No
//! Redis-backed limiter can do less than this one round trip.
//!
//! (f) The same middleware with one multiplexed connection per actix worker, made on the
//! worker's own thread, as this project's stores do: what the floor costs with this
//! project's connection layout.
//!
//! (h) (f) answering with the five rate-limit headers this project sends (`X-RateLimit-*`,
//! `RateLimit-Policy`, `RateLimit`), their figures from its one `EVALSHA`
//! (`scripts/floor_headers.lua`: the count and the counter's TTL): the floor of a limiter
//! that tells clients their limits.

use actix_web::{
    body::{EitherBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    http::header::{HeaderName, HeaderValue},
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

/// (h)'s script: the count and the counter's TTL.
const FLOOR_HEADERS_SCRIPT: &str = include_str!("../../../scripts/floor_headers.lua");

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
    /// (h): the headers of this scope that never change (`X-RateLimit-Limit`,
    /// `RateLimit-Policy`) and the policy's quoted name, when the floor sends the headers.
    headers: Option<FixedHeaders>,
}

/// What (h) sends the same on every answer of a scope.
struct FixedHeaders {
    limit: HeaderValue,
    policy: HeaderValue,
    name: String,
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
    let mut call = redis::cmd("EVALSHA");
    call.arg(&limit.sha).arg(1).arg(&key).arg(limit.window_ms);
    let Some(fixed) = &limit.headers else {
        let count: redis::RedisResult<u64> = call.query_async(&mut connection).await;
        let refused = match count {
            Ok(count) if count <= limit.limit => None,
            Ok(_) => Some(HttpResponse::TooManyRequests().finish()),
            Err(_) => Some(HttpResponse::ServiceUnavailable().finish()),
        };
        return match refused {
            None => Ok(next.call(req).await?.map_into_left_body()),
            Some(response) => Ok(req.into_response(response).map_into_right_body()),
        };
    };
    let reply: redis::RedisResult<String> = call.query_async(&mut connection).await;
    let figures = reply.ok().and_then(|reply| {
        let (count, ttl) = reply.split_once(' ')?;
        Some((count.parse::<u64>().ok()?, ttl.parse::<i64>().ok()?))
    });
    let Some((count, ttl_ms)) = figures else {
        let response = HttpResponse::ServiceUnavailable().finish();
        return Ok(req.into_response(response).map_into_right_body());
    };
    let remaining = limit.limit.saturating_sub(count);
    let reset = u64::try_from(ttl_ms).unwrap_or(0).div_ceil(1000);
    let mut response = if count <= limit.limit {
        next.call(req).await?.map_into_left_body()
    } else {
        let refused = HttpResponse::TooManyRequests().finish();
        req.into_response(refused).map_into_right_body()
    };
    let headers = response.headers_mut();
    let mut buffer = itoa::Buffer::new();
    headers.insert(X_LIMIT, fixed.limit.clone());
    headers.insert(X_REMAINING, HeaderValue::from(remaining));
    headers.insert(X_RESET, HeaderValue::from(reset));
    headers.insert(POLICY, fixed.policy.clone());
    let mut ratelimit = String::with_capacity(fixed.name.len() + 24);
    ratelimit.push_str(&fixed.name);
    ratelimit.push_str(";r=");
    ratelimit.push_str(buffer.format(remaining));
    ratelimit.push_str(";t=");
    ratelimit.push_str(buffer.format(reset));
    if let Ok(value) = HeaderValue::from_str(&ratelimit) {
        headers.insert(RATELIMIT, value);
    }
    Ok(response)
}

const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Serves (d) with `per_worker` false, (f) with it true, (h) with `headers` too.
pub async fn serve(
    options: &Options,
    per_worker: bool,
    headers: bool,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    let client = redis::Client::open(options.redis_url()).map_err(std::io::Error::other)?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(std::io::Error::other)?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(if headers {
            FLOOR_HEADERS_SCRIPT
        } else {
            FLOOR_SCRIPT
        })
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
            headers: headers.then(|| {
                let name = format!("\"{}\"", budget.segment());
                FixedHeaders {
                    limit: HeaderValue::from(limit),
                    policy: HeaderValue::from_str(&format!("{name};q={limit};w={window_secs}"))
                        .expect("a header value"),
                    name,
                }
            }),
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
