//! The standalone Redis store: one multiplexed connection per actix worker.

use std::{fmt, sync::Arc, time::Duration};

use ::redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client,
};

use super::{
    coalesce::{Coalescer, Sharing},
    config_error::{redact, StoreConfigError},
    link::{self, Link, Linked, Opening},
    script::BatchOutcome,
    AdjustFuture, AdjustRequest, CheckFuture, CheckRequest, Store,
};

/// How long one check may take, fallback and retry included, unless configured otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// How long one connection attempt may take, unless configured otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Counters in one Redis server (or a primary behind a failover proxy).
///
/// Every check is one `EVALSHA` of its check script (its algorithm's own for one limit, the
/// general one for a stack) over a multiplexed connection that reconnects by itself, or
/// shares one: checks of one key (a limit or a stack of one identity, every limit counting
/// every request, none with a `block`) that arrive while a check of it is in flight go
/// together in the next call, which the script answers
/// with how many of them pass, in the order they arrived. A check never waits longer than
/// the configured timeout, or the deprecated `RateLimiter::timeout` when that is set. Build one per process
/// and share it: clones share the connection, and under [`RateLimiter`](crate::RateLimiter)
/// each actix worker opens one of its own (see [`Store::worker_store`]), so a process holds
/// one connection per worker plus this one.
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
    link: Arc<Link<ConnectionManager>>,
    /// Concurrent checks of one key sharing one call (each worker store its own).
    coalescer: Arc<Coalescer>,
    timeout: Duration,
    /// Shared by clones: a shared call's task holds a clone, which must cost no copy.
    server: Arc<Server>,
}

/// What another connection to the same server is opened from.
struct Server {
    url: String,
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
            .field("url", &redact(&self.server.url))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Store for RedisStore {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        self.check_within(request, self.timeout)
    }

    fn check_within<'a>(&'a self, request: CheckRequest<'a>, timeout: Duration) -> CheckFuture<'a> {
        if Coalescer::shares(&request) {
            return Box::pin(self.coalescer.check(self, request, timeout));
        }
        Box::pin(link::check(self, request, timeout))
    }

    fn reserve<'a>(&'a self, request: CheckRequest<'a>, wait: Duration) -> CheckFuture<'a> {
        self.reserve_within(request, wait, self.timeout)
    }

    fn reserve_within<'a>(
        &'a self,
        request: CheckRequest<'a>,
        wait: Duration,
        timeout: Duration,
    ) -> CheckFuture<'a> {
        Box::pin(link::reserve(self, request, wait, timeout))
    }

    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        Box::pin(link::adjust(self, request, self.timeout))
    }

    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        Box::pin(link::peek(self, request, self.timeout))
    }

    fn bans(&self) -> bool {
        true
    }

    fn take_share<'a>(
        &'a self,
        request: CheckRequest<'a>,
        units: u32,
    ) -> Option<super::ShareFuture<'a>> {
        Some(super::coalesce::take_share(
            self,
            request,
            units,
            self.timeout,
        ))
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn worker_store(&self) -> Option<Arc<dyn Store>> {
        tokio::runtime::Handle::try_current().ok()?;
        let connection = connect(&self.server.client, &self.server.config).ok()?;
        Some(Arc::new(RedisStore {
            link: Arc::new(Link::new(connection)),
            coalescer: Arc::default(),
            ..self.clone()
        }))
    }
}

impl Sharing for RedisStore {
    fn coalescer(&self) -> &Coalescer {
        &self.coalescer
    }

    fn check_alone<'a>(
        &'a self,
        request: CheckRequest<'a>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<super::Decision, super::StoreError>> + Send + 'a
    {
        link::check(self, request, timeout)
    }

    fn check_together<'a>(
        &'a self,
        request: CheckRequest<'a>,
        units: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<BatchOutcome, super::StoreError>> + Send + 'a
    {
        link::check_batch(self, request, units, timeout)
    }
}

impl Linked for RedisStore {
    type Connection = ConnectionManager;

    fn link(&self) -> &Arc<Link<ConnectionManager>> {
        &self.link
    }

    fn reconnect(&self) -> Opening<ConnectionManager> {
        let (client, config) = (self.server.client.clone(), self.server.config.clone());
        Box::pin(async move {
            let fresh = ConnectionManager::new_with_config(client, config).await?;
            Self::answers(fresh.clone()).await?;
            Ok(fresh)
        })
    }

    fn probe_timeout(&self) -> Duration {
        link::PROBE_TIMEOUT
    }

    fn answers(mut connection: ConnectionManager) -> Opening<()> {
        Box::pin(async move {
            link::answered(
                ::redis::cmd("PING")
                    .query_async::<()>(&mut connection)
                    .await,
            )
        })
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
#[derive(Clone)]
#[must_use]
pub struct RedisStoreBuilder {
    url: String,
    timeout: Duration,
    connect_timeout: Duration,
    tls_root: Option<Vec<u8>>,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redact(&self.url))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_root", &self.tls_root.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RedisStoreBuilder {
    /// The longest one check may take, fallback and retry included (default 50 ms), unless
    /// the deprecated `RateLimiter::timeout` is set. A check that takes longer fails with a
    /// [`Timeout`](super::StoreErrorKind::Timeout) error.
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
    /// checks fail until Redis answers (with timeout errors: each waits for the connection
    /// up to its timeout), and the store reconnects by itself after Redis comes back. A
    /// certificate the CA does not verify shows the same way: `redis-cli --tls` tells why.
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// When the URL is malformed, names a user without a password or asks for `#insecure`
    /// TLS, the CA given to [`tls_root_certificate`](Self::tls_root_certificate) holds no PEM
    /// certificate, or a timeout is under 1 ms.
    pub async fn build(self) -> Result<RedisStore, StoreConfigError> {
        StoreConfigError::check_timeouts("RedisStore", self.timeout, self.connect_timeout)?;
        super::tls::ensure_crypto_provider();
        let client = super::tls::client(self.url.as_str(), self.tls_root.as_deref())
            .map_err(|err| StoreConfigError::for_url(&self.url, err))?;
        StoreConfigError::check_user_has_password(&self.url, client.get_connection_info())?;
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
            coalescer: Arc::default(),
            timeout: self.timeout,
            server: Arc::new(Server {
                url: self.url,
                client,
                config,
            }),
        })
    }
}
