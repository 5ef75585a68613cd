//! The standalone Redis store: one multiplexed connection per actix worker.

use std::{
    fmt,
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc, Mutex, RwLock,
    },
    time::{Duration, Instant},
};

use ::redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client,
};

use super::{
    config_error::{redact, StoreConfigError},
    script_call, CheckFuture, CheckRequest, Store, StoreErrorKind,
};

/// How long one check may take, fallback and retry included, unless configured otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// How long one connection attempt may take, unless configured otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Counters in one Redis server (or a primary behind a failover proxy).
///
/// Every check is one `EVALSHA` of its check script ([`check_script`](super::check_script))
/// over a multiplexed connection that reconnects by itself; a check never waits longer than
/// the configured timeout. Build one per process and share it: clones share the connection,
/// and under [`RateLimiter`](crate::RateLimiter) each actix worker opens one of its own
/// (see [`Store::worker_store`]), so a process holds one connection per worker plus this one.
///
/// ```no_run
/// # async fn run() -> Result<(), ratelimit_runtime::store::StoreConfigError> {
/// use std::time::Duration;
/// use ratelimit_runtime::store::RedisStore;
///
/// let store = RedisStore::builder("rediss://app:secret@cache.internal:6380")
///     .timeout(Duration::from_millis(30))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    link: Arc<Link>,
    timeout: Duration,
    url: String,
    /// What another connection to the same server is opened from.
    client: Client,
    config: ConnectionManagerConfig,
}

impl RedisStore {
    /// A builder for a store at `url`: `redis://[user:password@]host[:port][/db]`, or
    /// `rediss://` for TLS.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls_root: None,
        }
    }

    /// The per-check timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &redact(&self.url))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Store for RedisStore {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        let (generation, connection) = self.link.current();
        Box::pin(async move {
            let mut watch = Watch {
                store: self,
                generation,
                ended: false,
            };
            let checked = script_call::check(connection, request, self.timeout).await;
            watch.ended = true;
            let timed_out = matches!(&checked, Err(e) if e.kind() == StoreErrorKind::Timeout);
            self.link.observe(generation, timed_out, self);
            checked
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn worker_store(&self) -> Option<Arc<dyn Store>> {
        tokio::runtime::Handle::try_current().ok()?;
        let connection = connect(&self.client, &self.config).ok()?;
        Some(Arc::new(RedisStore {
            link: Arc::new(Link::new(connection)),
            ..self.clone()
        }))
    }
}

/// Checks that time out in a row before a connection counts as stalled.
const STALLED_AFTER: u32 = 3;

/// How long after a connection was made, or a probe failed, the first probe for a new
/// connection waits; it doubles after each failed probe, up to [`PROBE_BACKOFF_MAX`].
const PROBE_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two probes while checks keep timing out.
const PROBE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long a probe may take to connect and have its `PING` answered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A store's connection, replaced when it stalls. The connection manager reconnects by
/// itself when the connection errors, but not when it merely stops answering: the path to
/// Redis may drop packets without a reset (a failover moved the address, a NAT or conntrack
/// entry was dropped, a proxy hung), and the kernel would retransmit for a quarter of an
/// hour while every check ran into its timeout. After [`STALLED_AFTER`] timeouts in a row a
/// probe opens a new connection in the background; it takes the old one's place only if its
/// `PING` is answered, so a Redis that is busy rather than unreachable (a slow command, a
/// fork, `CLIENT PAUSE`) keeps its connections, and is probed less and less often.
struct Link {
    /// The connection, and how many have come before it.
    connection: RwLock<(u64, ConnectionManager)>,
    /// That count, to compare without the lock.
    generation: AtomicU64,
    /// Checks on the current connection that timed out in a row.
    stalled: AtomicU32,
    probe: Mutex<Probe>,
}

struct Probe {
    /// Whether one is under way.
    running: bool,
    /// No probe starts before.
    not_before: Instant,
    /// The wait after the next failed probe.
    backoff: Duration,
}

impl Link {
    fn new(connection: ConnectionManager) -> Self {
        Link {
            connection: RwLock::new((0, connection)),
            generation: AtomicU64::new(0),
            stalled: AtomicU32::new(0),
            probe: Mutex::new(Probe {
                running: false,
                not_before: Instant::now() + PROBE_BACKOFF,
                backoff: PROBE_BACKOFF,
            }),
        }
    }

    /// The connection to check on, and its generation.
    fn current(&self) -> (u64, ConnectionManager) {
        match self.connection.read() {
            Ok(connection) => connection.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    fn probe_state(&self) -> std::sync::MutexGuard<'_, Probe> {
        self.probe
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts how a check on connection `generation` ended; a timeout also when the check
    /// was given up before it ended (a caller's shorter timer dropped it). Results from a
    /// connection already replaced do not count.
    fn observe(self: &Arc<Self>, generation: u64, timed_out: bool, store: &RedisStore) {
        if generation != self.generation() {
            return;
        }
        if !timed_out {
            if self.stalled.load(Ordering::Relaxed) != 0 {
                self.stalled.store(0, Ordering::Relaxed);
                self.probe_state().backoff = PROBE_BACKOFF;
            }
            return;
        }
        if self.stalled.fetch_add(1, Ordering::Relaxed) + 1 < STALLED_AFTER {
            return;
        }
        {
            let mut probe = self.probe_state();
            if probe.running || Instant::now() < probe.not_before {
                return;
            }
            probe.running = true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.probe_state().running = false;
            return;
        };
        let link = Arc::clone(self);
        let (client, config) = (store.client.clone(), store.config.clone());
        runtime.spawn(async move {
            let fresh = tokio::time::timeout(PROBE_TIMEOUT, async {
                let mut fresh = ConnectionManager::new_with_config(client, config).await?;
                ::redis::cmd("PING").query_async::<()>(&mut fresh).await?;
                Ok::<_, ::redis::RedisError>(fresh)
            })
            .await;
            let mut probe = link.probe_state();
            probe.running = false;
            match fresh {
                Ok(Ok(fresh)) => {
                    tracing::warn!(
                        target: "ratelimit",
                        "rate-limit store: checks kept timing out on the Redis connection while a new one answers; using the new one"
                    );
                    let mut connection = match link.connection.write() {
                        Ok(connection) => connection,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    *connection = (connection.0 + 1, fresh);
                    link.generation.store(connection.0, Ordering::Relaxed);
                    link.stalled.store(0, Ordering::Relaxed);
                    probe.backoff = PROBE_BACKOFF;
                    probe.not_before = Instant::now() + PROBE_BACKOFF;
                }
                // Redis does not answer a new connection either: it is busy or down, and
                // another connection would not help. Wait longer before trying again.
                Ok(Err(_)) | Err(_) => {
                    probe.not_before = Instant::now() + probe.backoff;
                    probe.backoff = (probe.backoff * 2).min(PROBE_BACKOFF_MAX);
                }
            }
        });
    }
}

/// Reports a check that was given up before it ended (dropped by a caller's timer) as a
/// timeout of its connection.
struct Watch<'a> {
    store: &'a RedisStore,
    generation: u64,
    ended: bool,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.store.link.observe(self.generation, true, self.store);
        }
    }
}

/// A connection made in the background on the calling thread's Tokio runtime: a first
/// `PING` starts it, so the first check does not wait for it. Panics outside a runtime.
fn connect(
    client: &Client,
    config: &ConnectionManagerConfig,
) -> ::redis::RedisResult<ConnectionManager> {
    let connection = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
    let mut warm_up = connection.clone();
    tokio::spawn(async move {
        let _ = ::redis::cmd("PING").query_async::<()>(&mut warm_up).await;
    });
    Ok(connection)
}

/// Configures a [`RedisStore`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisStoreBuilder {
    url: String,
    timeout: Duration,
    connect_timeout: Duration,
    tls_root: Option<Vec<u8>>,
}

impl RedisStoreBuilder {
    /// The longest one check may take, fallback and retry included (default 50 ms). A
    /// check that takes longer fails with a [`Timeout`](super::StoreErrorKind::Timeout) error.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest one connection attempt may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts this CA (PEM) for `rediss://` instead of the system trust store, for a Redis
    /// whose certificate a private CA signed.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// Builds the store. It never waits for Redis: the connection is made in the background,
    /// checks fail with connection or timeout errors until Redis answers, and the store
    /// reconnects by itself after Redis comes back.
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// When the URL is malformed.
    pub async fn build(self) -> Result<RedisStore, StoreConfigError> {
        super::tls::ensure_crypto_provider();
        let client = match &self.tls_root {
            None => Client::open(self.url.as_str()),
            Some(pem) => Client::build_with_tls(self.url.as_str(), super::tls::private_ca(pem)),
        }
        .map_err(|err| StoreConfigError::for_url(&self.url, err))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        let connection =
            connect(&client, &config).map_err(|err| StoreConfigError::for_url(&self.url, err))?;
        Ok(RedisStore {
            link: Arc::new(Link::new(connection)),
            timeout: self.timeout,
            url: self.url,
            client,
            config,
        })
    }
}
