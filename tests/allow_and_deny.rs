//! Allow and deny lists against a hostile client and a careless operator: an allowed key does
//! not open a sign-in route unless its entry names the route; API keys are listed by
//! fingerprint; ranges wider than the bound are refused; an IPv6 deny entry covers the group
//! the limiter counts by; a long hash is read again only when its version or length changed;
//! a list of 100,000 entries keeps checks decided within their timeout, and one past the cap
//! is refused before it is read; every entry added or removed is logged by name.

mod support;

use ratelimit_runtime::identity::UsernameReader;
use ratelimit_runtime::settings::Identities;
use std::time::Duration;

use actix_web::{
    dev::{Service, ServiceResponse},
    get, post,
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use futures_util::future::join_all;
use ratelimit_runtime::{
    identity::ApiKeySource,
    overrides::{api_key_fingerprint, version_key, Overrides, MAX_ENTRIES},
    rate_limit,
    store::{MemoryStore, RedisStore, Store},
    RateLimiter,
};
use redis::Commands as _;
use support::{CapturedLog, RedisServer};

#[rate_limit(limit = 2, window = "1m", identity = "ip", fail = "closed")]
#[get("/search")]
async fn search() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[rate_limit(limit = 1000000, window = "1m", identity = "ip", fail = "closed")]
#[get("/busy")]
async fn busy() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[derive(serde::Deserialize)]
struct Login {
    username: String,
    password: String,
}

#[rate_limit(
    limit = 3,
    window = "5m",
    identity = "username",
    algorithm = "sliding_log",
    count = "failures",
    block = "15m",
    fail = "closed"
)]
#[post("/login")]
async fn login(body: web::Json<Login>) -> HttpResponse {
    if body.password == "right" {
        HttpResponse::Ok().body(body.username.clone())
    } else {
        HttpResponse::Unauthorized().finish()
    }
}

/// A limiter over `store` reading the overrides file at `path` (refreshed every 50 ms), with
/// API keys read from `X-API-Key` as sent.
fn limiter(store: impl Store, overrides: Overrides) -> RateLimiter {
    RateLimiter::new(store)
        .identity(
            Identities::new()
                .username(UsernameReader::json_or_form::<Login>(|l| &l.username))
                .api_key(ApiKeySource::new("x-api-key", false)),
        )
        .overrides(overrides.refresh(Duration::from_millis(50)))
}

async fn app(
    limiter: RateLimiter,
) -> impl Service<actix_http::Request, Response = Answer, Error = actix_web::Error> {
    test::init_service(
        App::new()
            .service(search)
            .service(busy)
            .service(login)
            .wrap(limiter),
    )
    .await
}

/// What the App answers: the handler's body or the limiter's.
type Answer = ServiceResponse<actix_web::body::EitherBody<actix_web::body::BoxBody>>;

fn from(request: TestRequest, ip: &str) -> TestRequest {
    let peer = match ip.parse::<std::net::IpAddr>().unwrap() {
        std::net::IpAddr::V4(v4) => format!("{v4}:4000"),
        std::net::IpAddr::V6(v6) => format!("[{v6}]:4000"),
    };
    request.peer_addr(peer.parse().unwrap())
}

fn search_as(ip: &str, key: Option<&str>) -> TestRequest {
    let request = from(TestRequest::get().uri("/search"), ip);
    match key {
        Some(key) => request.insert_header(("x-api-key", key)),
        None => request,
    }
}

fn sign_in(ip: &str, key: &str, username: &str, password: &str) -> TestRequest {
    from(TestRequest::post().uri("/login"), ip)
        .insert_header(("x-api-key", key))
        .set_json(serde_json::json!({ "username": username, "password": password }))
}

async fn statuses<S>(app: &S, requests: impl IntoIterator<Item = TestRequest>) -> Vec<u16>
where
    S: Service<actix_http::Request, Response = Answer, Error = actix_web::Error>,
{
    let mut out = Vec::new();
    for request in requests {
        let response = test::call_service(app, request.to_request()).await;
        out.push(response.status().as_u16());
    }
    out
}

/// An overrides file holding `text`, in a directory removed on drop.
struct File {
    dir: tempfile::TempDir,
}

impl File {
    fn new(text: &str) -> File {
        let file = File {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::write(file.path(), text).unwrap();
        file
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("ratelimit.toml")
    }

    fn overrides(&self) -> Overrides {
        Overrides::new().file(self.path())
    }
}

#[actix_web::test]
async fn an_allowed_api_key_passes_every_route_but_the_sign_in_route_unless_its_entry_names_it() {
    let print = api_key_fingerprint("monitoring-key", None);
    let file = File::new(&format!("[allow]\napi_keys = [\"{print}\"]\n"));
    let app = app(limiter(MemoryStore::new(), file.overrides())).await;
    // The search route (limit 2) does not limit the monitoring key.
    let seen = statuses(
        &app,
        (0..5).map(|_| search_as("198.51.100.1", Some("monitoring-key"))),
    )
    .await;
    assert_eq!(seen, [200; 5]);
    // The sign-in route counts its failures and locks the name out, key or no key.
    let wrong = (0..10).map(|i| sign_in(&format!("203.0.113.{i}"), "monitoring-key", "alice", "x"));
    let seen = statuses(&app, wrong).await;
    assert_eq!(&seen[..3], [401; 3], "{seen:?}");
    assert_eq!(&seen[3..], [429; 7], "{seen:?}");
    let right = sign_in("203.0.113.99", "monitoring-key", "alice", "right");
    assert_eq!(statuses(&app, [right]).await, [429], "locked out");

    // An entry that names the sign-in route opens it, and only it.
    let file = File::new(&format!(
        "[allow]\napi_keys = [{{ value = \"{print}\", routes = [\"POST /login\"], note = \"pen test\" }}]\n"
    ));
    let app = self::app(limiter(MemoryStore::new(), file.overrides())).await;
    let wrong = (0..10).map(|_| sign_in("203.0.113.1", "monitoring-key", "alice", "x"));
    assert_eq!(statuses(&app, wrong).await, [401; 10]);
    let seen = statuses(
        &app,
        (0..3).map(|_| search_as("198.51.100.1", Some("monitoring-key"))),
    )
    .await;
    assert_eq!(seen, [200, 200, 429], "the search route is not named");
}

#[actix_web::test]
async fn a_plain_api_key_in_a_list_is_refused_unless_the_services_take_plain_keys() {
    let log = CapturedLog::start(tracing::Level::INFO);
    let file = File::new("[allow]\napi_keys = [\"monitoring-key\"]\n");
    let overrides = file.overrides();
    let app = app(limiter(MemoryStore::new(), overrides.clone())).await;
    let refused = overrides.refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    let problems = refused[0].1.join("\n");
    assert!(problems.contains("plain text"), "{problems}");
    assert!(
        !problems.contains("monitoring-key"),
        "the key is never shown: {problems}"
    );
    let seen = statuses(
        &app,
        (0..3).map(|_| search_as("198.51.100.1", Some("monitoring-key"))),
    )
    .await;
    assert_eq!(
        seen,
        [200, 200, 429],
        "nothing of the refused file is in force"
    );

    let overrides = file.overrides().plain_api_keys(true);
    let app = self::app(limiter(MemoryStore::new(), overrides.clone())).await;
    assert!(overrides.refused().is_empty());
    let seen = statuses(
        &app,
        (0..3).map(|_| search_as("198.51.100.1", Some("monitoring-key"))),
    )
    .await;
    assert_eq!(seen, [200; 3]);
    // Neither the refusal nor the entry taken shows the key in a log line.
    let text = log.text();
    assert!(text.contains("list entry added"), "{text}");
    assert!(!text.contains("monitoring-key"), "{text}");
}

#[actix_web::test]
async fn a_range_wider_than_the_bound_is_refused_unless_the_bound_allows_it() {
    let file = File::new("[deny]\nips = [\"0.0.0.0/0\"]\n");
    let overrides = file.overrides();
    let app = app(limiter(MemoryStore::new(), overrides.clone())).await;
    let problems = overrides.refused()[0].1.join("\n");
    assert!(
        problems.contains("`0.0.0.0/0` is wider than the widest IPv4 range"),
        "{problems}"
    );
    assert_eq!(
        statuses(&app, [search_as("198.51.100.1", None)]).await,
        [200]
    );

    let overrides = file.overrides().widest_ranges(0, 0);
    let app = self::app(limiter(MemoryStore::new(), overrides.clone())).await;
    assert!(overrides.refused().is_empty());
    assert_eq!(
        statuses(&app, [search_as("198.51.100.1", None)]).await,
        [403]
    );
}

#[actix_web::test]
async fn a_deny_entry_for_one_ipv6_address_covers_the_group_its_client_is_counted_in() {
    let file = File::new("[deny]\nips = [\"2001:db8::7\"]\n");
    let app = app(limiter(MemoryStore::new(), file.overrides())).await;
    let seen = statuses(
        &app,
        [
            search_as("2001:db8::7", None),
            search_as("2001:db8::8", None),
            search_as("2001:db8:0:0:ffff::1", None),
            search_as("2001:db8:0:1::7", None),
        ],
    )
    .await;
    assert_eq!(seen, [403, 403, 403, 200], "one /64 is one client");
}

#[actix_web::test]
async fn each_entry_added_or_removed_is_logged_by_name() {
    let log = CapturedLog::start(tracing::Level::INFO);
    let print = api_key_fingerprint("monitoring-key", None);
    let file = File::new(&format!(
        "[allow]\napi_keys = [\"{print}\"]\n[deny]\nips = [\"203.0.113.0/24\"]\n"
    ));
    let overrides = file.overrides();
    let _app = app(limiter(MemoryStore::new(), overrides.clone())).await;
    std::fs::write(
        file.path().with_extension("staged"),
        "[deny]\nips = [\"198.51.100.0/24\"]\nuser_ids = [\"mallory\"]\n",
    )
    .unwrap();
    std::fs::rename(file.path().with_extension("staged"), file.path()).unwrap();
    let started = std::time::Instant::now();
    while !log.text().contains("user_id mallory") {
        assert!(started.elapsed() < Duration::from_secs(3), "{}", log.text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = log.text();
    for line in [
        format!("list entry added source=\"file\" list=\"allow\" entry=api_key {print}"),
        "list entry added source=\"file\" list=\"deny\" entry=ip 203.0.113.0/24".to_owned(),
        format!("list entry removed source=\"file\" list=\"allow\" entry=api_key {print}"),
        "list entry removed source=\"file\" list=\"deny\" entry=ip 203.0.113.0/24".to_owned(),
        "list entry added source=\"file\" list=\"deny\" entry=ip 198.51.100.0/24".to_owned(),
    ] {
        assert!(
            text.lines().any(|l| l.contains(&line)),
            "no line with {line:?} in:\n{text}"
        );
    }
    assert!(!text.contains("monitoring-key"));
}

#[actix_web::test]
async fn a_missing_overrides_file_is_a_warning() {
    let log = CapturedLog::start(tracing::Level::WARN);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-there.toml");
    let _limiter = limiter(MemoryStore::new(), Overrides::new().file(&path));
    let text = log.text();
    assert!(
        text.contains("the overrides file does not exist") && text.contains("not-there.toml"),
        "{text}"
    );
}

/// Every call of `command` Redis has served, from `INFO commandstats`.
fn calls(redis: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.connection())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

async fn redis_app(
    redis: &RedisServer,
    overrides: Overrides,
) -> impl Service<actix_http::Request, Response = Answer, Error = actix_web::Error> {
    // The store's own default timeout (50 ms): what a request waits for at most.
    let store = RedisStore::builder(redis.url()).build().await.unwrap();
    app(limiter(store, overrides.redis(redis.url()))).await
}

/// Waits (up to `within`) until `ip`'s request to `/search` is answered `status`.
async fn until_status<S>(app: &S, ip: &str, status: u16, within: Duration)
where
    S: Service<actix_http::Request, Response = Answer, Error = actix_web::Error>,
{
    let started = std::time::Instant::now();
    while statuses(app, [search_as(ip, None)]).await != [status] {
        assert!(
            started.elapsed() < within,
            "{ip}: not {status} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[actix_web::test]
async fn a_long_hash_is_read_again_only_when_its_version_or_length_changes() {
    let redis = RedisServer::start();
    // Past the 1,000 fields a refresh reads whole whatever the version says.
    fill(&redis, 1_500);
    let mut conn = redis.connection();
    let _: () = conn
        .hset("rl:overrides", "deny ip 198.51.100.1", "")
        .unwrap();
    let app = redis_app(&redis, Overrides::new()).await;
    until_status(&app, "198.51.100.1", 403, Duration::from_secs(2)).await;
    // Unchanged: a refresh reads the version and the length, never the hash.
    let scans = calls(&redis, "hscan");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        calls(&redis, "hscan"),
        scans,
        "ten refreshes, no read of the hash"
    );
    assert!(calls(&redis, "hlen") >= 5);
    // One entry swapped for another by hand, the length kept, the version not counted: not
    // seen (the documented rule) ...
    let _: () = redis::pipe()
        .atomic()
        .hdel("rl:overrides", "deny ip 198.51.100.1")
        .hset("rl:overrides", "deny ip 198.51.100.2", "")
        .query(&mut conn)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        statuses(&app, [search_as("198.51.100.1", None)]).await,
        [403]
    );
    // ... until the version says so, as the admin command's writes do.
    let _: u64 = conn.incr(version_key("rl:overrides"), 1).unwrap();
    until_status(&app, "198.51.100.2", 403, Duration::from_secs(2)).await;
    until_status(&app, "198.51.100.1", 200, Duration::from_secs(2)).await;
    // A field added changes the length: read again without the version.
    let _: () = conn
        .hset("rl:overrides", "deny ip 198.51.100.3", "")
        .unwrap();
    until_status(&app, "198.51.100.3", 403, Duration::from_secs(2)).await;
}

#[actix_web::test]
async fn a_short_hash_is_read_at_every_refresh_so_a_change_by_hand_applies() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let _: () = conn
        .hset("rl:overrides", "deny ip 198.51.100.1", "")
        .unwrap();
    let app = redis_app(&redis, Overrides::new()).await;
    until_status(&app, "198.51.100.1", 403, Duration::from_secs(2)).await;
    let _: () = redis::pipe()
        .atomic()
        .hdel("rl:overrides", "deny ip 198.51.100.1")
        .hset("rl:overrides", "deny ip 198.51.100.2", "")
        .query(&mut conn)
        .unwrap();
    until_status(&app, "198.51.100.2", 403, Duration::from_secs(2)).await;
    until_status(&app, "198.51.100.1", 200, Duration::from_secs(2)).await;
}

/// Writes `count` deny entries (one address each, from 100.64.0.0) into the hash.
fn fill(redis: &RedisServer, count: u32) {
    let mut conn = redis.connection();
    let base = u32::from(std::net::Ipv4Addr::new(100, 64, 0, 0));
    for chunk in (0..count).collect::<Vec<_>>().chunks(20_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            let address = std::net::Ipv4Addr::from(base + i);
            pipe.hset("rl:overrides", format!("deny ip {address}"), "")
                .ignore();
        }
        let _: () = pipe.query(&mut conn).unwrap();
    }
}

/// Held by the tests that fill a hash with 100,000 fields or more, so that they do not run
/// at once on a two-core machine (their reading threads would starve each other's checks).
static LONG_LISTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[actix_web::test]
async fn a_hundred_thousand_entries_keep_every_check_decided_within_its_timeout() {
    let _one_at_a_time = LONG_LISTS.lock().await;
    let redis = RedisServer::start();
    fill(&redis, 100_000);
    let app = redis_app(&redis, Overrides::new()).await;
    // The last entry: 100.64.0.0 + 99,999.
    until_status(&app, "100.65.134.159", 403, Duration::from_secs(10)).await;
    let scans = calls(&redis, "hscan");
    // The hash read again after a change while checks run on a route that fails closed: a
    // check that waited past the store's 50 ms would be a 503. Rounds of 100 concurrent
    // checks go on until the hash was read whole again (how long that takes depends on how
    // fast this build parses 100,000 fields), 20 rounds at least.
    let _: u64 = redis
        .connection()
        .incr(version_key("rl:overrides"), 1)
        .unwrap();
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    let mut round = 0u32;
    while round < 20 || calls(&redis, "hscan") < 2 * scans {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the hash was not read again: {} scans after the first read's {scans}",
            calls(&redis, "hscan") - scans
        );
        let batch = (0..100u32).map(|i| {
            let ip = format!("198.18.{}.{}", round % 250, i + 1);
            test::call_service(
                &app,
                from(TestRequest::get().uri("/busy"), &ip).to_request(),
            )
        });
        seen.extend(
            join_all(batch)
                .await
                .into_iter()
                .map(|r| r.status().as_u16()),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        round += 1;
    }
    let failed = seen.iter().filter(|s| **s != 200).count();
    assert_eq!(failed, 0, "of {} checks", seen.len());
    assert_eq!(statuses(&app, [search_as("100.64.0.7", None)]).await, [403]);
}

#[actix_web::test]
async fn a_hash_past_the_cap_is_refused_before_it_is_read() {
    let _one_at_a_time = LONG_LISTS.lock().await;
    let redis = RedisServer::start();
    fill(&redis, MAX_ENTRIES as u32 + 1);
    let overrides = Overrides::new();
    let app = redis_app(&redis, overrides.clone()).await;
    let refused = overrides.refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].1[0].contains("200001 fields"), "{refused:?}");
    assert_eq!(calls(&redis, "hscan"), 0, "never read");
    assert_eq!(statuses(&app, [search_as("100.64.0.7", None)]).await, [200]);
}

#[actix_web::test]
async fn listing_api_keys_read_from_a_header_as_sent_is_warned_of() {
    let print = api_key_fingerprint("monitoring-key", None);
    let file = File::new(&format!("[allow]\napi_keys = [\"{print}\"]\n"));
    let warning = "the allow list names API keys while the limiter reads the API key from a header as the client sends it";
    let log = CapturedLog::start(tracing::Level::WARN);
    let _app = app(limiter(MemoryStore::new(), file.overrides())).await;
    assert!(log.text().contains(warning), "{}", log.text());

    // Keys the app validated (a function) are not anyone's to send: no warning.
    let log = CapturedLog::start(tracing::Level::WARN);
    let validated = RateLimiter::new(MemoryStore::new())
        .identity(Identities::new().api_key(ApiKeySource::from_fn(|_| None)))
        .overrides(file.overrides());
    let _app = test::init_service(App::new().service(search).wrap(validated)).await;
    assert!(!log.text().contains(warning), "{}", log.text());
}

#[rate_limit(limit = 100, window = "1m", identity = "ip", fail = "closed")]
#[get("/private")]
async fn private() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// A scope's auth layer that refuses every request before the route's guard sees it.
async fn refuse_all(
    req: actix_web::dev::ServiceRequest,
    _: actix_web::middleware::Next<actix_web::body::BoxBody>,
) -> Result<ServiceResponse, actix_web::Error> {
    Ok(req.into_response(HttpResponse::Unauthorized().finish()))
}

#[actix_web::test]
async fn a_denied_client_is_denied_where_something_answers_before_the_route_s_guard() {
    let file = File::new("[deny]\nips = [\"203.0.113.0/24\"]\n[allow]\nips = [\"203.0.113.7\"]\n");
    let limiter = limiter(MemoryStore::new(), file.overrides());
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/s")
                    .wrap(actix_web::middleware::from_fn(refuse_all))
                    .service(private),
            )
            .wrap(limiter),
    )
    .await;
    let get = |ip: &str| from(TestRequest::get().uri("/s/private"), ip).to_request();
    // On both lists: denied, as on a route whose guard decides.
    assert_eq!(
        test::call_service(&app, get("203.0.113.7")).await.status(),
        403
    );
    assert_eq!(
        test::call_service(&app, get("203.0.113.8")).await.status(),
        403
    );
    assert_eq!(
        test::call_service(&app, get("198.51.100.1")).await.status(),
        401
    );
}
