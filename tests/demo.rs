//! The demo service and the fleet experiment, run as programs against a real Redis and driven
//! over HTTP.

mod support;

use std::{
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use support::{example, free_port, RedisServer, SentinelSetup, MASTER_NAME};

/// The demo process, killed on drop.
struct Demo {
    child: Child,
    base: String,
    client: awc::Client,
}

impl Demo {
    async fn start(redis_url: &str) -> Demo {
        Demo::start_with(&[("REDIS_URL", redis_url)]).await
    }

    async fn start_with(envs: &[(&str, &str)]) -> Demo {
        let port = free_port();
        let mut command = Command::new(example("demo"));
        // Only the deployment this test names (the demo refuses two).
        for var in ["REDIS_URL", "REDIS_CLUSTER_NODES", "REDIS_SENTINEL_NODES"] {
            command.env_remove(var);
        }
        let child = command
            .env("BIND", format!("127.0.0.1:{port}"))
            .envs(envs.iter().copied())
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
        loop {
            if let Ok(res) = demo
                .client
                .get(format!("{}/health", demo.base))
                .send()
                .await
            {
                if res.status() == 200 {
                    return demo;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the demo did not come up"
            );
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, awc::http::header::HeaderMap) {
        let mut req = self
            .client
            .request(method.parse().unwrap(), format!("{}{path}", self.base));
        for (name, value) in headers {
            req = req.insert_header((*name, *value));
        }
        let res = match body {
            Some(body) => req.send_body(body.to_owned()).await,
            None => req.send().await,
        }
        .expect("request");
        (res.status().as_u16(), res.headers().clone())
    }

    /// Sends until the first 429; returns how many were allowed (at most `max`).
    async fn allowed_before_429(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
        max: usize,
    ) -> usize {
        for i in 0..max {
            let (status, _) = self.send(method, path, headers, body).await;
            match status {
                // A wrong password is answered 401, and counted.
                200..=299 | 401 => {}
                429 => return i,
                other => panic!("{method} {path}: unexpected status {other}"),
            }
        }
        max
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[actix_web::test]
async fn every_route_of_the_demo_follows_its_policy() {
    let server = RedisServer::start();
    let demo = Demo::start_with(&[
        ("REDIS_URL", &server.url()),
        ("DEMO_RESET_TOKEN", "t0k3n-of-this-test"),
    ])
    .await;

    let login = Some(r#"{"username":"alice","password":"pw"}"#);
    assert_eq!(
        demo.allowed_before_429("POST", "/login", &[JSON], login, 20)
            .await,
        10
    );
    // Ten wrong passwords lock the name out for 15 minutes, the right one too.
    let right = Some(r#"{"username":"alice","password":"demo"}"#);
    let (status, headers) = demo.send("POST", "/login", &[JSON], right).await;
    assert_eq!(status, 429);
    let retry: u64 = headers
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((890..=900).contains(&retry), "Retry-After {retry}");
    // Right passwords use no budget: another name signs in as often as it likes.
    let other_user = Some(r#"{"username":"bob","password":"demo"}"#);
    for _ in 0..15 {
        assert_eq!(
            demo.send("POST", "/login", &[JSON], other_user).await.0,
            200
        );
    }
    // Asking for a reset link clears nothing; a completed reset clears the name's failed
    // sign-ins and its lockout.
    let ask = Some(r#"{"username":"alice"}"#);
    assert_eq!(
        demo.send("POST", "/password-reset", &[JSON], ask).await.0,
        202
    );
    assert_eq!(demo.send("POST", "/login", &[JSON], right).await.0, 429);
    // A token anyone could know (the one earlier demos used) completes nothing.
    let guessed = Some(r#"{"username":"alice","token":"demo-reset"}"#);
    assert_eq!(
        demo.send("POST", "/password-reset", &[JSON], guessed)
            .await
            .0,
        202
    );
    assert_eq!(demo.send("POST", "/login", &[JSON], right).await.0, 429);
    let done = Some(r#"{"username":"alice","token":"t0k3n-of-this-test"}"#);
    assert_eq!(
        demo.send("POST", "/password-reset", &[JSON], done).await.0,
        200
    );
    assert_eq!(demo.send("POST", "/login", &[JSON], right).await.0, 200);

    let form = ("content-type", "application/x-www-form-urlencoded");
    assert_eq!(
        demo.allowed_before_429(
            "POST",
            "/password-reset",
            &[form],
            Some("username=carol"),
            10
        )
        .await,
        5
    );

    let key = ("x-api-key", "key_abc");
    let (status, headers) = demo.send("GET", "/api/search?q=x", &[key], None).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("ratelimit-policy").unwrap(),
        "\"search.0\";q=300;w=60, \"API\";q=1000;w=3600"
    );
    assert_eq!(
        demo.allowed_before_429("GET", "/api/search?q=x", &[key], None, 400)
            .await,
        299
    );
    assert_eq!(
        demo.send("GET", "/api/search", &[("x-api-key", "key_other")], None)
            .await
            .0,
        200
    );
    // A key the demo did not issue is no identity: keys made up afresh per request share
    // the address's one budget instead of getting one each.
    let mut passed = 0;
    for i in 0..301 {
        let made_up = format!("made-up-{i}");
        let headers = [("x-api-key", made_up.as_str())];
        match demo.send("GET", "/api/search", &headers, None).await.0 {
            200 => passed += 1,
            429 => break,
            other => panic!("GET /api/search with a made-up key: status {other}"),
        }
    }
    assert_eq!(passed, 300);

    assert_eq!(
        demo.allowed_before_429("POST", "/reports/export", &[key], None, 100)
            .await,
        60
    );

    let user = ("authorization", "Bearer u1");
    assert_eq!(
        demo.allowed_before_429("POST", "/orders", &[user], None, 50)
            .await,
        30
    );
    assert_eq!(
        demo.send("POST", "/orders", &[("authorization", "Bearer u2")], None)
            .await
            .0,
        201
    );

    // 20 per second (gcra) stacked on 120 per minute: a quick burst hits the per-second limit.
    let (status, headers) = demo
        .send("GET", "/orders/1", &[("authorization", "Bearer u3")], None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("ratelimit-policy").unwrap(),
        "\"get_order.0\";q=120;w=60, \"get_order.1\";q=20;w=1"
    );
    let burst = demo
        .allowed_before_429(
            "GET",
            "/orders/2",
            &[("authorization", "Bearer u3")],
            None,
            60,
        )
        .await;
    assert!((19..40).contains(&burst), "allowed {burst} in a burst");

    for _ in 0..300 {
        let (status, headers) = demo.send("GET", "/health", &[], None).await;
        assert_eq!(status, 200, "/health is never limited");
        assert!(headers.get("x-ratelimit-limit").is_none());
    }

    let res = demo
        .client
        .get(format!("{}/metrics", demo.base))
        .send()
        .await;
    let body = res.expect("metrics").body().await.expect("metrics body");
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(
            r#"ratelimit_decisions_total{route="POST /login",policy="login",decision="rejected"}"#
        ),
        "{text}"
    );
    // A histogram, which a fleet's instances can be summed over (a per-instance summary
    // cannot be).
    assert!(
        text.contains("# TYPE ratelimit_store_duration_seconds histogram"),
        "{text}"
    );
}

/// With `REDIS_SENTINEL_NODES` and `REDIS_SENTINEL_MASTER` the demo counts in the primary
/// the sentinels name, and never on the replica.
#[actix_web::test]
async fn the_demo_counts_in_the_primary_its_sentinels_name() {
    let setup = actix_web::rt::task::spawn_blocking(SentinelSetup::start)
        .await
        .unwrap();
    let sentinels = setup.sentinel_urls().join(",");
    let demo = Demo::start_with(&[
        ("REDIS_SENTINEL_NODES", &sentinels),
        ("REDIS_SENTINEL_MASTER", MASTER_NAME),
    ])
    .await;
    let login = Some(r#"{"username":"sentinel-user","password":"pw"}"#);
    assert_eq!(
        demo.allowed_before_429("POST", "/login", &[JSON], login, 20)
            .await,
        10
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rl:*")
        .query(&mut setup.primary().connection())
        .unwrap();
    assert!(!keys.is_empty(), "the primary holds no limiter key");
    assert_eq!(
        setup.replica().scripts_run(),
        0,
        "a check reached the replica"
    );
}

#[actix_web::test]
async fn the_demo_fails_closed_and_open_as_its_table_says_when_redis_is_down() {
    let mut server = RedisServer::start();
    let demo = Demo::start(&server.url()).await;
    server.kill();
    let login = Some(r#"{"username":"dave","password":"pw"}"#);
    let (status, headers) = demo.send("POST", "/login", &[JSON], login).await;
    assert_eq!(status, 503);
    assert!(headers.get("retry-after").is_some());
    assert_eq!(
        demo.send("GET", "/api/search", &[("x-api-key", "k")], None)
            .await
            .0,
        200
    );
    assert_eq!(demo.send("GET", "/health", &[], None).await.0, 200);
}

fn run(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(example(name));
    command.args(args).env("RUST_LOG", "error");
    for var in ["REDIS_URL", "REDIS_CLUSTER_NODES", "REDIS_SENTINEL_NODES"] {
        command.env_remove(var);
    }
    for (k, v) in envs {
        command.env(k, v);
    }
    command.output().expect("run the example")
}

/// `--routes --json` prints JSON alone on stdout at the default log level (its log lines,
/// such as the warning that no key secret is set, go to stderr).
#[test]
fn routes_json_is_json_alone_at_the_default_log_level() {
    let output = run("demo", &["--routes", "--json"], &[("RUST_LOG", "info")]);
    assert!(output.status.success());
    let table: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    let routes = table["routes"].as_array().expect("a list of routes");
    assert!(
        routes
            .iter()
            .any(|route| route["method"] == "POST" && route["pattern"] == "/login"),
        "{table}"
    );
}

#[test]
fn routes_prints_the_route_table_and_exits_zero() {
    let output = run("demo", &["--routes"], &[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for row in [
        "POST    /login           demo::routes::login",
        "10/5m sliding_log failures block 15m",
        "5/15m sliding_log",
        "300/1m sliding_window + budget API 1000/1h sliding_window by api_key",
        "600/1h fixed_window cost 10 + budget API 1000/1h sliding_window cost 10 by api_key + 2 in flight, lease 10s",
        "30/1m sliding_window",
        "120/1m sliding_window + 20/1s gcra",
        "exempt: load balancer health check",
    ] {
        assert!(text.contains(row), "missing `{row}` in:\n{text}");
    }
}

#[test]
fn the_demo_refuses_two_redis_deployments_at_once() {
    let output = run(
        "demo",
        &["--routes"],
        &[
            ("REDIS_URL", "redis://127.0.0.1:1"),
            ("REDIS_SENTINEL_NODES", "redis://127.0.0.1:2"),
            ("REDIS_SENTINEL_MASTER", "m"),
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("REDIS_URL and REDIS_SENTINEL_NODES are set together"),
        "{stderr}"
    );
}

#[test]
fn the_demo_refuses_to_start_with_an_uncovered_route() {
    let output = run(
        "demo",
        &[],
        &[("DEMO_UNCOVERED_ROUTE", "1"), ("BIND", "127.0.0.1:1")],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("GET /debug/uncovered"), "{stderr}");
    assert!(stderr.contains("refusing to start"), "{stderr}");
}

#[test]
fn the_fleet_experiment_shows_per_instance_counters_multiply_the_limit() {
    let server = RedisServer::start();
    let output = run(
        "fleet",
        &[],
        &[("FLEET_JSON", "1"), ("REDIS_URL", &server.url())],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let figures: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        figures["allowed_redis"], 100,
        "shared Redis enforces the limit exactly"
    );
    let in_memory = figures["allowed_in_memory"].as_u64().unwrap();
    assert!(
        (390..=400).contains(&in_memory),
        "in-memory allowed {in_memory}, about 4 x 100"
    );
}
