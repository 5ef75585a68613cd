//! One master of a Redis Cluster: its connection, and the breaker that fails its slots at
//! once while it does not answer.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use ::redis::{
    aio::MultiplexedConnection, AsyncConnectionConfig, Client, ErrorKind, RedisError, RedisResult,
};
use arc_swap::ArcSwapOption;

use super::slots::Address;

/// Checks in a row that found a master silent or unreachable (timeouts of the store's own
/// deadline, connection errors) before its breaker opens...
pub(super) const OPEN_AFTER: u32 = 3;

/// ...spread over at least this long: one stall shorter than this (a fork, a slow command)
/// with many checks in flight does not open it.
pub(super) const OPEN_SPAN: Duration = Duration::from_millis(100);

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
    /// Whether a connection is being made (in a task of its own, so that a check's timeout
    /// does not cut it short); checks wait for it within their own timeout.
    connecting: AtomicBool,
    /// Counts connection attempts that ended, and why the last one failed.
    attempts: tokio::sync::watch::Sender<u64>,
    last_error: Mutex<Option<RedisError>>,
    made: AtomicU64,
    /// Checks in a row that found it silent or unreachable, and when the first of them did.
    failures: AtomicU32,
    streak_started: Mutex<Option<Instant>>,
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
            connecting: AtomicBool::new(false),
            attempts: tokio::sync::watch::channel(0).0,
            last_error: Mutex::new(None),
            made: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            streak_started: Mutex::new(None),
            open: AtomicBool::new(false),
        }
    }

    /// The connection checks share; when there is none, one is made in the background and
    /// this waits for it (the caller's timeout bounds the wait). Fails when the attempt
    /// under way, or the one that ended since the call, failed.
    pub(super) async fn connection(self: &Arc<Self>) -> RedisResult<Arc<Held>> {
        if let Some(held) = self.connection.load_full() {
            return Ok(held);
        }
        let mut attempts = self.attempts.subscribe();
        attempts.borrow_and_update();
        self.connect_soon();
        loop {
            if let Some(held) = self.connection.load_full() {
                return Ok(held);
            }
            if attempts.changed().await.is_err() {
                break;
            }
            if let Some(held) = self.connection.load_full() {
                return Ok(held);
            }
            if !self.connecting.load(Ordering::Acquire) {
                break;
            }
        }
        Err(self
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .unwrap_or_else(|| {
                RedisError::from((ErrorKind::Io, "no connection to the Redis Cluster master"))
            }))
    }

    /// Starts making a connection in the background unless one is being made; outside a
    /// Tokio runtime, nothing.
    pub(super) fn connect_soon(self: &Arc<Self>) {
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.connecting.store(false, Ordering::Release);
            return;
        };
        let master = Arc::clone(self);
        runtime.spawn(async move {
            match master.connect().await {
                Ok(connection) => {
                    master.install(connection);
                }
                Err(error) => {
                    *master
                        .last_error
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(error);
                }
            }
            master.connecting.store(false, Ordering::Release);
            master.attempts.send_modify(|n| *n += 1);
        });
    }

    /// The connection now, if there is one.
    pub(super) fn current(&self) -> Option<Arc<Held>> {
        self.connection.load_full()
    }

    /// A new connection to this master, not yet used by checks (bounded by the configured
    /// connect timeout).
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

    /// A check found the master silent or unreachable; true when this opened the breaker
    /// ([`OPEN_AFTER`] in a row, the first [`OPEN_SPAN`] or more ago).
    pub(super) fn failed(&self) -> bool {
        let now = Instant::now();
        let mut started = self
            .streak_started
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures == 1 || started.is_none() {
            *started = Some(now);
        }
        let long_enough = started.is_some_and(|first| now.duration_since(first) >= OPEN_SPAN);
        failures >= OPEN_AFTER && long_enough && !self.open.swap(true, Ordering::AcqRel)
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
