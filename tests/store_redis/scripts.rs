//! The check scripts on Redis: run by `EVALSHA` once Redis has seen them, sent again after a
//! `SCRIPT FLUSH`, and their errors (a key of the wrong type, malformed arguments) store
//! errors, never decisions.

use ratelimit_runtime::{
    __private::{check_script, check_script_sha1, give_back_script},
    store::{CheckRequest, StoreErrorKind},
    Algorithm, Limit, Window,
};

use crate::{
    check, limits, login,
    support::{Backend, RedisServer, T0, W},
};

/// `calls` of `cmdstat_<command>` in `INFO commandstats`, summed over every node.
async fn command_calls(backend: &Backend, command: &str) -> u64 {
    let mut info = redis::cmd("INFO");
    info.arg("commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    let mut calls = 0;
    for reply in backend.on_every_node(&info).await {
        let text: String = redis::FromRedisValue::from_redis_value(reply).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(&prefix) {
                calls += rest.split(',').next().unwrap().parse::<u64>().unwrap();
            }
        }
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evalsha_runs_the_script_once_redis_has_seen_it() {
    let backend = Backend::standalone().await;
    let store = backend.store();
    check(&*store, T0).await.unwrap();
    check(&*store, T0).await.unwrap();
    check(&*store, T0).await.unwrap();
    // The first EVALSHA met NOSCRIPT and fell back to EVAL; the others found it, which
    // only happens when the locally computed SHA-1 is the one Redis computes.
    assert_eq!(command_calls(&backend, "evalsha").await, 3);
    assert_eq!(command_calls(&backend, "eval").await, 1);
    assert_eq!(command_calls(&backend, "script|load").await, 0);
    let exists: Vec<bool> = backend
        .query(redis::cmd("SCRIPT").arg("EXISTS").arg(check_script_sha1()))
        .await;
    assert_eq!(exists, [true]);

    // A limit checked alone runs its algorithm's own script, found the same way.
    let alone = [limits()[1]];
    for _ in 0..3 {
        let decision = store
            .check(CheckRequest {
                key: &login(),
                limits: &alone,
                now_millis: Some(T0),
            })
            .await
            .unwrap();
        assert!(decision.allowed);
    }
    assert_eq!(command_calls(&backend, "evalsha").await, 6);
    assert_eq!(command_calls(&backend, "eval").await, 2);
    let script = check_script(&alone);
    assert_ne!(script.sha1(), check_script_sha1());
    let exists: Vec<bool> = backend
        .query(redis::cmd("SCRIPT").arg("EXISTS").arg(script.sha1()))
        .await;
    assert_eq!(exists, [true]);
}

async fn script_flush_between_checks(backend: Backend) {
    let store = backend.store();
    let first = check(&*store, T0).await.unwrap();
    assert_eq!(first.limits[0].remaining, 4);
    let flushed = backend
        .on_every_node(redis::cmd("SCRIPT").arg("FLUSH"))
        .await;
    assert!(!flushed.is_empty());
    let second = check(&*store, T0)
        .await
        .expect("the check after SCRIPT FLUSH succeeds");
    assert_eq!(
        second.limits[0].remaining, 3,
        "and it counted on the same state"
    );
    assert_eq!(
        command_calls(&backend, "eval").await,
        2,
        "EVAL again after the flush"
    );
    assert_eq!(
        command_calls(&backend, "script|load").await,
        0,
        "never SCRIPT LOAD"
    );
    backend.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_between_checks_is_invisible() {
    script_flush_between_checks(Backend::standalone().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_on_every_cluster_node_between_checks_is_invisible() {
    script_flush_between_checks(Backend::cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_is_a_store_error_not_a_decision() {
    let backend = Backend::standalone().await;
    // The sliding log's key holds a string: ZREMRANGEBYSCORE fails inside the script.
    let log_key = login().limit_key(&limits()[0]);
    let _: () = backend
        .query(redis::cmd("SET").arg(&log_key).arg("not a sorted set"))
        .await;
    let err = check(&*backend.store(), T0)
        .await
        .expect_err("a script error");
    assert_eq!(err.kind(), StoreErrorKind::Redis, "{err}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}

/// Every script checks its arguments and answers a clear error, never a decision.
#[test]
fn the_scripts_refuse_malformed_arguments() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let alone = [Limit::new(5, Window::from_millis(W), Algorithm::Gcra)];
    let single = check_script(&alone).source();
    let general = check_script(&limits()).source();
    let mut eval = |source: &str, args: &[&str]| -> Result<redis::Value, String> {
        redis::cmd("EVAL")
            .arg(source)
            .arg(args)
            .query(&mut conn)
            .map_err(|e| e.to_string())
    };
    let t0 = T0.to_string();
    let w = W.to_string();
    let ok = eval(single, &["1", "k:gc", &t0, "5", &w]).unwrap();
    let reply = |text: &str| redis::Value::BulkString(format!("{text} {T0}").into_bytes());
    // The figures, then the time the script counted at (the receipt of a give-back).
    assert_eq!(ok, reply("1 4 0 12000"));
    let log =
        check_script(&[Limit::new(5, Window::from_millis(W), Algorithm::SlidingLog)]).source();
    let ok = eval(log, &["1", "k:sl", &t0, "5", &w, "m1"]).unwrap();
    assert_eq!(ok, reply("1 4 0 60000"));
    // The general script (four arguments per limit: code, with `:` and the cost when it is
    // not 1, max, window, block): four integers per limit, in the order of the keys.
    let stacked = eval(
        general,
        &[
            "2", "k2:sl", "k2:sw", &t0, "m1", "sl", "5", &w, "0", "sw", "100", &w, "0",
        ],
    )
    .unwrap();
    assert_eq!(stacked, reply("1 4 0 60000 1 99 0 120000"));
    // Two units asked back from the GCRA key counted once above: one comes back, then none.
    let give_back = give_back_script().source();
    for given in [1, 0] {
        let reply = eval(give_back, &["1", "k:gc", &t0, "", "gc", "5", &w, "2", ""]).unwrap();
        assert_eq!(reply, redis::Value::Int(given));
    }
    let sliding = check_script(&[Limit::new(
        5,
        Window::from_millis(W),
        Algorithm::SlidingWindow,
    )])
    .source();
    // The largest product that stays exact is accepted: (2^32 - 1) x 2097151 < 2^53.
    let ok = eval(sliding, &["1", "k:sw", &t0, "4294967295", "2097151"]).unwrap();
    assert!(matches!(ok, redis::Value::BulkString(ref s) if s.starts_with(b"1 4294967294 0 ")));
    let bounds =
        "max must be a whole number from 1 to 4294967295 and window one from 1 to 2678400000";
    let exact = "a sliding window counts exactly only while max x window (ms) < 2^53";
    let refused = [
        (
            single,
            vec!["2", "a", "b", "", "5", "1000"],
            "expected one key and 3 arguments",
        ),
        // One argument too many reads as a cost after a misplaced max: refused all the same.
        (single, vec!["1", "k:gc", "", "gc", "5", "1000"], bounds),
        (
            log,
            vec!["1", "k:sl", "", "5", "1000"],
            "expected one key and 4 arguments",
        ),
        (single, vec!["1", "k:gc", "", "0", "1000"], bounds),
        (single, vec!["1", "k:gc", "", "5", "soon"], bounds),
        (single, vec!["1", "k:gc", "", "2.5", "1000"], bounds),
        (single, vec!["1", "k:gc", "", "4294967296", "1000"], bounds),
        (single, vec!["1", "k:gc", "", "5", "2678400001"], bounds),
        (log, vec!["1", "k:sl", "", "5", "0.5", "m"], bounds),
        // max x window at or past 2^53: a sliding window's products would not be exact.
        (
            sliding,
            vec!["1", "k:sw", "", "4194304", "2147483648"],
            exact,
        ),
        (
            general,
            vec!["1", "k", "", "", "sw", "4294967295", "2097153", "0"],
            exact,
        ),
        (
            single,
            vec!["1", "k:gc", "yesterday", "5", "1000"],
            "ARGV[1] must be empty or a whole number",
        ),
        (
            general,
            vec!["1", "k", "", "", "tb", "5", "1000", "0"],
            "unknown algorithm `tb`",
        ),
        (
            general,
            vec!["1", "k", "", "", "sw", "5"],
            "expected 2 + 4 arguments per limit",
        ),
        (
            general,
            vec![
                "2", "a", "b", "", "", "sw", "5", "1000", "0", "gc", "-1", "1000", "0",
            ],
            bounds,
        ),
        (
            general,
            vec!["1", "k", "1.5", "", "fw", "5", "1000", "0"],
            "ARGV[1] must be empty or a whole number",
        ),
        // A lockout: its key and a block within the window's bounds.
        (
            single,
            vec!["2", "k:gc", "k:gc:block", "", "5", "1000", "0"],
            "block must be a whole number from 1 to 2678400000",
        ),
        (
            general,
            vec!["1", "k", "", "", "fw", "5", "1000", "1000"],
            "expected one lockout key per limit with a block",
        ),
        // A cost: from 1 to the limit, alone as the last argument, in a stack on its code.
        (
            single,
            vec!["1", "k:gc", "", "5", "1000", "6"],
            "cost must be a whole number from 1 to max",
        ),
        (
            general,
            vec!["1", "k", "", "", "fw:0", "5", "1000", "0"],
            "cost must be a whole number from 1 to max",
        ),
        (
            general,
            vec!["1", "k", "", "", "fw:6", "5", "1000", "0"],
            "cost must be a whole number from 1 to max",
        ),
        (
            general,
            vec!["1", "k", "", "", "fw/2", "5", "1000", "0"],
            "unknown algorithm `fw/2`",
        ),
        (
            give_back,
            vec!["1", "k", "", "", "fw", "5", "1000", "0", ""],
            "units must be a whole number",
        ),
        (
            give_back,
            vec!["1", "k", "", "later", "fw", "5", "1000", "1", ""],
            "ARGV[2] must be empty or a time",
        ),
        (
            give_back,
            vec!["1", "k", "", "", "fw", "5", "1000"],
            "expected one key and 5 arguments per limit",
        ),
        (
            give_back,
            vec!["1", "k", "", "reset", "extra"],
            "a reset takes its keys and 2 arguments",
        ),
    ];
    for (source, args, expected) in refused {
        let err = eval(source, &args).expect_err(expected);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let mut other = server.connection();
    // A give-back whose second limit is malformed writes nothing, not even to the first.
    let _: () = redis::cmd("HSET")
        .arg("gb:fw")
        .arg(T0 - T0 % W)
        .arg(3)
        .query(&mut other)
        .unwrap();
    let args = [
        "2", "gb:fw", "gb:gc", &t0, "", "fw", "5", &w, "1", "", "gc", "5", &w, "0", "",
    ];
    let err = redis::cmd("EVAL")
        .arg(give_back)
        .arg(&args)
        .query::<redis::Value>(&mut other)
        .unwrap_err();
    assert!(err.to_string().contains("units must be"), "{err}");
    let count: u64 = redis::cmd("HGET")
        .arg("gb:fw")
        .arg(T0 - T0 % W)
        .query(&mut other)
        .unwrap();
    assert_eq!(count, 3);
}
