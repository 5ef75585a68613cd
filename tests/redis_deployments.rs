//! Redis as operators run it: least-privilege ACL users, RESP3, the URL forms redis-rs
//! takes (a db number, a unix socket, percent-encoded passwords), renamed commands. Each
//! against a redis-server the harness starts.

mod support;

use std::time::{Duration, Instant};

use ratelimit_runtime::{
    key::RouteKey,
    store::{
        redact, AdjustRequest, Adjustment, CheckRequest, Decision, RedisClusterStore, RedisStore,
        Store, StoreError, StoreErrorKind,
    },
    Algorithm, IdentityPart, Limit, Window,
};
use support::{key_slot, RedisCluster, RedisServer, T0, W};

/// The guide's ACL recipe (`guide::tls`, "The ACL user"), read from the guide itself so
/// that the two cannot differ.
const TLS_GUIDE: &str = include_str!("../ratelimit-runtime/src/guide/tls.md");

/// Every command the guide's ACL user may run but `PING` (which the tests give or withhold
/// on their own): the commands the scripts run, which the ACL checks inside a script too,
/// and the two that call them.
fn script_commands() -> Vec<&'static str> {
    let recipe = TLS_GUIDE
        .lines()
        .find(|line| line.starts_with("ACL SETUSER ratelimit "))
        .expect("guide::tls has its `ACL SETUSER ratelimit` line");
    recipe
        .split_whitespace()
        .filter(|rule| rule.starts_with('+') && *rule != "+ping")
        .collect()
}

fn login(ip: &str) -> RouteKey {
    RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Ip, ip)])
}

fn limits() -> [Limit; 2] {
    [
        Limit::new(5, Window::from_millis(W), Algorithm::SlidingLog),
        Limit::new(100, Window::from_millis(W), Algorithm::SlidingWindow),
    ]
}

/// One check at `now` (`None`: the script reads Redis's `TIME`, as in production).
async fn check(store: &dyn Store, ip: &str, now: Option<u64>) -> Result<Decision, StoreError> {
    let (key, limits) = (login(ip), limits());
    store
        .check(CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: now,
        })
        .await
}

/// Checks on the server's clock every 50 ms until one is decided or `within` has passed:
/// the decision, or the distinct errors seen.
async fn until_decided(store: &dyn Store, within: Duration) -> Result<Decision, Vec<String>> {
    support::until_ok(within, || check(store, "203.0.113.7", None))
        .await
        .map(|(decision, _)| decision)
}

/// Asserts that `store` decides again within 4 s (checks every 50 ms for up to 8 s) after
/// `what`.
async fn decides_again_soon(store: &dyn Store, what: &str) {
    let started = Instant::now();
    let recovered = until_decided(store, Duration::from_secs(8)).await;
    assert!(
        recovered.is_ok(),
        "still failing 8 s after {what}: {recovered:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{what}: decided again after {:?}",
        started.elapsed()
    );
}

async fn start(args: &'static [&'static str]) -> RedisServer {
    tokio::task::spawn_blocking(move || RedisServer::start_with_args(args))
        .await
        .unwrap()
}

/// Makes the user `rl` (password `pw`) with exactly `rules`.
fn acl_user(server: &RedisServer, rules: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg("rl")
        .arg("reset")
        .arg("on")
        .arg(">pw");
    for rule in rules {
        cmd.arg(*rule);
    }
    let _: () = cmd.query(&mut server.connection()).unwrap();
}

fn least_privilege(extra: &[&'static str]) -> Vec<&'static str> {
    let mut rules = vec!["~rl:*"];
    rules.extend_from_slice(extra);
    rules.extend_from_slice(&script_commands());
    rules
}

fn user_url(port: u16) -> String {
    format!("redis://rl:pw@127.0.0.1:{port}")
}

async fn store_at(url: &str, timeout: Duration) -> RedisStore {
    RedisStore::builder(url)
        .timeout(timeout)
        .build()
        .await
        .unwrap()
}

/// The guide's list of commands is enough, on Redis's own clock, for every algorithm: its
/// checks, give-backs (by receipt and not), resets, and a lockout started, read and lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_guides_commands_and_keys_decides_every_algorithm() {
    let server = start(&[]).await;
    acl_user(&server, &least_privilege(&["+ping"]));
    let store = store_at(&user_url(server.port()), Duration::from_secs(1)).await;
    let decided = until_decided(&store, Duration::from_secs(3)).await;
    assert!(decided.is_ok(), "{decided:?}");
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::Gcra,
    ] {
        let key = login("203.0.113.9");
        let limits = [Limit::new(3, Window::from_millis(W), algorithm)];
        let mut allowed = 0;
        let mut receipt = None;
        // Past the limit, then a new window or spacing: the commands of every branch.
        for now in [None, None, None, None, Some(T0), Some(T0 + 2 * W)] {
            let decision = store
                .check(CheckRequest {
                    key: &key,
                    limits: &limits,
                    now_millis: now,
                })
                .await
                .unwrap_or_else(|e| panic!("{algorithm:?}: {e}"));
            allowed += usize::from(decision.allowed);
            receipt = decision.receipt.or(receipt);
        }
        assert!(allowed >= 3, "{algorithm:?}: {allowed}");
        // A success given back where it was counted, then from what counts now, then the
        // whole budget reset: every give-back and reset branch.
        let changes = [
            Adjustment::GiveBack {
                units: 1,
                receipt: receipt.as_ref(),
            },
            Adjustment::GiveBack {
                units: 1,
                receipt: None,
            },
            Adjustment::Reset,
        ];
        for change in changes {
            store
                .adjust(AdjustRequest::new(&key, &limits, None, change))
                .await
                .unwrap_or_else(|e| panic!("{algorithm:?}: {change:?}: {e}"));
        }
        // A lockout starts (a refusal of a limit with a block), is read, and is lifted.
        let key = login("203.0.113.10");
        let blocking =
            [Limit::new(1, Window::from_millis(W), algorithm)
                .blocking(Window::from_millis(10 * W))];
        let request = CheckRequest {
            key: &key,
            limits: &blocking,
            now_millis: None,
        };
        for _ in 0..2 {
            store
                .check(request)
                .await
                .unwrap_or_else(|e| panic!("{algorithm:?} with a block: {e}"));
        }
        let locked = store
            .peek(request)
            .await
            .unwrap_or_else(|e| panic!("{algorithm:?}: peek: {e}"));
        assert!(!locked.allowed, "{algorithm:?}: not locked out");
        store
            .adjust(AdjustRequest::new(&key, &blocking, None, Adjustment::Reset))
            .await
            .unwrap_or_else(|e| panic!("{algorithm:?}: reset of a lockout: {e}"));
        let lifted = store.check(request).await.unwrap();
        assert!(
            lifted.allowed,
            "{algorithm:?}: still locked out after a reset"
        );
    }
}

/// A user let run only `EVALSHA`, `EVAL` and `PING` (the commands one might read off "one
/// script per request"): the scripts' own commands are refused by the ACL, every check is a
/// store error of kind `Redis` at once, and the message says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_scripts_commands_gets_a_clear_error_at_once() {
    let server = start(&[]).await;
    acl_user(&server, &["~rl:*", "+evalsha", "+eval", "+ping"]);
    let store = store_at(&user_url(server.port()), Duration::from_secs(1)).await;
    let started = Instant::now();
    let error = check(&store, "203.0.113.7", None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(error.kind(), StoreErrorKind::Redis, "{error}");
    assert!(
        error.to_string().contains("can't run this command"),
        "{error}"
    );
}

/// Keys outside the user's pattern: a store error of kind `Redis` at once, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_pattern_without_the_limiters_keys_is_a_store_error() {
    let server = start(&[]).await;
    let mut rules = vec!["~app:*", "+ping"];
    rules.extend_from_slice(&script_commands());
    acl_user(&server, &rules);
    let store = store_at(&user_url(server.port()), Duration::from_secs(1)).await;
    let started = Instant::now();
    let error = check(&store, "203.0.113.7", None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(error.kind(), StoreErrorKind::Redis, "{error}");
    assert!(error.to_string().contains("permissions"), "{error}");
}

/// A user that may not `SELECT`, with a db number in the URL: every check says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_db_number_the_user_may_not_select_is_a_clear_error() {
    let server = start(&[]).await;
    acl_user(&server, &least_privilege(&["+ping"]));
    let url = format!("{}/2", user_url(server.port()));
    let store = store_at(&url, Duration::from_secs(1)).await;
    let errors = until_decided(&store, Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(errors.iter().any(|e| e.contains("select")), "{errors:?}");
}

/// A least-privilege user without `PING` decides; after the path to Redis goes silent the
/// store's probe takes a new connection within seconds. The probe's `PING` is refused
/// `NOPERM`, which still counts as an answer: else checks would time out until the kernel
/// gave up on the connection, about 15 minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_ping_recovers_from_a_silent_connection() {
    let server = start(&[]).await;
    acl_user(&server, &least_privilege(&[]));
    let proxy = support::Proxy::start(server.port()).await;
    let port = proxy.url().rsplit(':').next().unwrap().parse().unwrap();
    let store = store_at(&user_url(port), Duration::from_millis(200)).await;
    assert!(until_decided(&store, Duration::from_secs(3)).await.is_ok());
    // The store's probes start one second after its last answered check at the earliest.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    proxy.freeze();
    decides_again_soon(&store, "the path went silent").await;
}

/// The same user after a password rotation gone wrong and put right: the failed store
/// decides again within seconds (it failed until a restart: only a probe replaces a
/// connection whose reconnects were refused, and its `PING` was refused too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_ping_recovers_after_its_password_is_restored() {
    let server = start(&[]).await;
    acl_user(&server, &least_privilege(&[]));
    let store = store_at(&user_url(server.port()), Duration::from_millis(500)).await;
    assert!(until_decided(&store, Duration::from_secs(3)).await.is_ok());
    let mut admin = server.connection();
    let set_password = |admin: &mut redis::Connection, password: &str| {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("rl")
            .arg("resetpass")
            .arg(format!(">{password}"))
            .query(admin)
            .unwrap();
    };
    set_password(&mut admin, "other");
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg("rl")
        .query(&mut admin)
        .unwrap();
    let refused = until_decided(&store, Duration::from_secs(3)).await;
    assert!(
        refused.is_err(),
        "decided with a wrong password: {refused:?}"
    );
    set_password(&mut admin, "pw");
    decides_again_soon(&store, "the password was restored").await;
}

/// RESP3 (`?protocol=resp3`), with an ACL user too: decisions, the limit, the `EVAL`
/// fallback after `SCRIPT FLUSH`, a script error kept apart from a decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_decides_falls_back_to_eval_and_reports_script_errors() {
    let server = start(&[]).await;
    acl_user(&server, &least_privilege(&["+ping"]));
    let as_user = format!("{}?protocol=resp3", user_url(server.port()));
    let decided = until_decided(
        &store_at(&as_user, Duration::from_secs(1)).await,
        Duration::from_secs(2),
    )
    .await;
    assert!(decided.is_ok(), "{decided:?}");

    let store = store_at(
        &format!("{}?protocol=resp3", server.url()),
        Duration::from_secs(1),
    )
    .await;
    let mut allowed = 0;
    for _ in 0..8 {
        allowed += usize::from(
            check(&store, "198.51.100.1", Some(T0))
                .await
                .unwrap()
                .allowed,
        );
    }
    assert_eq!(allowed, 5);
    let mut admin = server.connection();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    assert!(
        check(&store, "198.51.100.2", Some(T0))
            .await
            .unwrap()
            .allowed
    );
    let log_key = login("198.51.100.3").limit_key(&limits()[0]);
    let _: () = redis::cmd("SET")
        .arg(&log_key)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let error = check(&store, "198.51.100.3", Some(T0)).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Redis, "{error}");
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
}

/// A silent path under RESP3: the probe's replies parse, the connection is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_a_silent_connection_is_replaced() {
    let server = start(&[]).await;
    let proxy = support::Proxy::start(server.port()).await;
    let store = store_at(
        &format!("{}?protocol=resp3", proxy.url()),
        Duration::from_millis(200),
    )
    .await;
    assert!(until_decided(&store, Duration::from_secs(3)).await.is_ok());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    proxy.freeze();
    decides_again_soon(&store, "the path went silent").await;
}

fn dbsize(server: &RedisServer, db: i64) -> i64 {
    let mut connection = server.connection();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut connection).unwrap();
    redis::cmd("DBSIZE").query(&mut connection).unwrap()
}

/// `redis://host/3`: the keys are written to db 3, not db 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_in_the_db_the_url_names() {
    let server = start(&[]).await;
    let store = store_at(&format!("{}/3", server.url()), Duration::from_secs(1)).await;
    assert!(
        check(&store, "203.0.113.7", Some(T0))
            .await
            .unwrap()
            .allowed
    );
    assert_eq!(dbsize(&server, 0), 0);
    assert_eq!(dbsize(&server, 3), 2, "one key per limit");
}

/// `redis+unix://` and `unix://` with `?pass=…&db=…` decide, and the password is hidden in
/// the store's `Debug` as in a TCP URL's, not shown whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_url_decides_and_hides_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("redis.sock").to_str().unwrap().to_owned();
    let args = [
        "--unixsocket".to_owned(),
        socket.clone(),
        "--requirepass".to_owned(),
        "s3cret".to_owned(),
    ];
    let server = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        RedisServer::start_with_args(&args)
    })
    .await
    .unwrap();
    for scheme in ["redis+unix", "unix"] {
        let url = format!("{scheme}://{socket}?pass=s3cret&db=4");
        let store = store_at(&url, Duration::from_secs(1)).await;
        let decided = check(&store, &format!("198.51.100.{}", scheme.len()), Some(T0)).await;
        assert!(decided.is_ok_and(|d| d.allowed), "{scheme}");
        let debug = format!("{store:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
    }
    let mut connection =
        redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/4", server.port()))
            .unwrap()
            .get_connection()
            .unwrap();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut connection).unwrap();
    assert_eq!(keys, 4, "two clients, two limits each, in db 4");
}

/// A malformed socket URL's error hides its `pass=`.
#[tokio::test]
async fn a_malformed_unix_url_hides_its_password_in_the_error() {
    let error = RedisStore::builder("redis+unix:///run/redis.sock?pass=s3cret&db=x")
        .build()
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains("pass=***"), "{text}");
}

#[test]
fn redact_hides_query_passwords_and_keeps_the_rest() {
    assert_eq!(
        redact("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
        "redis+unix:///run/redis.sock?db=1&pass=***"
    );
    assert_eq!(
        redact("unix:///run/redis.sock?PASSWORD=s3cret&db=2"),
        "unix:///run/redis.sock?PASSWORD=***&db=2"
    );
    assert_eq!(
        redact("redis://cache:6379/2?protocol=resp3"),
        "redis://cache:6379/2?protocol=resp3"
    );
}

/// The builders' `Debug` (logged by `tracing::debug!(?builder)`) printed the raw URL.
#[test]
fn the_builders_debug_hides_the_password() {
    let standalone = format!("{:?}", RedisStore::builder("redis://app:s3cret@cache:6379"));
    assert!(!standalone.contains("s3cret"), "{standalone}");
    assert!(standalone.contains("cache:6379"), "{standalone}");
    let cluster = format!(
        "{:?}",
        RedisClusterStore::builder(vec!["redis://app:s3cret@cache:7000".to_owned()])
    );
    assert!(!cluster.contains("s3cret"), "{cluster}");
    assert!(cluster.contains("cache:7000"), "{cluster}");
}

/// A percent-encoded password (`@`, `/`, `:`, `#`, `?` in it) is decoded, and hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percent_encoded_password_is_decoded_and_hidden() {
    let server = start(&["--requirepass", "p@ss/w:rd#?"]).await;
    let url = format!("redis://:p%40ss%2Fw%3Ard%23%3F@127.0.0.1:{}", server.port());
    let store = store_at(&url, Duration::from_secs(1)).await;
    assert!(
        check(&store, "203.0.113.7", Some(T0))
            .await
            .unwrap()
            .allowed
    );
    let debug = format!("{store:?}");
    assert!(!debug.contains("p%40ss"), "{debug}");
}

/// `rename-command EVAL ""` or `EVALSHA ""` (hardened configs): a clear error at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_away_eval_or_evalsha_is_a_clear_error_at_once() {
    for (args, command) in [
        (&["--rename-command", "EVAL", ""][..], "EVAL"),
        (&["--rename-command", "EVALSHA", ""][..], "EVALSHA"),
    ] {
        let server = tokio::task::spawn_blocking(move || RedisServer::start_with_args(args))
            .await
            .unwrap();
        let store = store_at(&server.url(), Duration::from_secs(1)).await;
        // With EVALSHA gone a check fails on it; with EVAL gone the first check (NOSCRIPT)
        // fails on the fallback.
        let started = Instant::now();
        let error = check(&store, "203.0.113.7", Some(T0)).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(error.kind(), StoreErrorKind::Redis, "{error}");
        assert!(
            error.to_string().contains(&format!("'{command}'"))
                || error
                    .to_string()
                    .to_lowercase()
                    .contains(&format!("'{}'", command.to_lowercase())),
            "{command}: {error}"
        );
    }
}

/// Fills `server` with the app's own data (64 KiB values without a TTL) until it refuses.
fn fill_with_app_data(server: &RedisServer) {
    let mut admin = server.connection();
    let value = "x".repeat(64 * 1024);
    for i in 0..200 {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("app:{i}"))
            .arg(&value)
            .query(&mut admin);
        if set.is_err() {
            break;
        }
    }
}

/// README, Failure modes: an evicting Redis drops the limiter's keys (they have a TTL, the
/// app's data here does not) and a spent budget is whole again. If this starts failing,
/// the README's warning is out of date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_hands_a_spent_budget_back_as_the_readme_warns() {
    let server = start(&["--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl"]).await;
    let store = store_at(&server.url(), Duration::from_secs(1)).await;
    let mut allowed = 0;
    for _ in 0..6 {
        allowed += usize::from(check(&store, "192.0.2.50", Some(T0)).await.unwrap().allowed);
    }
    assert_eq!(allowed, 5);
    fill_with_app_data(&server);
    let after = check(&store, "192.0.2.50", Some(T0 + 1)).await.unwrap();
    assert!(after.allowed, "the spent budget was kept: {after:?}");
}

/// README, Failure modes: under `noeviction` a full Redis refuses the window and GCRA
/// checks (`OOM`, a store error), and lets a sliding-log check run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_noeviction_redis_refuses_all_but_the_sliding_log() {
    let server = start(&["--maxmemory-policy", "noeviction"]).await;
    let store = store_at(&server.url(), Duration::from_secs(1)).await;
    fill_with_app_data(&server);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1mb")
        .query(&mut server.connection())
        .unwrap();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::Gcra,
    ] {
        let key = login("192.0.2.52");
        let limits = [Limit::new(3, Window::from_millis(W), algorithm)];
        let outcome = store
            .check(CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: None,
            })
            .await;
        match algorithm {
            Algorithm::SlidingLog => assert!(outcome.is_ok_and(|d| d.allowed)),
            _ => {
                let error = outcome.unwrap_err();
                assert_eq!(
                    error.kind(),
                    StoreErrorKind::Redis,
                    "{algorithm:?}: {error}"
                );
                assert!(error.to_string().contains("OOM"), "{algorithm:?}: {error}");
            }
        }
    }
}

/// Makes the user `rl` (password `pw`) with the README's rules and `extra` on every node.
fn acl_user_on_every_node(cluster: &RedisCluster, extra: &[&'static str]) {
    for node in cluster.nodes() {
        acl_user(node, &least_privilege(extra));
    }
}

/// The README's Cluster rules (`+cluster|slots +asking` beside the scripts' commands, no
/// `+ping`) decide, and keep deciding a key whose slot is being migrated: every check sends
/// `ASKING` before its script. Without `+asking` checks of a moved key would time out, with
/// no word of the cause, until the slot had moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_cluster_user_decides_through_a_slot_migration() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    acl_user_on_every_node(&cluster, &["+cluster|slots", "+asking"]);
    let urls: Vec<String> = cluster
        .masters()
        .iter()
        .map(|m| user_url(m.port()))
        .collect();
    let store = RedisClusterStore::builder(urls)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let key = login("203.0.113.7");
    let limits = [Limit::new(
        1_000,
        Window::from_millis(W),
        Algorithm::FixedWindow,
    )];
    let check = || async {
        store
            .check(CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: None,
            })
            .await
            .map(|decision| decision.limits[0].remaining)
    };
    let started = Instant::now();
    let first = loop {
        match check().await {
            Ok(remaining) => break remaining,
            Err(error) if started.elapsed() < Duration::from_secs(5) => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the README's user does not decide: {error}"),
        }
    };
    assert_eq!(first, 999);
    let slot = key_slot(&key.limit_key(&limits[0]));
    tokio::task::block_in_place(|| {
        let nodes = cluster.begin_migration(slot);
        cluster.move_keys(slot, nodes);
    });
    assert_eq!(
        check().await.unwrap(),
        998,
        "a moved key, while its slot migrates"
    );
}

/// Seed URLs naming different users or passwords are a configuration error whichever comes
/// first: redis-rs compared them with the first seed's only when the first had some, so a
/// list whose first URL had none built a client that sent no password to any node.
#[tokio::test]
async fn cluster_seeds_with_different_credentials_are_refused_whichever_comes_first() {
    for seeds in [
        ["redis://:s3cret@127.0.0.1:7000", "redis://127.0.0.1:7001"],
        ["redis://127.0.0.1:7001", "redis://:s3cret@127.0.0.1:7000"],
        [
            "redis://127.0.0.1:7001",
            "redis://app:s3cret@127.0.0.1:7000",
        ],
    ] {
        let built = RedisClusterStore::builder(seeds).build().await;
        let error = built.err().unwrap_or_else(|| panic!("{seeds:?} built"));
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }
    // No user and `default` are one user.
    let same = RedisClusterStore::builder([
        "redis://:s3cret@127.0.0.1:7000",
        "redis://default:s3cret@127.0.0.1:7001",
    ])
    .build()
    .await;
    assert!(same.is_ok(), "{:?}", same.err());
}

/// A timeout of 0 (a configuration value of "0") is refused when the store is built, on
/// either builder, instead of failing checks at random at run time.
#[tokio::test]
async fn a_zero_timeout_is_a_configuration_error() {
    let url = "redis://127.0.0.1:7000";
    for (name, built) in [
        (
            "timeout",
            RedisStore::builder(url)
                .timeout(Duration::ZERO)
                .build()
                .await
                .err(),
        ),
        (
            "connect_timeout",
            RedisStore::builder(url)
                .connect_timeout(Duration::ZERO)
                .build()
                .await
                .err(),
        ),
    ] {
        let error = built.unwrap_or_else(|| panic!("{name} of 0 built a store"));
        // The setting as written, builder included.
        let setting = format!("`RedisStore::builder(..).{name}(0ns)`");
        assert!(error.to_string().contains(&setting), "{error}");
    }
    let cluster = RedisClusterStore::builder([url])
        .timeout(Duration::ZERO)
        .build()
        .await;
    let Err(error) = cluster else {
        panic!("a cluster store with a timeout of 0 built");
    };
    assert!(
        error
            .to_string()
            .contains("`RedisClusterStore::builder(..).timeout(0ns)`"),
        "{error}"
    );
    let under_a_millisecond = RedisStore::builder(url)
        .timeout(Duration::from_micros(500))
        .build()
        .await;
    assert!(
        under_a_millisecond.is_err(),
        "a timeout of 500 µs built a store"
    );
    let one = RedisStore::builder(url)
        .timeout(Duration::from_millis(1))
        .build()
        .await;
    assert!(one.is_ok(), "{:?}", one.err());
}

/// `redis://user@host` (a `nopass` ACL user): redis-rs sends no `AUTH` without a password,
/// so the connection would run as `default` instead of as the user named; it is a
/// configuration error, on either builder, and a password (any, for `nopass`) works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_name_without_a_password_is_refused_and_with_one_is_used() {
    let server = start(&[]).await;
    let port = server.port();
    let standalone = RedisStore::builder(format!("redis://rl@127.0.0.1:{port}"))
        .build()
        .await;
    let error = standalone.expect_err("a user without a password built a store");
    assert!(error.to_string().contains("without a password"), "{error}");
    let cluster = RedisClusterStore::builder([format!("redis://rl@127.0.0.1:{port}")])
        .build()
        .await;
    assert!(
        cluster.is_err(),
        "a cluster store with a user without a password built"
    );

    let mut rules = vec!["nopass"];
    rules.extend(least_privilege(&["+ping"]));
    acl_user(&server, &rules);
    let store = store_at(
        &format!("redis://rl:anything@127.0.0.1:{port}"),
        Duration::from_secs(1),
    )
    .await;
    assert!(
        check(&store, "203.0.113.7", Some(T0))
            .await
            .unwrap()
            .allowed
    );
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    assert!(
        clients.lines().any(|line| line.contains(" user=rl ")),
        "the store's connection runs as another user: {clients}"
    );
}
