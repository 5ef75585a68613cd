//! A Cluster master in trouble: stopped and failed over, busy now and then, stopped and not
//! failed over. The store replaces its connections only when a new set answers for every
//! master.

use std::time::{Duration, Instant};

use ratelimit_runtime::{
    key::RouteKey,
    store::{Decision, RedisClusterStore, StoreError, StoreErrorKind},
    Algorithm, IdentityPart, Limit, Window,
};

use crate::{
    check_key, connections_received,
    support::{self, key_slot, serves_slot_zero, RedisCluster},
};

/// A limit no test reaches.
fn far_limit() -> [Limit; 1] {
    [Limit::new(
        1_000_000,
        Window::from_secs(60),
        Algorithm::FixedWindow,
    )]
}

/// One check of `key` against [`far_limit`], on the store's clock.
async fn check_far_below_its_limit(
    store: &RedisClusterStore,
    key: &RouteKey,
) -> Result<Decision, StoreError> {
    check_key(store, key, &far_limit()).await
}

/// A store on `cluster` once it decides, with a client whose key lives on master 0 (slots
/// 0..=5460: the harness splits them evenly) and one whose key does not.
async fn connected_with_a_client_on_master_0(
    cluster: &RedisCluster,
) -> (RedisClusterStore, RouteKey, RouteKey) {
    let store = RedisClusterStore::builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let (on_master_0, elsewhere) = (key_on_master_0(true), key_on_master_0(false));
    let deadline = Instant::now() + Duration::from_secs(5);
    while check_far_below_its_limit(&store, &on_master_0)
        .await
        .is_err()
        || check_far_below_its_limit(&store, &elsewhere).await.is_err()
    {
        assert!(Instant::now() < deadline, "never connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (store, on_master_0, elsewhere)
}

/// A client whose key lives on master 0 (slots 0..=5460: the harness splits them evenly),
/// or, when not `wanted`, one whose key does not.
fn key_on_master_0(wanted: bool) -> RouteKey {
    (0..)
        .map(|i| {
            let ip = format!("10.0.{}.{}", i / 256, i % 256);
            RouteKey::new("rl", "GET", "/x", &[(IdentityPart::Ip, ip.as_str())])
        })
        .find(|key| (key_slot(&key.limit_key(&far_limit()[0])) <= 5460) == wanted)
        .unwrap()
}

/// A master's connection goes silent while the path to the master works (a NAT entry or a
/// proxy's connection dropped), and every caller gives up sooner than the store would (its
/// own timer of 30 ms over the store's 200): the checks it abandoned count against the
/// master's breaker all the same, whose probe finds that a new connection answers and
/// installs it at once, so its slots are decided again within about a second, not never
/// (a silent connection stays open for as long as the kernel retransmits), nor after the
/// probe's own bound (here over 3 s) waiting on the old connection's `PING`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_masters_connection_is_replaced_under_a_callers_shorter_timeout() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let proxy = support::Proxy::start(cluster.masters()[0].port()).await;
    let port = proxy.port();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.announce_master_at(0, port);
        cluster
    })
    .await
    .unwrap();
    // Seeded with the other masters: master 0 is known by its announced address alone.
    let seeds: Vec<String> = cluster.masters()[1..].iter().map(|m| m.url()).collect();
    let store = RedisClusterStore::builder(seeds)
        .timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let key = key_on_master_0(true);
    let check = || {
        tokio::time::timeout(
            Duration::from_millis(30),
            check_far_below_its_limit(&store, &key),
        )
    };
    let (took, given_up) = crate::decided_again_after_silence(&proxy, "master 0", check).await;
    assert!(
        given_up >= 3,
        "the silent connection failed only {given_up} checks"
    );
    assert!(
        took < Duration::from_millis(1_500),
        "decided again only {took:?} after the connection went silent"
    );
}

/// A Cluster master that stops answering without closing its connections (a hung host, a
/// partition that drops packets) is failed over by the cluster. redis-rs reads the slot map
/// again only after a `MOVED` or a connection error, so without help the checks of that
/// master's slots would time out for as long as it stays silent, while those of the other
/// masters go on answering in between: the store replaces its connections once every master
/// of the new slot map answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_follows_the_failover_of_a_master_that_stopped_answering() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start_with_replicas(3, 1))
        .await
        .unwrap();
    let (store, stuck, healthy) = connected_with_a_client_on_master_0(&cluster).await;
    let check = |key| check_far_below_its_limit(&store, key);

    cluster.masters()[0].pause();
    let paused = Instant::now();
    // Both clients keep sending; the failover takes `cluster-node-timeout` and then some.
    let (mut stuck_outcomes, mut healthy_answered) = (Vec::new(), 0);
    let mut promoted = None;
    let recovered = loop {
        let checked = check(&stuck).await;
        stuck_outcomes.push(checked.as_ref().map(|_| ()).map_err(StoreError::kind));
        // Three checks of the other masters' slots to one of master 0's: most checks answer
        // meanwhile, so timeouts rarely come three in a row.
        for _ in 0..3 {
            healthy_answered += usize::from(check(&healthy).await.is_ok());
        }
        if promoted.is_none() && serves_slot_zero(&cluster.replicas()[0]) {
            promoted = Some(paused.elapsed());
        }
        if checked.is_ok() {
            break true;
        }
        if paused.elapsed() > Duration::from_secs(40) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = paused.elapsed();
    cluster.masters()[0].resume();
    let last: Vec<_> = stuck_outcomes.iter().rev().take(3).collect();
    assert!(
        recovered,
        "the replica was promoted {promoted:?} after the pause, and checks of its slots still fail 40 s after it: {last:?}"
    );
    assert!(
        stuck_outcomes.len() > 10 && healthy_answered > 3 * stuck_outcomes.len() / 2,
        "the other masters answered {healthy_answered} of {} checks meanwhile",
        3 * stuck_outcomes.len()
    );
    println!(
        "decided again {took:?} after the pause (promotion seen at {promoted:?}); the other masters answered {healthy_answered} of {} checks meanwhile",
        3 * stuck_outcomes.len()
    );
}

/// A Cluster master that is busy now and then (a 2 s command every 3.5 s) makes checks of
/// its slots time out until its breaker opens (then they fail at once), but its connection
/// is not silent: it answers the breaker's probe once the command ends, is kept rather than
/// replaced, and the master's slots are decided again.
// One thread: the log capture is the thread's own, and the probes run on it too.
#[tokio::test]
async fn a_cluster_master_busy_now_and_then_keeps_the_stores_connections() {
    let log = support::CapturedLog::start(tracing::Level::WARN);
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let (store, busy, healthy) = connected_with_a_client_on_master_0(&cluster).await;
    let check = |key| check_far_below_its_limit(&store, key);
    // A replacement waits at least a second after the connection was made.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = connections_received(&cluster.masters()[1]);
    let url = cluster.masters()[0].url();
    let slow = std::thread::spawn(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        for _ in 0..5 {
            let _: () = redis::cmd("EVAL")
                .arg(
                    "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] \
                     while true do local n = redis.call('TIME') \
                     if n[1] * 1e6 + n[2] - s > 2000000 then return end end",
                )
                .arg(0)
                .query(&mut conn)
                .unwrap();
            std::thread::sleep(Duration::from_millis(1_500));
        }
    });
    let (mut timeouts, mut at_once, mut answered, mut busy_answered) = (0, 0, 0, 0);
    while !slow.is_finished() {
        for key in [&busy, &healthy, &healthy] {
            match check(key).await {
                Ok(_) => {
                    answered += 1;
                    busy_answered += usize::from(std::ptr::eq(key, &busy));
                }
                Err(e) if e.kind() == StoreErrorKind::Timeout => timeouts += 1,
                Err(e) if e.kind() == StoreErrorKind::Connection => at_once += 1,
                Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let opened = connections_received(&cluster.masters()[1]) - before;
    let text = log.text();
    let (replaced, opened_breaker) = (
        text.matches("using the new one").count(),
        text.matches("did not answer 3 checks in a row").count(),
    );
    println!("{timeouts} timeouts, {at_once} failed at once, {answered} answers ({busy_answered} for the busy master); master 1 accepted {opened} connections; {replaced} replacements; the breaker opened {opened_breaker} times");
    assert!(
        timeouts >= 5 && timeouts + at_once >= 20,
        "the busy master made only {timeouts} checks time out and {at_once} fail at once"
    );
    assert!(
        opened_breaker >= 1,
        "the busy master's breaker never opened"
    );
    assert!(
        busy_answered >= 20,
        "the busy master's slots were decided only {busy_answered} times between its commands"
    );
    assert_eq!(
        replaced, 0,
        "connections replaced although every node answered"
    );
}

/// A Cluster master that stops answering and is not failed over (no replica takes over): a
/// new set of connections cannot reach it either, so it must not replace the old one.
/// redis-rs's `PING` to all masters skips masters a connection does not hold, so new
/// connections seem to answer; swapping them in would leave checks of every slot waiting on
/// slot-map refreshes.
#[tokio::test]
async fn a_stopped_master_that_is_not_failed_over_keeps_the_stores_connections() {
    let log = support::CapturedLog::start(tracing::Level::WARN);
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start_with_replicas(3, 1))
        .await
        .unwrap();
    for node in cluster.nodes() {
        for (name, value) in [
            ("cluster-require-full-coverage", "no"),
            ("cluster-replica-no-failover", "yes"),
        ] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut node.connection())
                .unwrap();
        }
    }
    let (store, stuck, healthy) = connected_with_a_client_on_master_0(&cluster).await;
    let check = |key| check_far_below_its_limit(&store, key);
    // A replacement waits at least a second after the connection was made.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    cluster.masters()[0].pause();
    let paused = Instant::now();
    let (mut healthy_checks, mut healthy_answered) = (0, 0);
    while paused.elapsed() < Duration::from_secs(12) {
        let _ = check(&stuck).await;
        for _ in 0..3 {
            healthy_checks += 1;
            healthy_answered += usize::from(check(&healthy).await.is_ok());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.masters()[0].resume();
    let replaced = log.text().matches("using the new one").count();
    println!("{replaced} replacements; the other masters answered {healthy_answered} of {healthy_checks} checks");
    assert_eq!(
        replaced, 0,
        "replaced while master 0 was stopped and still the master"
    );
    assert!(
        healthy_answered * 10 >= healthy_checks * 8,
        "the other masters answered {healthy_answered} of {healthy_checks} checks"
    );
}
