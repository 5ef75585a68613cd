//! A Redis Cluster master whose host is gone: the process stopped and its port held by a
//! listener that never accepts (backlog full), so connections are neither accepted nor
//! refused. Under steady traffic across all slots, the other masters' slots go on being
//! decided within the timeout, the dead master's slots are answered per fail mode within it,
//! and once its replica is promoted they are decided again within 2 seconds. Without a
//! replica, the other masters' slots are decided for as long as the master stays gone.
//!
//! Both clusters run with `cluster-require-full-coverage no`, as a limiter's cluster should:
//! with the default, every node refuses every slot (`CLUSTERDOWN`) once a master is marked
//! failed until its replica takes over, and no client can do better.

use std::{
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use actix_web::test;
use ratelimit_runtime::store::RedisClusterStore;

use crate::{
    app,
    support::{key_slot, serves_slot_zero, CapturedLog, RedisCluster},
    traffic::{assert_bounded, recovery, traffic, Route, Sample},
    SERIAL, TIMEOUT,
};

/// The share of the other masters' checks that must be decided while one master is gone.
const OTHERS_DECIDED: f64 = 0.99;

/// Clients whose keys live on master 0 (slots 0..=5460: the harness splits the slots evenly)
/// are group 0; the others, on the masters that stay, group 1.
fn group_of(route: Route, client: &str) -> usize {
    usize::from(key_slot(route.key(client).as_str()) > 5460)
}

/// Fresh clients, both routes, both groups in turn.
fn clients(tag: &'static str) -> impl FnMut(u64) -> (Route, String, usize) {
    let mut candidate = 0u64;
    move |n| {
        let group = (n / 2 % 2) as usize;
        let route = if n % 2 == 0 {
            Route::Closed
        } else {
            Route::Open
        };
        loop {
            candidate += 1;
            let client = format!("{tag}-{candidate}");
            if group_of(route, &client) == group {
                return (route, client, group);
            }
        }
    }
}

/// Asserts at least [`OTHERS_DECIDED`] of `samples` were decided; prints the share.
fn assert_others_decided<'a>(samples: impl IntoIterator<Item = &'a Sample>, what: &str) {
    let (mut total, mut decided) = (0usize, 0usize);
    for s in samples {
        total += 1;
        decided += usize::from(s.decided);
    }
    println!("{what}: {decided} of {total} decided");
    assert!(total > 200, "{what}: only {total} requests");
    assert!(
        decided as f64 >= OTHERS_DECIDED * total as f64,
        "{what}: only {decided} of {total} requests were decided"
    );
}

/// The dead master's slots are answered per fail mode: 503 on the closed route, passed
/// undecided on the open one; never a decision, never another status.
fn assert_per_fail_mode<'a>(samples: impl IntoIterator<Item = &'a Sample>, what: &str) {
    let mut count = 0;
    for s in samples {
        count += 1;
        s.assert_answer(what);
        assert!(
            !s.decided,
            "{what}: a decision for a slot without a master: {s:?}"
        );
    }
    assert!(count > 50, "{what}: only {count} requests");
}

#[actix_web::test]
async fn a_dead_cluster_host_stalls_only_its_own_slots_until_its_replica_is_promoted() {
    let _serial = SERIAL.lock().await;
    let captured = CapturedLog::start(tracing::Level::WARN);
    let cluster = actix_web::rt::task::spawn_blocking(|| {
        let cluster = RedisCluster::start_with_replicas(3, 1);
        cluster.configure_every_node("cluster-require-full-coverage", "no");
        cluster
    })
    .await
    .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    #[derive(Default)]
    struct Timeline {
        gone: Option<Instant>,
        /// When the last look that found the replica not yet promoted began.
        unpromoted: Option<Instant>,
        promoted: Option<Instant>,
    }
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let killer = thread::spawn({
        let timeline = Arc::clone(&timeline);
        let mut cluster = cluster;
        move || {
            thread::sleep(Duration::from_millis(500));
            let hole = cluster.black_hole_master(0);
            timeline.lock().unwrap().gone = Some(Instant::now());
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let looked = Instant::now();
                if serves_slot_zero(&cluster.replicas()[0]) {
                    break;
                }
                timeline.lock().unwrap().unpromoted = Some(looked);
                assert!(Instant::now() < deadline, "the replica was never promoted");
                thread::sleep(Duration::from_millis(20));
            }
            timeline.lock().unwrap().promoted = Some(Instant::now());
            (cluster, hole)
        }
    });

    // Until 4 seconds after the promotion.
    let samples = traffic(&app, clients("hole"), |_| {
        timeline
            .lock()
            .unwrap()
            .promoted
            .is_some_and(|promoted| promoted.elapsed() > Duration::from_secs(4))
    })
    .await;
    let (_cluster, _hole) = killer.join().unwrap();
    let (gone, unpromoted, promoted) = {
        let t = timeline.lock().unwrap();
        (t.gone.unwrap(), t.unpromoted.unwrap(), t.promoted.unwrap())
    };
    println!("replica promoted {:?} after the host went", promoted - gone);

    assert_bounded(&samples, "a dead cluster host");
    for s in &samples {
        s.assert_answer("a dead cluster host");
    }
    assert_others_decided(
        samples.iter().filter(|s| s.group == 1 && s.done() > gone),
        "the other masters' slots, from the host's loss to the end",
    );
    // From the first check that found the host gone until the promotion.
    assert_per_fail_mode(
        samples
            .iter()
            .filter(|s| s.group == 0 && s.sent > gone + Duration::from_millis(100))
            .filter(|s| s.done() < unpromoted),
        "the dead master's slots before the promotion",
    );
    let decided_again = samples
        .iter()
        .filter(|s| s.group == 0 && s.sent > promoted && s.decided)
        .map(Sample::done)
        .min()
        .expect("the dead master's slots were decided again after the promotion");
    println!(
        "the dead master's slots decided again {:?} after the promotion was seen",
        decided_again.saturating_duration_since(promoted)
    );
    assert!(
        decided_again < promoted + Duration::from_secs(2),
        "decided again only {:?} after the promotion",
        decided_again - promoted
    );
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.group == 0 && s.sent > promoted + Duration::from_secs(2))
        .collect();
    assert_others_decided(
        after,
        "the dead master's slots, from 2 s after the promotion",
    );
    let logs = captured.text();
    assert!(
        logs.contains("did not answer 3 checks in a row"),
        "the breaker's opening is logged:\n{logs}"
    );
    assert!(
        logs.contains("moved to another master"),
        "the breaker's closing is logged:\n{logs}"
    );
}

#[actix_web::test]
async fn without_a_replica_a_dead_cluster_host_never_stalls_the_other_masters_slots() {
    let _serial = SERIAL.lock().await;
    let cluster = actix_web::rt::task::spawn_blocking(|| {
        let cluster = RedisCluster::start(3);
        cluster.configure_every_node("cluster-require-full-coverage", "no");
        cluster
    })
    .await
    .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let app = test::init_service(app(store)).await;
    recovery(&app, Route::Closed, "warm").await;

    let gone: Arc<Mutex<Option<Instant>>> = Arc::default();
    let killer = thread::spawn({
        let gone = Arc::clone(&gone);
        let mut cluster = cluster;
        move || {
            thread::sleep(Duration::from_millis(500));
            let hole = cluster.black_hole_master(0);
            *gone.lock().unwrap() = Some(Instant::now());
            (cluster, hole)
        }
    });
    // 10 seconds with the host gone: five times the cluster's node timeout, past the other
    // masters marking it failed.
    let samples = traffic(&app, clients("no-replica"), |_| {
        gone.lock()
            .unwrap()
            .is_some_and(|gone| gone.elapsed() > Duration::from_secs(10))
    })
    .await;
    let (_cluster, _hole) = killer.join().unwrap();
    let gone = gone.lock().unwrap().unwrap();

    assert_bounded(&samples, "a dead cluster host without a replica");
    for s in &samples {
        s.assert_answer("a dead cluster host without a replica");
    }
    assert_others_decided(
        samples.iter().filter(|s| s.group == 1 && s.done() > gone),
        "the other masters' slots, 10 s with the host gone",
    );
    assert_per_fail_mode(
        samples
            .iter()
            .filter(|s| s.group == 0 && s.sent > gone + Duration::from_millis(100)),
        "the dead master's slots",
    );
    // The last seconds like the first: the dead slots still fail at once, the others are
    // still decided.
    assert_others_decided(
        samples
            .iter()
            .filter(|s| s.group == 1 && s.sent > gone + Duration::from_secs(8)),
        "the other masters' slots, the last 2 s",
    );
}
