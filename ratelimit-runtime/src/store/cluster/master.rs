//! One master of a Redis Cluster: its connection, and the breaker that fails its slots at
//! once while it does not answer.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use ::redis::{aio::MultiplexedConnection, AsyncConnectionConfig, Client, RedisResult};
use arc_swap::ArcSwapOption;

use super::slots::Address;

/// Checks in a row that found a master silent or unreachable (timeouts, connection errors)
/// before its breaker opens.
pub(super) const OPEN_AFTER: u32 = 3;

/// A master's connection, numbered so that an error drops that connection and not a newer
/// one.
pub(super) struct Held {
    pub(super) id: u64,
    pub(super) connection: MultiplexedConnection,
}

/// A master by its address, with its own connection: nothing done for one master waits on
/// another's.
pub(super) struct Master {
    pub(super) address: Address,
    client: Client,
    config: AsyncConnectionConfig,
    connection: ArcSwapOption<Held>,
    /// One connection attempt at a time; checks that find none wait for it.
    connecting: tokio::sync::Mutex<()>,
    made: AtomicU64,
    /// Checks in a row that found it silent or unreachable.
    failures: AtomicU32,
    /// Whether its slots fail at once.
    open: AtomicBool,
}

impl Master {
    pub(super) fn new(address: Address, client: Client, config: AsyncConnectionConfig) -> Self {
        Master {
            address,
            client,
            config,
            connection: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
            made: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            open: AtomicBool::new(false),
        }
    }

    /// The connection checks share, made now if there is none.
    pub(super) async fn connection(&self) -> RedisResult<Arc<Held>> {
        if let Some(held) = self.connection.load_full() {
            return Ok(held);
        }
        let _gate = self.connecting.lock().await;
        if let Some(held) = self.connection.load_full() {
            return Ok(held);
        }
        let connection = self.connect().await?;
        Ok(self.install(connection))
    }

    /// The connection now, if there is one.
    pub(super) fn current(&self) -> Option<Arc<Held>> {
        self.connection.load_full()
    }

    /// A new connection to this master, not yet used by checks.
    pub(super) async fn connect(&self) -> RedisResult<MultiplexedConnection> {
        self.client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
    }

    /// Makes `connection` the one checks use.
    pub(super) fn install(&self, connection: MultiplexedConnection) -> Arc<Held> {
        let held = Arc::new(Held {
            id: self.made.fetch_add(1, Ordering::Relaxed),
            connection,
        });
        self.connection.store(Some(Arc::clone(&held)));
        held
    }

    /// Drops connection `id` (it failed): the next check makes a new one.
    pub(super) fn drop_connection(&self, id: u64) {
        self.connection.rcu(|current| match current {
            Some(held) if held.id == id => None,
            other => other.clone(),
        });
    }

    /// A check was answered (whatever the answer): the master is reachable.
    pub(super) fn answered(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A check found the master silent or unreachable; true when this opened the breaker.
    pub(super) fn failed(&self) -> bool {
        self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= OPEN_AFTER
            && !self.open.swap(true, Ordering::AcqRel)
    }

    /// Whether its slots fail at once.
    pub(super) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Its slots are checked again.
    pub(super) fn close(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Release);
    }
}

/// The configuration of every master's connection: `connect` to make one, replies within
/// `response` (a caller's own timeout ends a check sooner).
pub(super) fn connection_config(connect: Duration, response: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response))
}
