//! A Redis Cluster under the store: down when the store is built, replicating the scripts'
//! effects, and resharding (slots migrating between masters, a master added) while checks
//! keep being decided and counted once.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, RedisClusterStore, Store, StoreErrorKind},
    Algorithm, IdentityPart, Limit, Window,
};

use crate::{
    check, limits, login,
    support::{self, RedisCluster, RedisServer, T0},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_built_while_the_cluster_is_down_fails_fast() {
    let mut server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    server.kill();
    let started = Instant::now();
    let store = RedisClusterStore::builder([server.url()])
        .build()
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "building waited for the cluster"
    );
    let started = Instant::now();
    let err = check(&store, T0)
        .await
        .expect_err("no decision without a cluster");
    assert!(
        matches!(
            err.kind(),
            StoreErrorKind::Connection | StoreErrorKind::Timeout
        ),
        "{err}"
    );
    assert!(started.elapsed() < store.timeout() + Duration::from_millis(25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_effects_reach_the_replicas() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start_with_replicas(3, 1))
        .await
        .unwrap();
    assert_eq!(cluster.nodes().count(), 6);
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    // The store's clock: the script reads TIME, then writes; Redis replicates the effects.
    let (key, limits) = (login(), limits());
    let request = CheckRequest {
        key: &key,
        limits: &limits,
        now_millis: None,
    };
    assert!(store.check(request).await.unwrap().allowed);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut sizes = Vec::new();
        for node in cluster.nodes() {
            let mut conn = node.async_connection().await;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("rl:*")
                .query_async(&mut conn)
                .await
                .unwrap();
            sizes.push(keys.len());
        }
        // Two keys (the log and the current window) on one master and on its replica.
        if sizes.iter().sum::<usize>() == 4 && sizes.iter().filter(|&&n| n == 2).count() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "keys per node (masters, then replicas): {sizes:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resharding moves a slot key by key: while it is MIGRATING, the source node runs a script
/// only when it holds every key the script is named with, else it redirects (ASK) to the
/// importing node. A script that touched keys it was not named with (window keys built from
/// the server clock) would count on the wrong node: fresh budgets, or errors for every
/// check. Every algorithm and a stack keep counting through a migration and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_keep_counting_while_their_slot_migrates() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let stack = [
        Limit::new(5, Window::from_secs(60), Algorithm::SlidingWindow),
        Limit::new(50, Window::from_secs(3600), Algorithm::FixedWindow),
    ];
    let cases: Vec<(String, Vec<Limit>)> = Algorithm::ALL
        .iter()
        .map(|a| {
            (
                a.as_str().to_owned(),
                vec![Limit::new(5, Window::from_secs(60), *a)],
            )
        })
        .chain([("stacked".to_owned(), stack.to_vec())])
        .collect();
    for (name, limits) in cases {
        let key = RouteKey::new(
            "rl",
            "POST",
            &format!("/export/{name}"),
            &[(IdentityPart::Ip, "203.0.113.7")],
        );
        let now = T0 + 1_000;
        let check = || async {
            let request = CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(now),
            };
            match store.check(request).await {
                Ok(d) => format!("{} {}", d.allowed, d.limits[0].remaining),
                Err(e) => format!("error: {e}"),
            }
        };
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(check().await);
        }
        let slot = support::key_slot(&key.limit_key(&limits[0]));
        let nodes = tokio::task::block_in_place(|| cluster.begin_migration(slot));
        // No key has moved yet.
        seen.push(check().await);
        tokio::task::block_in_place(|| cluster.move_keys(slot, nodes));
        seen.push(check().await);
        tokio::task::block_in_place(|| cluster.hand_over(slot, nodes.1));
        seen.push(check().await);
        seen.push(check().await);
        assert_eq!(
            seen,
            ["true 4", "true 3", "true 2", "true 1", "true 0", "false 0"],
            "{name}"
        );
    }
}

/// redis-rs follows an `ASK` by sending `ASKING` as a request of its own on the importing
/// node's shared connection, where concurrent checks of a moved key would spend one
/// another's `ASKING`, bounce back with `MOVED` and time out, stalling checks of other slots
/// with them. With `ASKING` in the check's own pipeline, every check is decided and counted
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_of_a_moved_key_are_decided_while_its_slot_migrates() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = Arc::new(
        RedisClusterStore::builder(cluster.urls())
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap(),
    );
    let limits = [Limit::new(
        1_000,
        Window::from_secs(3600),
        Algorithm::SlidingWindow,
    )];
    let key = RouteKey::new("rl", "GET", "/feed", &[(IdentityPart::Ip, "203.0.113.7")]);
    let check = |store: Arc<RedisClusterStore>, key: RouteKey| async move {
        let request = CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: Some(T0 + 1_000),
        };
        store.check(request).await
    };
    check(store.clone(), key.clone())
        .await
        .expect("first check");
    let slot = support::key_slot(&key.limit_key(&limits[0]));
    tokio::task::block_in_place(|| {
        let nodes = cluster.begin_migration(slot);
        cluster.move_keys(slot, nodes);
    });
    let checks: Vec<_> = (0..200)
        .map(|_| tokio::spawn(check(store.clone(), key.clone())))
        .collect();
    let mut remaining = Vec::new();
    for checked in checks {
        match checked.await.unwrap() {
            Ok(decision) => remaining.push(decision.limits[0].remaining),
            Err(e) => panic!("a check of the moved key failed: {e}"),
        }
    }
    // Each counted exactly once, on the importing node: 998 down to 799.
    remaining.sort_unstable();
    assert_eq!(remaining, (799..=998).collect::<Vec<u32>>());
}

/// The usual way to grow a cluster: a master added after the store connected, slots
/// resharded onto it. While a slot migrates, its moved keys are decided on the new master,
/// whose connection redis-rs opens when the first `ASK` names it (a store following the
/// redirects itself would fail every such check), and after the hand-over too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_moving_to_a_master_added_later_are_decided_through_the_reshard() {
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let limits = [Limit::new(
        1_000,
        Window::from_secs(3600),
        Algorithm::SlidingWindow,
    )];
    let key = RouteKey::new("rl", "GET", "/feed", &[(IdentityPart::Ip, "203.0.113.7")]);
    let check = || async {
        let request = CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: Some(T0 + 1_000),
        };
        store.check(request).await.map(|d| d.limits[0].remaining)
    };
    assert_eq!(check().await.expect("first check"), 999);
    let slot = support::key_slot(&key.limit_key(&limits[0]));
    let new = tokio::task::block_in_place(|| cluster.add_master());
    let nodes = tokio::task::block_in_place(|| cluster.begin_migration_to(slot, new));
    tokio::task::block_in_place(|| cluster.move_keys(slot, nodes));
    let mut seen = Vec::new();
    for _ in 0..20 {
        seen.push(check().await.map_err(|e| e.to_string()));
    }
    tokio::task::block_in_place(|| cluster.hand_over(slot, new));
    for _ in 0..5 {
        seen.push(check().await.map_err(|e| e.to_string()));
    }
    let expected: Vec<Result<u32, String>> = (973..=998).rev().map(Ok).collect();
    assert_eq!(seen, expected[..25]);
}

/// A Cluster whose `default` user is off, reached as the least-privilege ACL user of
/// `guide::tls` (with `+cluster|slots +asking` for a Cluster): the seed's credentials reach
/// every master the slot map names, so checks of keys on every master are decided, alone
/// and stacked; a user without `+evalsha` is refused with the command named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_the_guides_commands_is_decided_on_every_master() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    const COMMANDS: &str = "+evalsha +eval +time +hincrby +hget +hmget +hkeys +hdel +pttl +pexpire +zadd +zcard +zcount +zscore +zrange +zrangebyscore +zrevrangebyscore +zrem +zremrangebyscore +zremrangebyrank +get +set +del +ping +cluster|slots +asking";
    for node in cluster.nodes() {
        let mut conn = node.connection();
        for rules in [
            format!("ratelimit on >secret ~rl:* {COMMANDS}"),
            // A user that cannot run the scripts.
            "noscripts on >secret ~rl:* +cluster|slots +ping".to_owned(),
            // The test's own view of the nodes once `default` is off.
            "admin on >admin ~* &* +@all".to_owned(),
            "default off".to_owned(),
        ] {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(rules.split_whitespace().collect::<Vec<_>>())
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("ACL SETUSER {rules}: {e}"));
        }
    }
    let as_user =
        |user: &str, node: &RedisServer| format!("redis://{user}:secret@127.0.0.1:{}", node.port());
    // One seed: the other masters are found through the slot map.
    let seed = &cluster.masters()[0];
    let store = RedisClusterStore::builder([as_user("ratelimit", seed)])
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let single = [Limit::new(3, Window::from_millis(60_000), Algorithm::Gcra)];
    for client in 0..60 {
        let ip = format!("198.51.100.{client}");
        let key = RouteKey::new("rl", "GET", "/acl", &[(IdentityPart::Ip, &ip)]);
        for limits in [&single[..], &limits()[..]] {
            let decision = crate::check_key(&store, &key, limits).await;
            assert!(decision.unwrap_or_else(|e| panic!("{ip}: {e}")).allowed);
        }
    }
    for (index, master) in cluster.masters().iter().enumerate() {
        let mut conn =
            redis::Client::open(format!("redis://admin:admin@127.0.0.1:{}", master.port()))
                .and_then(|c| c.get_connection())
                .unwrap();
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .unwrap();
        assert!(
            stats.contains("cmdstat_evalsha:calls="),
            "master {index} ran no script: {stats}"
        );
    }

    let refused = RedisClusterStore::builder([as_user("noscripts", seed)])
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let key = RouteKey::new("rl", "GET", "/acl", &[(IdentityPart::Ip, "198.51.100.1")]);
    let err = crate::check_key(&refused, &key, &single)
        .await
        .expect_err("a user without +evalsha decides nothing");
    assert_eq!(err.kind(), StoreErrorKind::Redis, "{err}");
    assert!(err.to_string().contains("evalsha"), "{err}");
}
