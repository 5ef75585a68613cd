//! A Redis Cluster master killed under traffic: its slots fail (503 on the closed route,
//! never a redirect turned into an answer) until its replica is promoted, the other masters'
//! slots go on being decided meanwhile, and afterwards the limiter decides again, exactly,
//! without an app restart.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use actix_web::test;
use ratelimit_runtime::store::RedisClusterStore;

use crate::{
    app,
    support::{key_slot, serves_slot_zero, CapturedLog, RedisCluster},
    traffic::{
        assert_bounded, assert_exact, assert_mostly_decided, recovery, send, traffic, Route,
    },
    IN_FLIGHT, SERIAL, TIMEOUT,
};

#[actix_web::test]
async fn a_killed_cluster_master_is_replaced_and_the_limiter_decides_again_without_a_restart() {
    let _serial = SERIAL.lock().await;
    let captured = CapturedLog::start(tracing::Level::INFO);

    let cluster = actix_web::rt::task::spawn_blocking(|| RedisCluster::start_with_replicas(3, 1))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    // Clients whose keys live on master 0 (slots 0..=5460: the harness splits the slots
    // evenly) are group 0; the others, on the surviving masters, group 1.
    let group_of =
        |route: Route, client: &str| usize::from(key_slot(route.key(client).as_str()) > 5460);
    let mut conn = cluster.masters()[1].connection();
    for client in ["a", "failover-1", "failover-2"] {
        let key = Route::Open.key(client);
        let by_redis: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key.as_str())
            .query(&mut conn)
            .unwrap();
        assert_eq!(key_slot(key.as_str()), by_redis, "{key}");
    }
    let probe = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|c| group_of(Route::Closed, c) == 0)
        .unwrap();
    assert_eq!(
        send(&app, Route::Closed, probe.clone(), 0).await.status,
        200
    );
    let pattern = format!("{}*", Route::Closed.key(&probe));
    let on_master_0: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query(&mut cluster.masters()[0].connection())
        .unwrap();
    assert_eq!(on_master_0.len(), 1, "group 0's keys live on master 0");

    #[derive(Default)]
    struct Timeline {
        kill: Option<(Instant, Instant)>,
        /// When the last check that found the replica not yet promoted began: the replica
        /// was still a replica then (a check that began earlier than the promotion can
        /// still see it, so the end of a failed check proves nothing).
        unpromoted: Option<Instant>,
        promoted: Option<Instant>,
    }
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let killer = thread::spawn({
        let timeline = Arc::clone(&timeline);
        let mut cluster = cluster;
        move || {
            thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            cluster.kill_master(0);
            timeline.lock().unwrap().kill = Some((started, Instant::now()));
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let checked = Instant::now();
                if serves_slot_zero(&cluster.replicas()[0]) {
                    break;
                }
                timeline.lock().unwrap().unpromoted = Some(checked);
                assert!(Instant::now() < deadline, "the replica was never promoted");
                thread::sleep(Duration::from_millis(20));
            }
            timeline.lock().unwrap().promoted = Some(Instant::now());
            cluster
        }
    });

    // Fresh clients of both groups on both routes, until four seconds after the promotion
    // (and after the limiter decided again for group 0).
    let mut candidate = 0u64;
    let mut decided_again: Option<Instant> = None;
    let samples = traffic(
        &app,
        |n| {
            let group = (n / 2 % 2) as usize;
            let route = if n % 2 == 0 {
                Route::Closed
            } else {
                Route::Open
            };
            loop {
                candidate += 1;
                let client = format!("failover-{candidate}");
                if group_of(route, &client) == group {
                    return (route, client, group);
                }
            }
        },
        |last| {
            let Some(promoted) = timeline.lock().unwrap().promoted else {
                return false;
            };
            if let Some(s) = last.filter(|s| s.group == 0 && s.sent > promoted && s.decided) {
                decided_again.get_or_insert(s.done());
            }
            (decided_again.is_some() && promoted.elapsed() > Duration::from_secs(4))
                || promoted.elapsed() > Duration::from_secs(15)
        },
    )
    .await;
    let cluster = killer.join().unwrap();
    let (kill_started, kill_done, unpromoted, promoted) = {
        let t = timeline.lock().unwrap();
        let (started, done) = t.kill.unwrap();
        (started, done, t.unpromoted.unwrap(), t.promoted.unwrap())
    };
    println!("replica promoted {:?} after the kill", promoted - kill_done);

    assert_bounded(&samples, "cluster master killed");
    for group in 0..2 {
        let mut counts = BTreeMap::<(&str, u16, bool), usize>::new();
        for s in samples.iter().filter(|s| s.group == group) {
            let route = if s.route == Route::Closed {
                "closed"
            } else {
                "open"
            };
            *counts.entry((route, s.status, s.decided)).or_default() += 1;
        }
        let failed: Vec<_> = samples
            .iter()
            .filter(|s| s.group == group && !s.decided)
            .collect();
        let window = failed
            .iter()
            .map(|s| s.sent)
            .min()
            .zip(failed.iter().map(|s| s.done()).max());
        println!(
            "group {group}: (route, status, decided) counts {counts:?}; undecided from {:?} to {:?} after the kill",
            window.map(|(first, _)| first.saturating_duration_since(kill_done)),
            window.map(|(_, last)| last.saturating_duration_since(kill_done)),
        );
    }

    // Fresh clients, so the only answers are 200 and, on the closed route during the
    // outage, 503: never a 500, and never a MOVED/ASK/CROSSSLOT reply made into anything.
    for s in &samples {
        s.assert_answer("cluster master killed");
    }
    // The killed master's slots are down from the kill until the replica's promotion (known
    // to be later than the start of the last check that found it still a replica).
    let down: Vec<_> = samples
        .iter()
        .filter(|s| s.group == 0 && s.sent > kill_done && s.done() < unpromoted)
        .collect();
    assert!(down.len() > 4 * IN_FLIGHT, "traffic during the outage");
    for s in down {
        assert!(
            !s.decided,
            "a decision for a slot without a master, sent {:?} after the kill, answered {:?} \
             before the replica was last seen unpromoted: {s:?}",
            s.sent - kill_done,
            unpromoted - s.done(),
        );
    }
    // Before the kill, and for the surviving masters' slots until the other masters mark the
    // dead one failed (cluster-node-timeout, 2 s), requests are decided. After that, with the
    // default cluster-require-full-coverage, every node refuses with CLUSTERDOWN until the
    // replica is promoted.
    assert_mostly_decided(
        samples.iter().filter(|s| s.done() < kill_started),
        "before the kill",
    );
    assert_mostly_decided(
        samples.iter().filter(|s| {
            s.group == 1 && s.sent > kill_done && s.done() < kill_done + Duration::from_millis(1500)
        }),
        "surviving masters, first 1.5 s after the kill",
    );
    // From two seconds after the promotion, everything is decided again.
    assert_mostly_decided(
        samples
            .iter()
            .filter(|s| s.sent > promoted + Duration::from_secs(2)),
        "from 2 s after the promotion",
    );
    let decided_again = decided_again.expect("group 0 decided again after the promotion");
    println!(
        "group 0 decided again {:?} after the promotion was seen",
        decided_again.saturating_duration_since(promoted)
    );

    let logs = captured.text();
    let errors: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("rate-limit store error"))
        .collect();
    assert!(!errors.is_empty(), "store errors are logged");
    for line in &errors {
        for redirect in ["MOVED", "ASK ", "CROSSSLOT", "TRYAGAIN"] {
            assert!(
                !line.contains(redirect),
                "`{redirect}` reached the request path: {line}"
            );
        }
    }
    let timeouts = errors
        .iter()
        .filter(|l| l.contains("store timeout"))
        .count();
    println!(
        "{} store errors logged, {timeouts} of them timeouts",
        errors.len()
    );

    // Exact decisions on the promoted replica for fresh clients, with no app restart.
    for route in [Route::Closed, Route::Open] {
        let fresh = (0..)
            .map(|i| format!("after-failover-{i}"))
            .find(|c| group_of(route, &format!("{c}-0")) == 0)
            .unwrap();
        assert_exact(&app, route, &fresh).await;
    }

    // No node ever answered CROSSSLOT.
    for node in cluster.masters().iter().skip(1).chain(cluster.replicas()) {
        let stats: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut node.connection())
            .unwrap();
        assert!(
            !stats.contains("CROSSSLOT"),
            "a node answered CROSSSLOT:\n{stats}"
        );
    }
}
