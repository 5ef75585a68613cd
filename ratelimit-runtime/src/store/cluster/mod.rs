//! The Redis Cluster store: the same script, sent to the master of its key's slot.
//!
//! Every key of one check carries the route key's hash tag, so they all live in one slot:
//! `EVALSHA` goes to the master that owns it and never meets `CROSSSLOT`. The store routes
//! each call itself, over one connection per master (see `router`), so that a master that
//! stops answering costs only its own slots.

mod master;
mod router;
mod slots;
mod split;

use std::{
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use ::redis::IntoConnectionInfo;

use self::{
    master::connection_config,
    router::{Reach, Routed, Router},
    slots::Address,
};
use super::{
    coalesce::{Coalescer, Sharing},
    config_error::{redact, StoreConfigError},
    redis::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT},
    script::BatchOutcome,
    script_call, AdjustFuture, AdjustRequest, CheckFuture, CheckRequest, Decision, Store,
    StoreError,
};

/// Counters in a Redis Cluster.
///
/// The store reads the slot map itself and sends each check to the master of its key's slot
/// over that master's own multiplexed connection, following `MOVED` and `ASK` redirects
/// (connecting to a master it did not know, such as one added by a reshard). A check never
/// waits longer than the configured timeout, or the deprecated `RateLimiter::timeout` when that is set (at
/// most the longer of the connect timeout and the configured one).
///
/// A master that stops answering costs only its own slots: after 3 checks in a row, over at
/// least 100 ms, that found it silent or unreachable (their timeout passed, or the
/// connection failed), the checks of its slots fail at once, each route per its fail mode,
/// and no other check waits on it. Every 250 ms
/// meanwhile the slot map is read again from the other nodes and the master's address is
/// sent a `PING` (the first at once): its slots are checked again as soon as the map names
/// another master for them (its replica was promoted) or the address answers. A master that
/// is only busy (a slow command) answers the `PING` when it is done and keeps its
/// connection. Connections are made in the background (to every master of a new slot map,
/// and to a node a redirect names); a check waits for one at most its own timeout.
///
/// Concurrent checks of one key share calls, as with [`RedisStore`](super::RedisStore).
/// Build one per process and share it: clones share the connections, and under
/// [`RateLimiter`](crate::RateLimiter) each actix worker opens its own (see
/// [`Store::worker_store`]).
///
/// ```no_run
/// # async fn run() -> Result<(), ratelimit_runtime::store::StoreConfigError> {
/// use ratelimit_runtime::store::RedisClusterStore;
///
/// let store = RedisClusterStore::builder(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisClusterStore {
    router: Arc<Router>,
    /// Concurrent checks of one key sharing one call (each worker store its own).
    coalescer: Arc<Coalescer>,
    timeout: Duration,
    /// The longest a check waits, whatever the deprecated `RateLimiter::timeout` says: less than the
    /// connections' response timeout.
    check_limit: Duration,
    /// The seed URLs, for its `Debug` (shared by clones, which a shared call's task holds).
    nodes: Arc<[String]>,
}

impl RedisClusterStore {
    /// A builder for a store on the cluster reachable through `nodes` (one or more seed
    /// URLs, all with the same credentials; `rediss://` for TLS).
    pub fn builder<I, S>(nodes: I) -> RedisClusterStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisClusterStoreBuilder {
            nodes: nodes.into_iter().map(Into::into).collect(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls_root: None,
        }
    }

    /// The per-check timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// One check of `request`'s limits, all counting one identity (their keys share a slot).
    async fn check_one(
        &self,
        request: CheckRequest<'_>,
        timeout: Duration,
    ) -> Result<Decision, StoreError> {
        let routed = Routed {
            router: &self.router,
            deadline: Some(Instant::now() + timeout),
        };
        script_call::check(routed, request, timeout).await
    }

    async fn adjust_one(
        &self,
        request: AdjustRequest<'_>,
        timeout: Duration,
    ) -> Result<u64, StoreError> {
        let routed = Routed {
            router: &self.router,
            deadline: None,
        };
        script_call::adjust(routed, request, timeout).await
    }
}

impl Sharing for RedisClusterStore {
    fn coalescer(&self) -> &Coalescer {
        &self.coalescer
    }

    fn check_alone<'a>(
        &'a self,
        request: CheckRequest<'a>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Decision, StoreError>> + Send + 'a {
        self.check_one(request, timeout)
    }

    fn check_together<'a>(
        &'a self,
        request: CheckRequest<'a>,
        units: u32,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<BatchOutcome, StoreError>> + Send + 'a {
        let routed = Routed {
            router: &self.router,
            deadline: Some(Instant::now() + timeout),
        };
        script_call::check_batch(routed, request, units, timeout)
    }
}

impl fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|url| redact(url)).collect();
        f.debug_struct("RedisClusterStore")
            .field("nodes", &nodes)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Store for RedisClusterStore {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        self.check_within(request, self.timeout)
    }

    fn check_within<'a>(&'a self, request: CheckRequest<'a>, timeout: Duration) -> CheckFuture<'a> {
        let timeout = timeout.min(self.check_limit);
        if request.key.spans_identities(request.limits) {
            return Box::pin(split::check(self, request, timeout));
        }
        if Coalescer::shares(&request) {
            return Box::pin(self.coalescer.check(self, request, timeout));
        }
        Box::pin(self.check_one(request, timeout))
    }

    fn reserve<'a>(&'a self, request: CheckRequest<'a>, wait: Duration) -> CheckFuture<'a> {
        self.reserve_within(request, wait, self.timeout)
    }

    /// A stack whose limits count different identities (keys in two slots) is checked
    /// without waiting: a reservation decides one time for all its limits in one call.
    fn reserve_within<'a>(
        &'a self,
        request: CheckRequest<'a>,
        wait: Duration,
        timeout: Duration,
    ) -> CheckFuture<'a> {
        let timeout = timeout.min(self.check_limit);
        if request.key.spans_identities(request.limits) {
            return Box::pin(split::check(self, request, timeout));
        }
        let routed = Routed {
            router: &self.router,
            deadline: Some(Instant::now() + timeout),
        };
        Box::pin(script_call::reserve(routed, request, wait, timeout))
    }

    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        if request.key.spans_identities(request.limits) {
            return Box::pin(split::adjust(self, request, self.timeout));
        }
        Box::pin(self.adjust_one(request, self.timeout))
    }

    /// One identity's limits at a time (their keys share one slot).
    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        let routed = Routed {
            router: &self.router,
            deadline: None,
        };
        Box::pin(script_call::peek(routed, request, self.timeout))
    }

    fn bans(&self) -> bool {
        true
    }

    fn take_share<'a>(
        &'a self,
        request: CheckRequest<'a>,
        units: u32,
    ) -> Option<crate::store::ShareFuture<'a>> {
        Some(crate::store::coalesce::take_share(
            self,
            request,
            units,
            self.timeout,
        ))
    }

    fn kind(&self) -> &'static str {
        "redis-cluster"
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn worker_store(&self) -> Option<Arc<dyn Store>> {
        tokio::runtime::Handle::try_current().ok()?;
        let router = self.router.fork().ok()?;
        router.refresh_soon();
        Some(Arc::new(RedisClusterStore {
            router,
            coalescer: Arc::default(),
            ..self.clone()
        }))
    }
}

/// Configures a [`RedisClusterStore`].
#[derive(Clone)]
#[must_use]
pub struct RedisClusterStoreBuilder {
    nodes: Vec<String>,
    timeout: Duration,
    connect_timeout: Duration,
    tls_root: Option<Vec<u8>>,
}

impl fmt::Debug for RedisClusterStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|url| redact(url)).collect();
        f.debug_struct("RedisClusterStoreBuilder")
            .field("nodes", &nodes)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_root", &self.tls_root.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RedisClusterStoreBuilder {
    /// The longest one check may take, redirects and retries included (default 50 ms),
    /// unless the deprecated `RateLimiter::timeout` is set (then at most the longer of this and the connect
    /// timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest one connection attempt to a node may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts this CA (PEM) for `rediss://` nodes instead of the system trust store.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// Builds the store without waiting for the cluster: connections are made in the
    /// background, and checks fail with connection or timeout errors until it answers.
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// When there is no node, a URL is malformed, names a user without a password or asks
    /// for `#insecure` TLS, the nodes' credentials differ, the CA given to
    /// [`tls_root_certificate`](Self::tls_root_certificate) holds no PEM certificate, or a
    /// timeout is under 1 ms.
    pub async fn build(self) -> Result<RedisClusterStore, StoreConfigError> {
        if self.nodes.is_empty() {
            return Err(StoreConfigError::new(
                "a redis cluster store needs at least one node url",
            ));
        }
        StoreConfigError::check_timeouts("RedisClusterStore", self.timeout, self.connect_timeout)?;
        // Every node is reached with the first seed's credentials: the seeds must all name
        // the same ones, or some node would be sent credentials its URL did not give.
        let mut credentials = None;
        for url in &self.nodes {
            let Ok(info) = ::redis::IntoConnectionInfo::into_connection_info(url.as_str()) else {
                continue; // Malformed: reported below, with redis-rs's reason.
            };
            StoreConfigError::check_user_has_password(url, &info)?;
            // No user is the `default` user.
            let these = (
                info.redis_settings()
                    .username()
                    .filter(|user| *user != "default")
                    .map(str::to_owned),
                info.redis_settings().password().map(str::to_owned),
            );
            match &credentials {
                None => credentials = Some(these),
                Some(first) if *first != these => {
                    let nodes: Vec<String> = self.nodes.iter().map(|url| redact(url)).collect();
                    return Err(StoreConfigError::new(format!(
                        "the redis cluster node urls `{}` name different users or passwords: \
                         every node url must name the same ones",
                        nodes.join(",")
                    )));
                }
                Some(_) => {}
            }
        }
        super::tls::ensure_crypto_provider();
        let mut seeds = Vec::with_capacity(self.nodes.len());
        let mut template = None;
        for url in &self.nodes {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|err| StoreConfigError::for_url(url, err))?;
            let address = match info.addr() {
                ::redis::ConnectionAddr::Tcp(host, port)
                | ::redis::ConnectionAddr::TcpTls { host, port, .. } => Address {
                    host: host.clone(),
                    port: *port,
                },
                _ => {
                    return Err(StoreConfigError::new(format!(
                        "the redis cluster node url `{}` is not a TCP address",
                        redact(url)
                    )))
                }
            };
            // Refused now what would fail only once connecting (`tls::client`).
            super::tls::client(info.clone(), self.tls_root.as_deref())
                .map_err(|err| StoreConfigError::for_url(url, err))?;
            seeds.push(address);
            template.get_or_insert(info);
        }
        let Some(template) = template else {
            return Err(StoreConfigError::new(
                "a redis cluster store needs at least one node url",
            ));
        };
        // A check ends at the longer of the connect timeout and its own timeout, always
        // before its connection's response timeout.
        let check_limit = self.connect_timeout.max(self.timeout);
        let response_timeout = check_limit.saturating_add(check_limit / 4);
        let reach = Reach {
            template,
            tls_root: self.tls_root,
            config: connection_config(self.connect_timeout, response_timeout),
            seeds,
            // Saturating: a timeout of `Duration::MAX` ("never") must not overflow here.
            probe_timeout: self.connect_timeout.saturating_add(response_timeout),
        };
        let router = Router::new(Arc::new(reach));
        router.refresh_soon();
        Ok(RedisClusterStore {
            router,
            coalescer: Arc::default(),
            timeout: self.timeout,
            check_limit,
            nodes: self.nodes.into(),
        })
    }
}
