//! The demo's shared budget `API` (its searches spend 1 unit, its exports 10) under
//! `ratelimit-admin`: listed with the routes that share it, overridden by name (a misspelled
//! name or a key `budget!` does not take is refused before anything is written), one
//! client's state read and reset by name, and the override cleared.

mod support;

use std::time::{Duration, Instant};

use support::{run_admin, DemoProcess, RedisServer};

const SECRET: &str = "a-key-secret-of-the-budget-test";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `ratelimit-admin args` on `env`: its standard output, or a failure naming its stderr.
fn admin_ok(env: &[(&str, &str)], args: &[&str]) -> String {
    let out = run_admin(env, args, "");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: {}{stdout}",
        text(&out.stderr)
    );
    stdout
}

/// `ratelimit-admin args` on `env`, which must fail: its standard error.
fn admin_refused(env: &[(&str, &str)], args: &[&str]) -> String {
    let out = run_admin(env, args, "");
    assert!(!out.status.success(), "{args:?}: {}", text(&out.stdout));
    text(&out.stderr)
}

#[actix_web::test]
async fn a_shared_budget_is_listed_overridden_read_and_reset_by_name() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [
        ("REDIS_URL", url.as_str()),
        ("RATELIMIT_KEY_SECRET", SECRET),
    ];
    let demo = DemoProcess::start(&env).await;
    let started = Instant::now();
    let routes = loop {
        let routes = text(&run_admin(&env, &["routes"], "").stdout);
        if routes.contains("budget API") {
            break routes;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{routes}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        routes.contains("budget API\n  declared: limit = 1000, window = \"1h\""),
        "{routes}"
    );
    assert!(
        routes.contains("  shared by: GET /api/search, POST /reports/export"),
        "{routes}"
    );
    assert!(
        routes.contains("declared: limit = 300, window = \"1m\", algorithm = \"sliding_window\", identity = \"api_key\", fail = \"open\"; budget = API"),
        "the route's own limit and its budget: {routes}"
    );

    // Refused before anything is written.
    let misspelled = admin_refused(
        &env,
        &[
            "override",
            "set",
            "budget APY",
            r#"limit = 12, window = "2h""#,
        ],
    );
    assert!(misspelled.contains("did you mean `API`?"), "{misspelled}");
    let cost = admin_refused(
        &env,
        &[
            "override",
            "set",
            "budget API",
            r#"limit = 12, window = "2h", cost = 2"#,
        ],
    );
    assert!(
        cost.contains("`cost` is no key of a shared budget"),
        "{cost}"
    );
    let fields: Vec<String> =
        redis::Commands::hkeys(&mut redis.connection(), "rl:overrides").unwrap();
    assert!(fields.is_empty(), "{fields:?}");

    let set = admin_ok(
        &env,
        &[
            "override",
            "set",
            "budget API",
            r#"limit = 12, window = "2h""#,
        ],
    );
    assert!(set.contains("set `budget API`"), "{set}");
    assert!(
        set.contains("shared by: GET /api/search, POST /reports/export"),
        "{set}"
    );
    let listed = admin_ok(&env, &["override", "list"]);
    assert!(listed.contains("budget API = 'limit = 12"), "{listed}");

    // In force on the demo within seconds: an export (10 units) and two searches spend the
    // 12, and the next search is refused. Each try starts from a whole budget.
    let key = ("x-api-key", "key_abc");
    let reset = ["reset", "budget API", "--api-key", "key_abc"];
    let started = Instant::now();
    loop {
        admin_ok(&env, &reset);
        let mut seen = vec![demo.send("POST", "/reports/export", &[key], None).await];
        for _ in 0..3 {
            seen.push(demo.send("GET", "/api/search?q=x", &[key], None).await);
        }
        if seen == [202, 200, 200, 429] {
            break;
        }
        assert_eq!(seen, [202, 200, 200, 200], "the declared budget, else 12");
        assert!(started.elapsed() < Duration::from_secs(10), "not in force");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }

    // Read by name: the 12 the requests spent, nothing counted by reading.
    let state = ["state", "budget API", "--api-key", "key_abc"];
    for _ in 0..2 {
        let out = admin_ok(&env, &state);
        assert!(out.contains("count 12, remaining 0"), "{out}");
        assert!(out.contains("refused for"), "{out}");
    }
    let wrong = admin_refused(&env, &["state", "budget API", "--ip", "203.0.113.7"]);
    assert!(wrong.contains("counts clients by `api_key`"), "{wrong}");
    // A reset by route leaves the shared budget alone; by name it clears it everywhere.
    admin_ok(&env, &["reset", "GET /api/search", "--api-key", "key_abc"]);
    assert_eq!(demo.send("GET", "/api/search", &[key], None).await, 429);
    let out = admin_ok(&env, &reset);
    assert!(out.contains("reset `budget API`"), "{out}");
    assert_eq!(demo.send("GET", "/api/search", &[key], None).await, 200);

    // A route whose requests cost 10 reads in units: whole after a reset of the route, and
    // 10 spent by one export.
    admin_ok(
        &env,
        &["reset", "POST /reports/export", "--api-key", "key_abc"],
    );
    let export = ["state", "POST /reports/export", "--api-key", "key_abc"];
    let out = admin_ok(&env, &export);
    assert!(out.contains("count 0, remaining 600, whole"), "{out}");
    assert_eq!(
        demo.send("POST", "/reports/export", &[key], None).await,
        202
    );
    let out = admin_ok(&env, &export);
    assert!(
        out.contains("count 10, remaining 590, whole again in"),
        "{out}"
    );

    let cleared = admin_ok(&env, &["override", "clear", "budget API"]);
    assert!(cleared.contains("cleared `budget API`"), "{cleared}");
    let routes = admin_ok(&env, &["routes"]);
    assert!(!routes.contains("  override: limit = 12"), "{routes}");
}
