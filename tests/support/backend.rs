//! The stores under test, each with a view into what it holds.

use std::{sync::Arc, time::Duration};

use ratelimit_runtime::{
    key::RouteKey,
    store::{
        CheckRequest, Decision, MemoryStore, RedisClusterStore, RedisStore, Store, StoredValue,
    },
    Algorithm, Limit,
};
use redis::{aio::ConnectionLike, FromRedisValue};

use super::{RedisCluster, RedisServer};

/// The window most tests use.
pub const W: u64 = 60_000;

/// A start of a `W` window, in Unix milliseconds (2023-11-14).
pub const T0: u64 = 1_700_000_040_000;

/// `(allowed, remaining, retry_after ms, reset_after ms)` of every limit of `decision`.
pub fn limit_states(decision: &Decision) -> Vec<(bool, u32, u64, u64)> {
    decision
        .limits
        .iter()
        .map(|s| {
            (
                s.allowed,
                s.remaining,
                s.retry_after.as_millis() as u64,
                s.reset_after.as_millis() as u64,
            )
        })
        .collect()
}

/// Generous: the conformance suite is about decisions, not latency, and the machine is shared.
const TIMEOUT: Duration = Duration::from_secs(2);

/// One store under test and its backing server(s).
pub enum Backend {
    /// `RedisStore` on a harness-started server.
    Standalone {
        server: RedisServer,
        store: Arc<RedisStore>,
        inspect: redis::aio::MultiplexedConnection,
    },
    /// `RedisClusterStore` on a harness-started 3-master cluster.
    Cluster {
        cluster: RedisCluster,
        store: Arc<RedisClusterStore>,
        inspect: redis::cluster_async::ClusterConnection,
    },
    /// `MemoryStore`.
    Memory { store: Arc<MemoryStore> },
}

impl Backend {
    /// A fresh server and a store on it.
    pub async fn standalone() -> Self {
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("start redis");
        let store = RedisStore::builder(server.url())
            .timeout(TIMEOUT)
            .build()
            .await
            .expect("build store");
        let inspect = server.async_connection().await;
        Backend::Standalone {
            server,
            store: Arc::new(store),
            inspect,
        }
    }

    /// A fresh Valkey server (`RedisServer::start_valkey`) and a `RedisStore` on it.
    pub async fn valkey() -> Self {
        let server = tokio::task::spawn_blocking(RedisServer::start_valkey)
            .await
            .expect("start valkey");
        let store = RedisStore::builder(server.url())
            .timeout(TIMEOUT)
            .build()
            .await
            .expect("build store");
        let inspect = server.async_connection().await;
        Backend::Standalone {
            server,
            store: Arc::new(store),
            inspect,
        }
    }

    /// A fresh 3-master cluster and a store on it.
    pub async fn cluster() -> Self {
        let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
            .await
            .expect("start cluster");
        let store = RedisClusterStore::builder(cluster.urls())
            .timeout(TIMEOUT)
            .build()
            .await
            .expect("build store");
        let inspect = redis::cluster::ClusterClient::new(cluster.urls())
            .expect("cluster client")
            .get_async_connection()
            .await
            .expect("connect to test cluster");
        Backend::Cluster {
            cluster,
            store: Arc::new(store),
            inspect,
        }
    }

    /// A fresh in-memory store.
    pub fn memory() -> Self {
        Backend::Memory {
            store: Arc::new(MemoryStore::new()),
        }
    }

    /// The store, to share with spawned tasks.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Backend::Standalone { store, .. } => store.clone(),
            Backend::Cluster { store, .. } => store.clone(),
            Backend::Memory { store } => store.clone(),
        }
    }

    /// Whether the backend is Redis (standalone or cluster).
    pub fn is_redis(&self) -> bool {
        !matches!(self, Backend::Memory { .. })
    }

    /// One check at `now` (`None`: the store's clock); panics on a store error.
    pub async fn check_at(&self, key: &RouteKey, limits: &[Limit], now: Option<u64>) -> Decision {
        let request = CheckRequest {
            key,
            limits,
            now_millis: now,
        };
        let store = self.store();
        store
            .check(request)
            .await
            .unwrap_or_else(|e| panic!("{} store failed: {e}", store.kind()))
    }

    /// One check at the injected time `now`.
    pub async fn check(&self, key: &RouteKey, limits: &[Limit], now: u64) -> Decision {
        self.check_at(key, limits, Some(now)).await
    }

    /// How many requests `limit`'s stored state has counted at `now`: the current window's
    /// counter, the log's size, or the GCRA backlog in emission intervals.
    pub async fn counted(&self, key: &RouteKey, limit: &Limit, now: u64) -> u64 {
        let stem = key.limit_key(limit);
        let window = limit.window().as_millis();
        let window_start = now - now % window;
        let value: Option<StoredValue> = match self {
            // As in Redis: one entry per limit, window counters in it by window start.
            Backend::Memory { store } => store.entry(&stem, now).map(|e| e.value),
            _ => match limit.algorithm() {
                Algorithm::SlidingLog => {
                    let n: u64 = self.query(redis::cmd("ZCARD").arg(&stem)).await;
                    Some(StoredValue::Log(
                        std::iter::repeat_n(0, n as usize).collect(),
                    ))
                }
                Algorithm::Gcra => {
                    let tat: Option<String> = self.query(redis::cmd("GET").arg(&stem)).await;
                    tat.map(|t| {
                        StoredValue::Tat(
                            t.parse()
                                .unwrap_or_else(|_| panic!("TAT `{t}` is an integer")),
                        )
                    })
                }
                // A hash at the key, one field per window start.
                _ => {
                    let hget = redis::cmd("HGET").arg(&stem).arg(window_start).clone();
                    let n: Option<u64> = self.query(&hget).await;
                    n.map(|n| StoredValue::Windows(vec![(window_start, n)]))
                }
            },
        };
        match value {
            None => 0,
            Some(value @ StoredValue::Windows(_)) => value.window(window_start),
            Some(StoredValue::Log(log)) => log.len() as u64,
            Some(StoredValue::Tat(tat)) => {
                let interval = (window * 1000 / u64::from(limit.max())).max(1);
                let backlog = tat.saturating_sub(now * 1000);
                assert_eq!(
                    backlog % interval,
                    0,
                    "TAT {tat} is a whole number of intervals past {now}"
                );
                backlog / interval
            }
            Some(other) => panic!("a limit's key holds {other:?}"),
        }
    }

    /// Every stored key with its remaining time to live in ms at `now` (-1: none), and for
    /// Redis the node index it lives on.
    pub async fn ttls(&self, now: u64) -> Vec<(String, i64, usize)> {
        match self {
            Backend::Memory { store } => store
                .entries()
                .into_iter()
                .map(|(key, entry)| (key, entry.expires_at as i64 - now as i64, 0))
                .collect(),
            Backend::Standalone { server, .. } => node_ttls(server, 0).await,
            Backend::Cluster { cluster, .. } => {
                let mut all = Vec::new();
                for (i, node) in cluster.masters().iter().enumerate() {
                    all.extend(node_ttls(node, i).await);
                }
                all
            }
        }
    }

    /// Runs `command` on every Redis node (nothing for memory).
    pub async fn on_every_node(&self, command: &redis::Cmd) -> Vec<redis::Value> {
        let nodes: Vec<&RedisServer> = match self {
            Backend::Memory { .. } => Vec::new(),
            Backend::Standalone { server, .. } => vec![server],
            Backend::Cluster { cluster, .. } => cluster.nodes().collect(),
        };
        let mut replies = Vec::new();
        for node in nodes {
            let mut conn = node.async_connection().await;
            replies.push(
                command
                    .query_async(&mut conn)
                    .await
                    .expect("command on node"),
            );
        }
        replies
    }

    /// A command routed like the store routes (by key on a cluster).
    pub async fn query<T: FromRedisValue>(&self, command: &redis::Cmd) -> T {
        match self {
            Backend::Standalone { inspect, .. } => run(inspect.clone(), command).await,
            Backend::Cluster { inspect, .. } => run(inspect.clone(), command).await,
            Backend::Memory { .. } => panic!("no Redis behind the memory store"),
        }
    }

    /// The end-of-test checks every test runs: on a cluster, no node ever answered
    /// `CROSSSLOT`.
    pub async fn finish(self) {
        if let Backend::Cluster { .. } = &self {
            let mut info = redis::cmd("INFO");
            info.arg("errorstats");
            for reply in self.on_every_node(&info).await {
                let text = String::from_redis_value(reply).expect("INFO is text");
                assert!(
                    !text.contains("CROSSSLOT"),
                    "a node answered CROSSSLOT:\n{text}"
                );
            }
        }
    }
}

async fn run<C: ConnectionLike, T: FromRedisValue>(mut conn: C, command: &redis::Cmd) -> T {
    command
        .query_async(&mut conn)
        .await
        .expect("inspection command")
}

async fn node_ttls(node: &RedisServer, index: usize) -> Vec<(String, i64, usize)> {
    let mut conn = node.async_connection().await;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut ttls = Vec::new();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("PTTL");
        ttls.push((key, ttl, index));
    }
    ttls
}
