//! `RateLimit` and `RateLimit-Policy` as draft-ietf-httpapi-ratelimit-headers-11 defines
//! them, read with a structured-field parser: `r` and `t` per algorithm against the state an
//! injected clock makes, in Redis and in memory; the older reading; the partition key; and a
//! route that hides its limits.

use std::time::Duration;

use actix_web::{dev::ServiceResponse, get, test, App, HttpResponse};
use ratelimit_runtime::{
    clock::ManualClock,
    coverage::AppFactory,
    key::KeySecret,
    rate_limit,
    settings::{Keys, Responses},
    store::MemoryStore,
    HeaderFamilies, IetfDraft, RateLimiter,
};

use crate::{
    from, header, redis_limiter,
    support::{quota_policies, service_limits, RedisServer, ServiceLimit, T0},
};

#[rate_limit(limit = 4, window = "1m", identity = "ip", algorithm = "fixed_window")]
#[get("/ietf/fixed")]
async fn ietf_fixed() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(
    limit = 4,
    window = "1m",
    identity = "ip",
    algorithm = "sliding_window"
)]
#[get("/ietf/sliding")]
async fn ietf_sliding() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 4, window = "1m", identity = "ip", algorithm = "sliding_log")]
#[get("/ietf/log")]
async fn ietf_log() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 4, window = "1m", identity = "ip", algorithm = "gcra")]
#[get("/ietf/gcra")]
async fn ietf_gcra() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(
    limit = 1,
    window = "5m",
    identity = "ip",
    algorithm = "sliding_log",
    headers = "none"
)]
#[get("/ietf/hidden")]
async fn ietf_hidden() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn ietf_app(limiter: RateLimiter) -> App<impl AppFactory> {
    App::new()
        .service(ietf_fixed)
        .service(ietf_sliding)
        .service(ietf_log)
        .service(ietf_gcra)
        .service(ietf_hidden)
        .wrap(limiter)
}

/// The one `RateLimit` item of a response, parsed.
fn limit_of<B: actix_web::body::MessageBody>(res: &ServiceResponse<B>) -> ServiceLimit {
    let items = service_limits(&header(res, "ratelimit"));
    assert_eq!(items.len(), 1, "{items:?}");
    items.into_iter().next().expect("one item")
}

/// `(r, t)` of the requests sent now, as `RateLimit` reports them.
async fn r_and_t<S, B>(app: &S, path: &str, times: usize) -> Vec<(u16, i64, Option<i64>)>
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = ServiceResponse<B>,
        Error = actix_web::Error,
    >,
    B: actix_web::body::MessageBody,
{
    let mut seen = Vec::new();
    for _ in 0..times {
        let res = test::call_service(app, from("203.0.113.7").uri(path).to_request()).await;
        let policy = quota_policies(&header(&res, "ratelimit-policy"));
        assert_eq!((policy[0].q, policy[0].w), (4, Some(60)), "{path}");
        let item = limit_of(&res);
        assert_eq!(item.policy, policy[0].policy, "{path}");
        if res.status() == 429 {
            // Retry-After never names a time before the effective window ends.
            let retry: i64 = header(&res, "retry-after").parse().unwrap();
            assert!(item.t.unwrap() <= retry, "{path}: {item:?}, retry {retry}");
        }
        seen.push((res.status().as_u16(), item.r, item.t));
    }
    seen
}

/// Every algorithm's `r` and `t` under draft 11, 10 s into a minute (`T0` starts one), each
/// against the exact figure its state gives.
async fn draft_11_figures(limiter: RateLimiter, clock: &ManualClock) {
    let app = test::init_service(ietf_app(limiter)).await;
    clock.advance(Duration::from_secs(10));
    // Fixed window: what is left of it, until it ends in 50 s; refused, until then too.
    assert_eq!(
        r_and_t(&app, "/ietf/fixed", 5).await,
        [
            (200, 3, Some(50)),
            (200, 2, Some(50)),
            (200, 1, Some(50)),
            (200, 0, Some(50)),
            (429, 0, Some(50)),
        ]
    );
    // Sliding window, nothing in the previous minute: 50 s to this window's end, then 15 s
    // (a minute / 4) for a full count to free a unit. `X-RateLimit-Reset` keeps its own
    // meaning: until the count stops counting, at the end of the next window.
    assert_eq!(
        r_and_t(&app, "/ietf/sliding", 1).await,
        [(200, 3, Some(65))]
    );
    let res = test::call_service(&app, from("203.0.113.7").uri("/ietf/sliding").to_request()).await;
    assert_eq!(header(&res, "x-ratelimit-reset"), "110");
    assert_eq!((limit_of(&res).r, limit_of(&res).t), (2, Some(65)));
    // GCRA, one unit every 15 s: the first request is back in 15 s; 5 s later the next
    // request leaves the arrival time 25 s ahead, 10 s past a whole interval.
    assert_eq!(r_and_t(&app, "/ietf/gcra", 1).await, [(200, 3, Some(15))]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(r_and_t(&app, "/ietf/gcra", 1).await, [(200, 2, Some(10))]);
    // Sliding log: a whole window after an allowed request; refused, until the oldest of the
    // log leaves it (logged at 15 s, out at 75 s, 40 s after 35 s).
    assert_eq!(r_and_t(&app, "/ietf/log", 1).await, [(200, 3, Some(60))]);
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        r_and_t(&app, "/ietf/log", 4).await,
        [
            (200, 2, Some(60)),
            (200, 1, Some(60)),
            (200, 0, Some(60)),
            (429, 0, Some(40)),
        ]
    );
}

#[actix_web::test]
async fn every_algorithm_reports_r_and_t_as_draft_11_reads_them_in_memory() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    draft_11_figures(limiter, &clock).await;
}

#[actix_web::test]
async fn every_algorithm_reports_r_and_t_as_draft_11_reads_them_in_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    draft_11_figures(redis_limiter(&server, &clock).await, &clock).await;
}

#[actix_web::test]
async fn the_older_reading_reports_until_the_budget_is_whole() {
    let clock = ManualClock::at(T0 + 10_000);
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(clock.clone())
        .responses(
            Responses::new().headers(HeaderFamilies::both().ietf_draft_version(IetfDraft::Draft10)),
        );
    let app = test::init_service(ietf_app(limiter)).await;
    // The sliding window's count stops counting at the end of the next window; GCRA's
    // budget is whole once the arrival time is reached.
    assert_eq!(
        r_and_t(&app, "/ietf/sliding", 1).await,
        [(200, 3, Some(110))]
    );
    assert_eq!(
        r_and_t(&app, "/ietf/gcra", 2).await,
        [(200, 3, Some(15)), (200, 2, Some(30))]
    );
}

#[actix_web::test]
async fn the_partition_key_is_a_keyed_hash_never_the_identity() {
    let families = HeaderFamilies::both().partition_key(true);
    let secret = KeySecret::new("a deployment secret of 16 bytes or more").unwrap();
    let limiter = RateLimiter::new(MemoryStore::new())
        .clock(ManualClock::at(T0))
        .keys(Keys::new().secret(secret))
        .responses(Responses::new().headers(families));
    let app = test::init_service(ietf_app(limiter)).await;
    let mut keys = Vec::new();
    for ip in ["203.0.113.7", "203.0.113.7", "198.51.100.2"] {
        for path in ["/ietf/fixed", "/ietf/fixed", "/ietf/log"] {
            let res = test::call_service(&app, from(ip).uri(path).to_request()).await;
            for (name, value) in res.headers() {
                let value = value.to_str().unwrap();
                assert!(!value.contains(ip), "{name}: {value}");
            }
            let pk = limit_of(&res).pk.expect("a partition key");
            assert_eq!(pk.len(), 12);
            assert!(!String::from_utf8_lossy(&pk).contains(ip));
            // The policy is the same for every client: no `pk` there.
            assert_eq!(
                quota_policies(&header(&res, "ratelimit-policy"))[0].pk,
                None
            );
            keys.push(pk);
        }
    }
    // One client on one route, one key; another route or another client, another.
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys[0], keys[3]);
    assert_ne!(keys[0], keys[2]);
    assert_ne!(keys[0], keys[6]);

    // Without a key secret there is nothing to key the hash with: no `pk`.
    let limiter =
        RateLimiter::new(MemoryStore::new()).responses(Responses::new().headers(families));
    let app = test::init_service(ietf_app(limiter)).await;
    let res = test::call_service(&app, from("203.0.113.7").uri("/ietf/fixed").to_request()).await;
    assert_eq!(limit_of(&res).pk, None);
    // And it is off by default.
    let app = test::init_service(ietf_app(RateLimiter::new(MemoryStore::new()))).await;
    let res = test::call_service(&app, from("203.0.113.7").uri("/ietf/fixed").to_request()).await;
    assert_eq!(limit_of(&res).pk, None);
}

#[actix_web::test]
async fn a_route_with_headers_none_tells_no_limit() {
    let limiter = RateLimiter::new(MemoryStore::new()).clock(ManualClock::at(T0));
    let app = test::init_service(ietf_app(limiter)).await;
    let hidden = || from("203.0.113.7").uri("/ietf/hidden").to_request();
    let allowed = test::call_service(&app, hidden()).await;
    assert_eq!(allowed.status(), 200);
    let refused = test::call_service(&app, hidden()).await;
    assert_eq!(refused.status(), 429);
    for res in [&allowed, &refused] {
        for (name, _) in res.headers() {
            assert!(!name.as_str().contains("ratelimit"), "{name}");
        }
    }
    // The 429 says when to come back, as HTTP requires, and nothing of the limit.
    assert_eq!(header(&refused, "retry-after"), "300");
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(refused).await).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    let mut fields: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["detail", "retry_after", "status", "title", "type"]);

    // Another route of the same App tells its limit, and names it when it refuses.
    for _ in 0..4 {
        test::call_service(&app, from("203.0.113.7").uri("/ietf/fixed").to_request()).await;
    }
    let refused =
        test::call_service(&app, from("203.0.113.7").uri("/ietf/fixed").to_request()).await;
    assert_eq!(limit_of(&refused).r, 0);
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(refused).await).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["ietf_fixed"]));
}
