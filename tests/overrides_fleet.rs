//! Four demo processes and one Redis, driven by the `ratelimit-admin` command as the people
//! on call would: an override changes every process's decisions within 2 s and clearing it
//! restores the declared policy within 2 s; invalid overrides are refused by the command
//! before anything is written, and by the services when written by hand; a deny entry and
//! a reset reach every process; every subcommand has `--help`.

mod support;

use std::{
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use redis::Commands as _;
use support::{
    admin_command, example, free_port, LoneSentinel, Proxy, RedisServer, SentinelSetup, MASTER_NAME,
};

/// A demo process, killed on drop.
struct Demo {
    child: Child,
    base: String,
    client: awc::Client,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Demo {
    async fn start(redis_url: &str) -> Demo {
        Demo::start_with(&[("REDIS_URL", redis_url.to_owned())]).await
    }

    /// A demo with `redis`, its Redis settings (every other one unset).
    async fn start_with(redis: &[(&str, String)]) -> Demo {
        let port = free_port();
        let mut command = Command::new(example("demo"));
        for var in REDIS_VARS {
            command.env_remove(var);
        }
        let child = command
            .envs(redis.iter().map(|(k, v)| (k, v)))
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the demo");
        let demo = Demo {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: awc::Client::builder()
                .timeout(Duration::from_secs(5))
                .finish(),
        };
        let started = Instant::now();
        while demo.status("/health", None).await != Some(200) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the demo did not come up"
            );
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
        demo
    }

    /// A sign-in as `username` with `password`, from the loopback address.
    async fn login(&self, username: &str, password: &str) -> Option<u16> {
        self.client
            .post(format!("{}/login", self.base))
            .send_json(&serde_json::json!({ "username": username, "password": password }))
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    async fn status(&self, path: &str, user: Option<&str>) -> Option<u16> {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(user) = user {
            request = request.insert_header(("authorization", format!("Bearer {user}")));
        }
        request.send().await.ok().map(|r| r.status().as_u16())
    }

    /// The statuses of 4 orders looked up by a user never seen before.
    async fn fresh_user(&self, n: &mut u32) -> Vec<u16> {
        *n += 1;
        let user = format!("fresh-{n}");
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(self.status("/orders/1", Some(&user)).await.unwrap_or(0));
        }
        seen
    }
}

/// The settings that name the demo's and the command's Redis.
const REDIS_VARS: [&str; 5] = [
    "REDIS_URL",
    "REDIS_CLUSTER_NODES",
    "REDIS_SENTINEL_NODES",
    "REDIS_SENTINEL_MASTER",
    "REDIS_SENTINEL_MASTER_PASSWORD",
];

fn admin(redis: &RedisServer, args: &[&str]) -> Output {
    admin_with(&[("REDIS_URL", redis.url())], args)
}

/// The command with `redis`, its Redis settings (every other one unset).
fn admin_with(redis: &[(&str, String)], args: &[&str]) -> Output {
    let mut command = Command::new(admin_command());
    for var in REDIS_VARS {
        command.env_remove(var);
    }
    command
        .env_remove("RATELIMIT_KEY_SECRET")
        .env_remove("RATELIMIT_OVERRIDES_FILE")
        .envs(redis.iter().map(|(k, v)| (k, v)))
        .args(args)
        .output()
        .expect("run ratelimit-admin")
}

/// Waits (5 s at most) until the services on `redis` (its settings) have published their
/// routes, for the command to check names and find declared policies.
fn until_published(redis: &[(&str, String)]) {
    let started = Instant::now();
    loop {
        let routes = admin_with(redis, &["routes"]);
        if text(&routes.stdout).contains("GET /orders/{id}") {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "routes not published: {}",
            text(&routes.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `ratelimit-admin override set route declarations --replace-stack`, which must succeed.
fn set_override(redis: &RedisServer, route: &str, decl: &str) {
    let out = admin(redis, &["override", "set", route, decl, "--replace-stack"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits until every demo answers a fresh user's 4 lookups with `want`: how long each took.
async fn until_every(demos: &[Demo], want: &[u16], what: &str) -> Vec<Duration> {
    let started = Instant::now();
    let mut took = vec![None; demos.len()];
    let mut n = 0;
    while took.iter().any(Option::is_none) {
        for (i, demo) in demos.iter().enumerate() {
            if took[i].is_none() && demo.fresh_user(&mut n).await == want {
                took[i] = Some(started.elapsed());
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{what}: not on every process within 2 s: {took:?}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    took.into_iter().flatten().collect()
}

#[actix_web::test]
async fn the_admin_command_changes_every_process_within_two_seconds() {
    let redis = RedisServer::start();
    let mut demos = Vec::new();
    for _ in 0..4 {
        demos.push(Demo::start(&redis.url()).await);
    }
    // The services publish their routes at startup, for the command to check names.
    until_published(&[("REDIS_URL", redis.url())]);

    // Refused by the command, with the attribute's messages, before anything is written.
    for (route, declarations, message) in [
        (
            "POST /login",
            r#"limt = 5, window = "5m""#,
            "did you mean `limit`?",
        ),
        (
            "POST /logn",
            r#"limit = 5, window = "5m""#,
            "did you mean `POST /login`?",
        ),
        ("POST /login", r#"limit = 5, window = "40d""#, "31 days"),
        (
            "POST /login",
            r#"limit = 5000, window = "1m", algorithm = "sliding_log""#,
            "1000",
        ),
    ] {
        let out = admin(&redis, &["override", "set", route, declarations]);
        assert!(!out.status.success(), "{declarations}: accepted");
        assert!(
            text(&out.stderr).contains(message),
            "{declarations}: {}",
            text(&out.stderr)
        );
    }
    let written: Vec<String> = redis.connection().hkeys("rl:overrides").unwrap();
    assert!(written.is_empty(), "{written:?}");

    // The declared policy first: 4 lookups of a fresh user pass.
    until_every(&demos, &[200; 4], "the declared policy").await;
    set_override(&redis, "GET /orders/{id}", r#"limit = 3, window = "1h""#);
    let took = until_every(&demos, &[200, 200, 200, 429], "the override").await;
    eprintln!("override in force on each process after {took:?}");

    // Written by hand and invalid: the services refuse the whole hash, the override stays.
    let _: () = redis
        .connection()
        .hset("rl:overrides", "POST /login", r#"limit = 5, windw = "5m""#)
        .unwrap();
    actix_web::rt::time::sleep(Duration::from_millis(1500)).await;
    until_every(
        &demos,
        &[200, 200, 200, 429],
        "the override, beside a bad field",
    )
    .await;
    let _: () = redis
        .connection()
        .hdel("rl:overrides", "POST /login")
        .unwrap();

    // State and reset of one client, from the command; a reset reaches every process (each
    // forgets a refusal within a second).
    let user = "reset-me";
    let state = |redis: &RedisServer| {
        let out = admin(redis, &["state", "GET /orders/{id}", "--user-id", user]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(demos[0].status("/orders/1", Some(user)).await, Some(200));
    for _ in 0..2 {
        let once = state(&redis);
        assert!(
            once.contains("count 1, remaining 2"),
            "peeking counts nothing: {once}"
        );
    }
    for _ in 0..2 {
        assert_eq!(demos[1].status("/orders/1", Some(user)).await, Some(200));
    }
    for demo in &demos {
        assert_eq!(demo.status("/orders/1", Some(user)).await, Some(429));
    }
    let spent = state(&redis);
    assert!(
        spent.contains("count 3, remaining 0") && spent.contains("refused for"),
        "{spent}"
    );
    let out = admin(&redis, &["reset", "GET /orders/{id}", "--user-id", user]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let whole = state(&redis);
    assert!(whole.contains("count 0, remaining 3"), "{whole}");
    actix_web::rt::time::sleep(Duration::from_millis(1100)).await;
    for (i, demo) in demos.iter().enumerate() {
        let status = demo.status("/orders/1", Some(user)).await;
        if i < 3 {
            assert_eq!(status, Some(200), "process {i} after the reset");
        } else {
            assert_eq!(status, Some(429), "the budget of 3 spent again");
        }
    }

    // A deny entry: 403 on every process; removed, served again.
    let out = admin(
        &redis,
        &["deny", "add", "user_id", "mallory", "--note", "incident 42"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let started = Instant::now();
    for demo in &demos {
        while demo.status("/orders/1", Some("mallory")).await != Some(403) {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "deny entry not in force"
            );
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let listed = admin(&redis, &["deny", "list"]);
    assert_eq!(
        text(&listed.stdout).trim(),
        "user_id mallory  # incident 42"
    );
    assert!(admin(&redis, &["deny", "remove", "user_id", "mallory"])
        .status
        .success());

    // Cleared: the declared policy again, within 2 s.
    let out = admin(&redis, &["override", "clear", "GET /orders/{id}"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let took = until_every(&demos, &[200; 4], "the declared policy again").await;
    eprintln!("declared policy back on each process after {took:?}");
    let out = admin(&redis, &["override", "clear", "GET /orders/{id}"]);
    assert!(!out.status.success(), "clearing twice");
}

/// `state` and `reset` given the services' overrides file apply its override (a window of
/// its own, so keys of its own) as the services do; without it they read the declared
/// policy's keys and find the client whole. `routes` lists the file's override, and a file
/// the services would refuse is an error.
#[actix_web::test]
async fn state_and_reset_read_the_services_overrides_file() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("overrides.toml");
    std::fs::write(
        &file,
        "[routes]\n\"GET /orders/{id}\" = 'limit = 3, window = \"1h\"'\n",
    )
    .unwrap();
    let file = file.to_str().unwrap().to_owned();
    let demo = Demo::start_with(&[
        ("REDIS_URL", redis.url()),
        ("RATELIMIT_OVERRIDES_FILE", file.clone()),
    ])
    .await;
    until_every(
        std::slice::from_ref(&demo),
        &[200, 200, 200, 429],
        "the file's override",
    )
    .await;
    // The service publishes its routes, for the command to find the declared policy.
    until_published(&[("REDIS_URL", redis.url())]);
    let user = "counted-under-the-file";
    for want in [200, 200, 200, 429] {
        assert_eq!(demo.status("/orders/1", Some(user)).await, Some(want));
    }
    let state = ["state", "GET /orders/{id}", "--user-id", user];
    let out = admin(&redis, &state);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("count 3") && text(&out.stderr).contains("--overrides-file"),
        "without the file, the declared policy's keys: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let with_file = [state.as_slice(), &["--overrides-file", &file]].concat();
    let out = admin(&redis, &with_file);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let spent = text(&out.stdout);
    assert!(
        spent.contains("count 3, remaining 0") && spent.contains("refused for"),
        "{spent}"
    );
    let out = admin(&redis, &["routes", "--overrides-file", &file]);
    assert!(
        text(&out.stdout).contains(r#"override (file): limit = 3, window = "1h""#),
        "{}",
        text(&out.stdout)
    );

    // From the environment, as the services read it.
    let env = [
        ("REDIS_URL", redis.url()),
        ("RATELIMIT_OVERRIDES_FILE", file.clone()),
    ];
    let out = admin_with(&env, &["reset", "GET /orders/{id}", "--user-id", user]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("reset "),
        "{}",
        text(&out.stdout)
    );
    let started = Instant::now();
    while demo.status("/orders/1", Some(user)).await != Some(200) {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the reset did not reach the service"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }

    // A file the services refuse as a whole: the command cannot know what they keep.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[routes]\n\"GET /orders/{id}\" = 'limt = 3'\n").unwrap();
    let bad = bad.to_str().unwrap();
    let out = admin(
        &redis,
        &[state.as_slice(), &["--overrides-file", bad]].concat(),
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("refuse the overrides file")
            && text(&out.stderr).contains("did you mean `limit`?"),
        "{}",
        text(&out.stderr)
    );
    // A missing one holds none, as for the services.
    let missing = dir.path().join("missing.toml");
    let out = admin(
        &redis,
        &[
            state.as_slice(),
            &["--overrides-file", missing.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn every_subcommand_has_help() {
    let redis_free = [
        vec![],
        vec!["routes"],
        vec!["override"],
        vec!["override", "list"],
        vec!["override", "set"],
        vec!["override", "clear"],
        vec!["allow"],
        vec!["allow", "list"],
        vec!["allow", "add"],
        vec!["allow", "remove"],
        vec!["deny"],
        vec!["deny", "list"],
        vec!["deny", "add"],
        vec!["deny", "remove"],
        vec!["check"],
        vec!["state"],
        vec!["reset"],
        vec!["fingerprint"],
    ];
    for args in redis_free {
        let out = Command::new(admin_command())
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        let help = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(help.contains("Usage: ratelimit-admin"), "{args:?}: {help}");
    }
}

/// What the on-call command refuses or warns about, and a sign-in reset that lifts the
/// name's lockout: a route declared exempt takes no override; a field the services cannot
/// read (written by hand) makes them refuse the whole hash, so no write is taken until it
/// is fixed, and listings warn; `reset` with an address and a name clears both budgets.
#[actix_web::test]
async fn the_command_keeps_the_hash_one_the_services_take() {
    let redis = RedisServer::start();
    let demo = Demo::start(&redis.url()).await;
    let started = Instant::now();
    while !text(&admin(&redis, &["routes"]).stdout).contains("GET /health") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "routes not published"
        );
        demo.status("/health", None).await;
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = admin(
        &redis,
        &[
            "override",
            "set",
            "GET /health",
            r#"limit = 1, window = "1m""#,
        ],
    );
    assert!(
        !out.status.success(),
        "an override of an exempt route was taken"
    );
    assert!(
        text(&out.stderr).contains("declared exempt"),
        "{}",
        text(&out.stderr)
    );

    // A route an earlier deploy published, and no running service since: gone, not taken.
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600;
    let _: () = redis
        .connection()
        .hset(
            "rl:overrides:routes",
            "GET /v1/orders",
            r#"limit = 100, window = "1m""#,
        )
        .unwrap();
    let _: () = redis
        .connection()
        .hset("rl:overrides:routes:seen", "GET /v1/orders", hour_ago)
        .unwrap();
    let out = admin(
        &redis,
        &[
            "override",
            "set",
            "GET /v1/orders",
            r#"limit = 5, window = "1m""#,
        ],
    );
    let said = text(&out.stderr);
    assert!(
        !out.status.success(),
        "an override of a gone route was taken"
    );
    assert!(
        said.contains("60 minutes ago") && said.contains("no running service"),
        "{said}"
    );
    // A route published with no time, by a service of a version that writes none, is
    // taken as declared.
    let _: () = redis
        .connection()
        .hset(
            "rl:overrides:routes",
            "GET /v0/legacy",
            r#"limit = 1, window = "1m""#,
        )
        .unwrap();
    let listed = text(&admin(&redis, &["routes"]).stdout);
    assert!(
        listed.contains("GET /v1/orders\n  gone: last published 60 minutes ago")
            && listed.contains("GET /orders/{id}\n  declared")
            && listed.contains("GET /v0/legacy\n  declared"),
        "{listed}"
    );
    let _: () = redis
        .connection()
        .hdel("rl:overrides:routes", "GET /v0/legacy")
        .unwrap();

    // A hash no service reads (another key, another database) takes no entry.
    for (var, value) in [
        ("RATELIMIT_OVERRIDES_KEY", "myapp:overrides".to_owned()),
        ("REDIS_URL", format!("{}/3", redis.url())),
    ] {
        let out = admin_with(
            &[("REDIS_URL", redis.url()), (var, value)],
            &["deny", "add", "ip", "127.0.0.1"],
        );
        let said = text(&out.stderr);
        assert!(
            !out.status.success() && said.contains("no service reads"),
            "{said}"
        );
    }

    set_override(&redis, "POST /orders", r#"limit = 1, window = "1m""#);
    let _: () = redis
        .connection()
        .hset("rl:overrides", "POST /login", "limt = 3")
        .unwrap();
    let out = admin(&redis, &["deny", "add", "user_id", "evil"]);
    assert!(
        !out.status.success(),
        "a write beside a refused field was taken"
    );
    let said = text(&out.stderr);
    assert!(
        said.contains("not written") && said.contains("limt"),
        "{said}"
    );
    let out = admin(&redis, &["override", "list"]);
    assert!(
        text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
    // Cleared while the hash is refused: the services keep what they took, this override
    // included, so the command does not say the declared policy is back.
    let out = admin(&redis, &["override", "clear", "POST /orders"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "cleared `POST /orders` from the hash"
    );
    assert!(
        text(&out.stderr).contains("they keep the rules they last took from it"),
        "{}",
        text(&out.stderr)
    );
    let _: () = redis
        .connection()
        .hdel("rl:overrides", "POST /login")
        .unwrap();
    assert!(admin(&redis, &["deny", "add", "user_id", "evil"])
        .status
        .success());
    // Adding an entry again says it was listed, and what its note was.
    let again = admin(
        &redis,
        &["deny", "add", "user_id", "evil", "--note", "abuse"],
    );
    assert_eq!(
        text(&again.stdout).trim(),
        "deny user_id evil (already listed; its note was empty)"
    );
    // A budget nothing counted in is whole, with no time to wait.
    let out = admin(
        &redis,
        &[
            "state",
            "POST /login",
            "--ip",
            "203.0.113.9",
            "--username",
            "bob",
        ],
    );
    let state = text(&out.stdout);
    assert!(
        out.status.success() && state.lines().count() >= 2,
        "{state}{}",
        text(&out.stderr)
    );
    assert!(
        state.lines().all(|line| line.ends_with(", whole")),
        "{state}"
    );
    // A budget that is whole may be one read under other keys than the services count in:
    // the command says so, and a reset that cleared nothing says that too.
    assert!(
        text(&out.stderr).contains("RATELIMIT_KEY_PREFIX"),
        "{}",
        text(&out.stderr)
    );
    let out = admin(
        &redis,
        &["reset", "POST /login", "--username", "nobody-ever"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("nothing to reset"),
        "{}",
        text(&out.stdout)
    );

    // 10 failures lock the name out; the 11th attempt is refused, the right password too.
    for _ in 0..10 {
        assert_eq!(demo.login("alice", "wrong").await, Some(401));
    }
    assert_eq!(demo.login("alice", "demo").await, Some(429));
    let out = admin(
        &redis,
        &[
            "reset",
            "POST /login",
            "--ip",
            "127.0.0.1",
            "--username",
            "alice",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "reset `POST /login` for the client given"
    );
    actix_web::rt::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(demo.login("alice", "demo").await, Some(200));
}

/// The command works on one deployment: two in the environment, or two on the command line,
/// are refused before anything is read or written; `--help` shows no environment value (a
/// URL may hold a password).
#[test]
fn the_command_takes_one_deployment() {
    let refused = |redis: &[(&str, String)], args: &[&str], message: &str| {
        let out = admin_with(redis, args);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(text(&out.stderr).contains(message), "{}", text(&out.stderr));
    };
    refused(
        &[
            ("REDIS_URL", "redis://127.0.0.1:1".to_owned()),
            ("REDIS_CLUSTER_NODES", "redis://127.0.0.1:2".to_owned()),
        ],
        &["routes"],
        "REDIS_URL and REDIS_CLUSTER_NODES name two Redis deployments",
    );
    refused(
        &[],
        &[
            "routes",
            "--redis",
            "redis://127.0.0.1:1",
            "--sentinel",
            "redis://127.0.0.1:2",
        ],
        "--redis and --sentinel name two Redis deployments",
    );
    let secret = [
        ("REDIS_URL", "redis://:url-secret@127.0.0.1:1".to_owned()),
        (
            "REDIS_SENTINEL_NODES",
            "redis://:sentinel-secret@127.0.0.1:2".to_owned(),
        ),
        (
            "REDIS_SENTINEL_MASTER_PASSWORD",
            "primary-secret".to_owned(),
        ),
    ];
    // Nothing names a deployment: the command says which Redis it uses.
    let out = admin_with(&[], &["routes"]);
    assert!(
        text(&out.stderr).contains("using redis://127.0.0.1:6379"),
        "{}",
        text(&out.stderr)
    );
    let help = text(&admin_with(&secret, &["--help"]).stdout);
    assert!(help.contains("REDIS_SENTINEL_NODES"), "{help}");
    assert!(!help.contains("secret"), "{help}");
}

/// With Redis Sentinel (passwords on the sentinels and the primary), the demo reads overrides
/// from the primary the sentinels name and the command writes them there, before and after a
/// failover: an override set through the
/// sentinels is in force within 2 s, and one set after the primary died lands in the
/// promoted replica and is in force within 2 s of being written.
#[actix_web::test]
async fn overrides_follow_the_sentinels_primary_through_a_failover() {
    let mut setup = SentinelSetup::start_with_passwords("sentinel-secret", "primary-secret");
    let redis = [
        ("REDIS_SENTINEL_NODES", setup.sentinel_urls().join(",")),
        ("REDIS_SENTINEL_MASTER", MASTER_NAME.to_owned()),
        (
            "REDIS_SENTINEL_MASTER_PASSWORD",
            "primary-secret".to_owned(),
        ),
    ];
    // The override as a server holds it.
    let field = |server: &RedisServer| -> Option<String> {
        let url = format!("redis://:primary-secret@127.0.0.1:{}", server.port());
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        conn.hget("rl:overrides", "GET /orders/{id}").unwrap()
    };
    let demo = Demo::start_with(&redis).await;
    let set = |limit: u32| {
        let out = admin_with(
            &redis,
            &[
                "override",
                "set",
                "GET /orders/{id}",
                &format!(r#"limit = {limit}, window = "1h""#),
                "--replace-stack",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    // The services publish their routes to the primary, for the command to check names.
    until_published(&redis);
    set(3);
    let written = field(setup.primary());
    assert_eq!(written.as_deref(), Some(r#"limit = 3, window = "1h""#));
    until_every(
        std::slice::from_ref(&demo),
        &[200, 200, 200, 429],
        "the override",
    )
    .await;

    let replica_port = setup.replica().port();
    setup.kill_primary();
    let killed = Instant::now();
    while setup.named_primary_port() != Some(replica_port) {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the sentinels never promoted the replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    set(2);
    assert_eq!(
        field(setup.replica()).as_deref(),
        Some(r#"limit = 2, window = "1h""#),
        "written to the promoted replica"
    );
    let took = until_every(
        std::slice::from_ref(&demo),
        &[200, 200, 429, 429],
        "the override after the failover",
    )
    .await;
    eprintln!("the override written after the failover was in force after {took:?}");

    // A client's state and reset, through the sentinels, on the promoted primary.
    let user = "after-the-failover";
    assert_eq!(demo.status("/orders/1", Some(user)).await, Some(200));
    let state = || {
        let out = admin_with(&redis, &["state", "GET /orders/{id}", "--user-id", user]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let once = state();
    assert!(once.contains("count 1, remaining 1"), "{once}");
    let out = admin_with(&redis, &["reset", "GET /orders/{id}", "--user-id", user]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let whole = state();
    assert!(whole.contains("count 0, remaining 2"), "{whole}");
}

/// With Redis Sentinel, overrides already in the hash are in force from the first request:
/// the limiter's first read, which it waits for before serving, reaches the primary the
/// sentinels name (the refresh thread has a connection of its own, not one driven by the
/// App's runtime, which that wait blocks).
#[actix_web::test]
async fn sentinel_overrides_are_in_force_from_the_first_request() {
    let setup = SentinelSetup::start();
    let _: () = setup
        .primary()
        .connection()
        .hset(
            "rl:overrides",
            "GET /orders/{id}",
            r#"limit = 1, window = "1h""#,
        )
        .unwrap();
    let redis = [
        ("REDIS_SENTINEL_NODES", setup.sentinel_urls().join(",")),
        ("REDIS_SENTINEL_MASTER", MASTER_NAME.to_owned()),
    ];
    let demo = Demo::start_with(&redis).await;
    let user = Some("first-requests");
    assert_eq!(demo.status("/orders/1", user).await, Some(200));
    assert_eq!(
        demo.status("/orders/1", user).await,
        Some(429),
        "the override (1 per hour) was not in force"
    );
}

/// Overrides read through the sentinels do not stay on a connection to the primary that went
/// silent (no error, no answer: a dropped NAT entry, a hung proxy): the read times out after
/// 1 s, the connection is dropped, and a read on a new one finds the change.
#[actix_web::test]
async fn sentinel_overrides_leave_a_connection_that_went_silent() {
    let primary = RedisServer::start();
    let proxy = Proxy::start(primary.port()).await;
    let sentinel = LoneSentinel::start(proxy.port());
    let demo = Demo::start_with(&[
        ("REDIS_SENTINEL_NODES", sentinel.url()),
        ("REDIS_SENTINEL_MASTER", MASTER_NAME.to_owned()),
    ])
    .await;
    let set = |limit: u32| {
        let _: () = primary
            .connection()
            .hset(
                "rl:overrides",
                "GET /orders/{id}",
                format!(r#"limit = {limit}, window = "1h""#),
            )
            .unwrap();
    };
    set(3);
    until_every(
        std::slice::from_ref(&demo),
        &[200, 200, 200, 429],
        "the override",
    )
    .await;
    proxy.freeze();
    set(2);
    // The route fails open while the checks' own connections recover, so the new limit
    // shows once both the checks and the overrides are on new connections.
    let frozen = Instant::now();
    let mut n = 1000;
    loop {
        if demo.fresh_user(&mut n).await == [200, 200, 429, 429] {
            break;
        }
        assert!(
            frozen.elapsed() < Duration::from_secs(10),
            "the override written after the connection went silent is not in force"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "in force {:?} after the connection went silent",
        frozen.elapsed()
    );
}
