//! The demo and `ratelimit-admin` as an operator and an attacker meet them: an allow-listed
//! API key is limited and locked out on the sign-in route like any client unless its entry
//! names the route; keys are written and shown as fingerprints; an override that would drop
//! the declared stack's lockout is refused unless asked for; wide ranges are refused; and
//! under the guide's ACL the services' own Redis user cannot write the overrides hash while
//! its checks are decided and its overrides read.

mod support;

use std::time::{Duration, Instant};

use support::{run_admin, DemoProcess, RedisServer};

const SECRET: &str = "a-key-secret-of-this-test";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits (up to 10 s) until the services on `env`'s Redis have published their routes, for
/// the command to check names against.
async fn until_published(env: &[(&str, &str)]) {
    let started = Instant::now();
    while !text(&run_admin(env, &["routes"], "").stdout).contains("POST /login") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "routes not published"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The statuses of `n` wrong sign-ins as `username` with the monitoring key.
async fn wrong_sign_ins(demo: &DemoProcess, username: &str, n: usize) -> Vec<u16> {
    let body = format!(r#"{{"username":"{username}","password":"wrong"}}"#);
    let mut seen = Vec::new();
    for _ in 0..n {
        let key = ("x-api-key", "monitoring-key");
        seen.push(demo.send("POST", "/login", &[key], Some(&body)).await);
    }
    seen
}

#[actix_web::test]
async fn an_allow_listed_api_key_is_limited_and_locked_out_on_the_demo_s_sign_in_route() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [
        ("REDIS_URL", url.as_str()),
        ("RATELIMIT_KEY_SECRET", SECRET),
    ];
    let demo = DemoProcess::start(&[
        ("REDIS_URL", url.as_str()),
        ("RATELIMIT_KEY_SECRET", SECRET),
        ("DEMO_API_KEYS", "key_abc,monitoring-key"),
    ])
    .await;
    until_published(&env).await;
    // Written from standard input, as its fingerprint under the services' secret.
    let added = run_admin(
        &env,
        &["allow", "add", "api_key", "-", "--note", "monitoring"],
        "monitoring-key\n",
    );
    let out = text(&added.stdout);
    assert!(added.status.success(), "{}{out}", text(&added.stderr));
    assert!(out.starts_with("allow api_key fp:"), "{out}");
    assert!(
        out.contains("opens: every limited route but POST /login, POST /password-reset"),
        "{out}"
    );
    let listed = text(&run_admin(&env, &["allow", "list"], "").stdout);
    assert!(
        listed.contains("api_key fp:") && listed.contains("# monitoring"),
        "{listed}"
    );
    assert!(!listed.contains("monitoring-key"), "{listed}");
    let fields: Vec<String> =
        redis::Commands::hkeys(&mut redis.connection(), "rl:overrides").unwrap();
    assert!(
        fields.iter().all(|f| !f.contains("monitoring-key")),
        "{fields:?}"
    );

    // In force: a request with the key is counted as allowed.
    let key = ("x-api-key", "monitoring-key");
    let started = Instant::now();
    loop {
        assert_eq!(
            demo.send("POST", "/reports/export", &[key], None).await,
            202
        );
        let metrics = demo.metrics().await;
        if metrics.contains(r#"list="allow""#) && metrics.contains(r#"kind="api_key""#) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the allow entry not in force"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }

    // The sign-in route: 10 wrong passwords a name, then the name is locked out.
    let seen = wrong_sign_ins(&demo, "alice", 12).await;
    assert_eq!(&seen[..10], [401; 10], "{seen:?}");
    assert_eq!(&seen[10..], [429; 2], "{seen:?}");
    let right = r#"{"username":"alice","password":"demo"}"#;
    assert_eq!(demo.send("POST", "/login", &[key], Some(right)).await, 429);

    // Named on the entry, the sign-in route is opened too (the entry rewritten in place).
    let scoped = run_admin(
        &env,
        &["allow", "add", "api_key", "-", "--routes", "POST /login"],
        "monitoring-key\n",
    );
    let out = text(&scoped.stdout);
    assert!(scoped.status.success(), "{}{out}", text(&scoped.stderr));
    assert!(out.contains("(replacing `allow api_key fp:"), "{out}");
    assert!(out.contains("opens: POST /login"), "{out}");
    let started = Instant::now();
    loop {
        let seen = wrong_sign_ins(&demo, "bob", 12).await;
        if seen == [401; 12] {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{seen:?}");
    }
}

#[actix_web::test]
async fn the_command_refuses_what_would_quietly_open_a_door() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let _demo = DemoProcess::start(&env).await;
    until_published(&env).await;
    let set = |extra: &[&str]| {
        let mut args = vec![
            "override",
            "set",
            "POST /login",
            r#"limit = 5, window = "5m""#,
        ];
        args.extend_from_slice(extra);
        run_admin(&env, &args, "")
    };
    let refused = set(&[]);
    let err = text(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    for named in [
        "drops 1 of its 2 limits",
        r#"`count = "failures"`"#,
        "its `block`",
        "--replace-stack",
    ] {
        assert!(err.contains(named), "{named}: {err}");
    }
    let fields: Vec<String> =
        redis::Commands::hkeys(&mut redis.connection(), "rl:overrides").unwrap();
    assert!(fields.is_empty(), "nothing written: {fields:?}");
    let replaced = set(&["--replace-stack"]);
    let err = text(&replaced.stderr);
    assert!(replaced.status.success(), "{err}");
    assert!(err.contains("drops 1 of its 2 limits"), "{err}");
    // The override counts by address only: the command says what that opens, by the policy
    // in force rather than the declared one.
    assert!(
        err.contains("allow entries without `routes` open it"),
        "{err}"
    );
    let ops = run_admin(&env, &["allow", "add", "user_id", "ops"], "");
    let out = text(&ops.stdout);
    assert!(
        out.contains("opens: every limited route but POST /password-reset,"),
        "{out}"
    );

    // An entry written in plain text before fingerprints is removed by its key.
    let _: () = redis::Commands::hset(
        &mut redis.connection(),
        "rl:overrides",
        "allow api_key old-key",
        "",
    )
    .unwrap();
    let removed = run_admin(&env, &["allow", "remove", "api_key", "-"], "old-key\n");
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    let _: u64 =
        redis::Commands::incr(&mut redis.connection(), "{rl:overrides}:version", 1).unwrap();

    let wide = run_admin(&env, &["deny", "add", "ip", "0.0.0.0/0"], "");
    assert!(!wide.status.success());
    assert!(
        text(&wide.stderr).contains("wider than the widest IPv4 range"),
        "{}",
        text(&wide.stderr)
    );
    let v6 = run_admin(&env, &["deny", "add", "ip", "2001:db8::7"], "");
    assert!(v6.status.success(), "{}", text(&v6.stderr));
    assert!(
        text(&v6.stdout).contains("covers: every client of 2001:db8::/64"),
        "{}",
        text(&v6.stdout)
    );
    let on_deny = run_admin(
        &env,
        &["deny", "add", "user_id", "x", "--routes", "POST /login"],
        "",
    );
    assert!(text(&on_deny.stderr).contains("a deny entry applies on every route"));
    let unknown = run_admin(
        &env,
        &["allow", "add", "user_id", "ops", "--routes", "POST /logn"],
        "",
    );
    assert!(
        text(&unknown.stderr).contains("did you mean `POST /login`?"),
        "{}",
        text(&unknown.stderr)
    );
    // Every write counted in the version the services watch.
    let version: u64 =
        redis::Commands::get(&mut redis.connection(), "{rl:overrides}:version").unwrap();
    assert_eq!(
        version, 5,
        "the override, the allow entry, the removal, the deny entry, and one bump by hand"
    );
}

/// The guide's recipe (`guide::tls`, "The ACL user"), read from the guide itself so that
/// the two cannot differ.
const TLS_GUIDE: &str = include_str!("../ratelimit-runtime/src/guide/tls.md");

/// The rules of the guide's `ACL SETUSER <user> … resetkeys …` line, its password replaced
/// by `password`.
fn guide_acl(user: &str, password: &str) -> Vec<String> {
    let line = TLS_GUIDE
        .lines()
        .find(|line| {
            line.starts_with(&format!("ACL SETUSER {user} ")) && line.contains("resetkeys")
        })
        .unwrap_or_else(|| panic!("guide::tls has an `ACL SETUSER {user}` line with `resetkeys`"));
    line.split_whitespace()
        .skip(3)
        .map(|rule| {
            if rule.starts_with('>') {
                format!(">{password}")
            } else {
                rule.to_owned()
            }
        })
        .collect()
}

#[actix_web::test]
async fn under_the_guide_s_acl_the_services_cannot_write_their_own_rules() {
    let redis = RedisServer::start();
    let mut admin_conn = redis.connection();
    for (user, password) in [
        ("ratelimit", "services-pw"),
        ("ratelimit-admin", "admin-pw"),
    ] {
        let mut command = redis::cmd("ACL");
        command.arg("SETUSER").arg(user);
        for rule in guide_acl(user, password) {
            command.arg(rule);
        }
        let _: () = command.query(&mut admin_conn).unwrap();
    }
    let services = format!("redis://ratelimit:services-pw@127.0.0.1:{}", redis.port());
    let admin = format!(
        "redis://ratelimit-admin:admin-pw@127.0.0.1:{}",
        redis.port()
    );
    let demo = DemoProcess::start(&[("REDIS_URL", services.as_str())]).await;

    // The services' user writes no rule: every way of changing the hash is refused.
    let client = redis::Client::open(services.as_str()).unwrap();
    let mut as_services = client.get_connection().unwrap();
    for command in [
        redis::cmd("HSET")
            .arg("rl:overrides")
            .arg("deny ip 0.0.0.0/0")
            .arg("x")
            .clone(),
        redis::cmd("HDEL")
            .arg("rl:overrides")
            .arg("deny user_id mallory")
            .clone(),
        redis::cmd("DEL").arg("rl:overrides").clone(),
        redis::cmd("INCR").arg("{rl:overrides}:version").clone(),
    ] {
        let error = command.query::<()>(&mut as_services).unwrap_err();
        assert!(
            error.to_string().to_lowercase().contains("noperm"),
            "{error}"
        );
    }

    // Its checks are decided in Redis (a route that fails closed answers 503 otherwise).
    let body = r#"{"username":"carol","password":"wrong"}"#;
    let mut seen = Vec::new();
    for _ in 0..11 {
        seen.push(demo.send("POST", "/login", &[], Some(body)).await);
    }
    assert_eq!(&seen[..10], [401; 10], "{seen:?}");
    assert_eq!(seen[10], 429, "{seen:?}");

    // The admin's user writes; the services read it (and published their routes, which the
    // command checks names against).
    let env = [("REDIS_URL", admin.as_str())];
    until_published(&env).await;
    let denied = run_admin(&env, &["deny", "add", "user_id", "mallory"], "");
    assert!(denied.status.success(), "{}", text(&denied.stderr));
    let mallory = ("authorization", "Bearer mallory");
    let started = Instant::now();
    while demo.send("GET", "/orders/1", &[mallory], None).await != 403 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the deny entry not read"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}
