//! A worker busy past a call's deadline (a long handler on its thread, the process
//! descheduled) while Redis answered in time gets the answer, not a timeout: the answer
//! already waiting on the connection is taken before the deadline is, on a standalone Redis,
//! a Cluster and a Sentinel primary alike.

use std::time::Duration;

use ratelimit_runtime::store::{
    CheckRequest, RedisClusterStore, RedisSentinelStore, RedisStore, Store,
};

use crate::{
    limits, login,
    support::{RedisCluster, RedisServer, SentinelSetup, MASTER_NAME},
};

const TIMEOUT: Duration = Duration::from_millis(50);

/// Five checks, each sent before the worker's thread is held three timeouts long (as a
/// handler computing on it would hold it) while Redis answers: each is a decision.
async fn answered_while_busy(store: &dyn Store) {
    let (key, limits) = (login(), limits());
    let check = || {
        store.check(CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: None,
        })
    };
    // Connected, and the script loaded: each check below is one round trip.
    check().await.expect("a decision");
    for round in 0..5 {
        let busy = async {
            // The check's command goes out first.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            std::thread::sleep(3 * TIMEOUT);
        };
        let (checked, ()) = tokio::join!(check(), busy);
        if let Err(error) = checked {
            panic!("round {round}: answered by Redis while the worker was busy, yet: {error}");
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_that_came_while_the_worker_was_busy_is_not_a_timeout() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let store = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    answered_while_busy(&store).await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_that_came_while_the_worker_was_busy_is_not_a_timeout_in_a_cluster() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap();
    let store = RedisClusterStore::builder(cluster.urls())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    answered_while_busy(&store).await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_that_came_while_the_worker_was_busy_is_not_a_timeout_on_a_sentinel_primary() {
    let setup = tokio::task::spawn_blocking(SentinelSetup::start)
        .await
        .unwrap();
    let store = RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    answered_while_busy(&store).await;
}
