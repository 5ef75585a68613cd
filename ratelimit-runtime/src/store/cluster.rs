//! The Redis Cluster store: the same script, routed by its first key.
//!
//! Every key of one check carries the route key's hash tag, so they all live in one slot:
//! `EVALSHA` goes to the node that owns it and never meets `CROSSSLOT`.

use std::{fmt, sync::Arc, time::Duration};

use ::redis::{
    cluster::{ClusterClient, ClusterConfig},
    cluster_async::ClusterConnection,
    cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr},
    ErrorKind, RedisError, RedisResult, Value,
};

use super::{
    config_error::{redact, StoreConfigError},
    link::{self, Link, Linked, Opening, StallRule},
    redis::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT},
    AdjustFuture, AdjustRequest, CheckFuture, CheckRequest, Store,
};

/// How long the cluster's connection must go without a check timing out before its timeouts
/// are counted afresh towards a stall: checks of the slots whose master answers succeed in
/// between, so only a pause tells that the timeouts stopped.
const STALL_PAUSE: Duration = Duration::from_secs(10);

/// Counters in a Redis Cluster.
///
/// Connections to the nodes are made in the background and follow slot moves; a check never
/// waits longer than the configured timeout, or `RateLimiter::timeout` when that is set (at
/// most the longer of the connect timeout and the configured one). When checks keep timing
/// out (a master stopped answering without closing its connections, and was failed over), a
/// new set of connections reads the slot map afresh and takes over once every master
/// answers it. Build one per process and share it: clones share the connections, and under
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
    link: Arc<Link<ClusterConnection>>,
    timeout: Duration,
    /// The longest a check waits, whatever `RateLimiter::timeout` says: less than the
    /// connection's response timeout.
    check_limit: Duration,
    /// How long a probe for new connections may take: from the seeds, the slot map, every
    /// master, each step bounded by the connect or the response timeout.
    probe_timeout: Duration,
    nodes: Vec<String>,
    /// What another set of connections to the same cluster is opened from.
    client: ClusterClient,
    config: ClusterConfig,
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
        if request.key.spans_identities(request.limits) {
            return Box::pin(link::check_split(self, request, self.timeout));
        }
        Box::pin(link::check(self, request, self.timeout))
    }

    fn check_within<'a>(&'a self, request: CheckRequest<'a>, timeout: Duration) -> CheckFuture<'a> {
        let timeout = timeout.min(self.check_limit);
        if request.key.spans_identities(request.limits) {
            return Box::pin(link::check_split(self, request, timeout));
        }
        Box::pin(link::check(self, request, timeout))
    }

    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        if request.key.spans_identities(request.limits) {
            return Box::pin(link::adjust_split(self, request, self.timeout));
        }
        Box::pin(link::adjust(self, request, self.timeout))
    }

    /// One identity's limits at a time (their keys share one slot).
    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        Box::pin(link::peek(self, request, self.timeout))
    }

    fn kind(&self) -> &'static str {
        "redis-cluster"
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn worker_store(&self) -> Option<Arc<dyn Store>> {
        tokio::runtime::Handle::try_current().ok()?;
        let connection = self
            .client
            .get_pending_async_connection_with_config(self.config.clone());
        Some(Arc::new(RedisClusterStore {
            link: Arc::new(Link::new(connection, StallRule::WithoutPause(STALL_PAUSE))),
            ..self.clone()
        }))
    }
}

impl Linked for RedisClusterStore {
    type Connection = ClusterConnection;

    fn link(&self) -> &Arc<Link<ClusterConnection>> {
        &self.link
    }

    /// New connections from the seed nodes, which read the slot map again, once every
    /// master answers them.
    fn reconnect(&self) -> Opening<ClusterConnection> {
        let (client, config) = (self.client.clone(), self.config.clone());
        Box::pin(async move {
            let mut fresh = client.get_async_connection_with_config(config).await?;
            reaches_every_master(&mut fresh).await?;
            Ok(fresh)
        })
    }

    /// A `PING` to the master of every slot range of the cluster's slot map, each routed by
    /// the connection's own slot map, as its checks are: an old connection whose map still
    /// names a master that stopped answering does not answer, one on a master that is only
    /// busy does.
    fn answers(mut connection: ClusterConnection) -> Opening<()> {
        Box::pin(async move {
            let slots = cluster_slots(&mut connection).await?;
            for (start, _) in slot_masters(&slots).ok_or_else(no_masters)? {
                let route = Route::new(start, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                ping(&mut connection, routing).await?;
            }
            Ok(())
        })
    }

    fn probe_timeout(&self) -> Duration {
        self.probe_timeout
    }
}

/// A `PING` to the master of every slot range of the cluster's slot map, each sent to that
/// master's address: a master the connection holds no connection to, or one that does not
/// answer, fails it. (Neither a `PING` to all masters nor one routed by slot would do for a
/// new connection: redis-rs sends the first only to the masters it holds connections to, and
/// a command for a slot whose master it could not reach to another node, so a new
/// connection that could not reach a stopped master would answer for it.)
async fn reaches_every_master(connection: &mut ClusterConnection) -> RedisResult<()> {
    let slots = cluster_slots(connection).await?;
    for (_, (host, port)) in slot_masters(&slots).ok_or_else(no_masters)? {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        ping(connection, routing).await?;
    }
    Ok(())
}

async fn cluster_slots(connection: &mut ClusterConnection) -> RedisResult<Value> {
    ::redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(connection)
        .await
}

async fn ping(connection: &mut ClusterConnection, routing: RoutingInfo) -> RedisResult<()> {
    link::answered(
        connection
            .route_command(::redis::cmd("PING"), routing)
            .await
            .and_then(|reply| reply.extract_error())
            .map(drop),
    )
}

fn no_masters() -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "CLUSTER SLOTS: no readable master address",
    ))
}

/// Every master in a `CLUSTER SLOTS` reply, once each, with the first slot of a range it
/// serves; `None` when there is none, or one is unreadable.
fn slot_masters(slots: &Value) -> Option<Vec<(u16, (String, u16))>> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    let mut masters: Vec<(u16, (String, u16))> = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Array(master))) = (fields.first(), fields.get(2))
        else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(host) => String::from_utf8(host.clone()).ok()?,
            Value::SimpleString(host) => host.clone(),
            _ => return None,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        let address = (host, u16::try_from(*port).ok()?);
        if address.0.is_empty() {
            return None;
        }
        if !masters.iter().any(|(_, known)| *known == address) {
            masters.push((u16::try_from(*start).ok()?, address));
        }
    }
    (!masters.is_empty()).then_some(masters)
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
    /// unless `RateLimiter::timeout` is set (then at most the longer of this and the connect
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
    /// When there is no node, a URL is malformed or names a user without a password, the
    /// nodes' credentials differ, or a timeout is under 1 ms.
    pub async fn build(self) -> Result<RedisClusterStore, StoreConfigError> {
        if self.nodes.is_empty() {
            return Err(StoreConfigError::new(
                "a redis cluster store needs at least one node url",
            ));
        }
        StoreConfigError::check_timeouts(self.timeout, self.connect_timeout)?;
        // redis-rs compares the seeds' credentials with the first seed's only when the first
        // has them: a list whose first URL has no password (or user) builds a client that
        // sends none to any node. Every seed must name the same ones.
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
        let mut builder = ClusterClient::builder(self.nodes.iter().map(String::as_str))
            .connection_timeout(self.connect_timeout);
        if let Some(pem) = &self.tls_root {
            builder = builder.certs(super::tls::private_ca(pem));
        }
        let client = builder
            .build()
            .map_err(|err| StoreConfigError::for_url(&self.nodes.join(","), err))?;
        // Bounded responses: without one, a node that accepts connections but never answers
        // (a stopped process) would hold every new connection's set-up for ever. A check
        // ends at the longer of the connect timeout and its own timeout, always before the
        // response timeout: redis-rs drops a request whose caller gave up, but queues one
        // that timed out on its side and sends it again with the next request, which would
        // count it twice.
        let check_limit = self.connect_timeout.max(self.timeout);
        let response_timeout = check_limit.saturating_add(check_limit / 4);
        let config = ClusterConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(response_timeout);
        let connection = client.get_pending_async_connection_with_config(config.clone());
        Ok(RedisClusterStore {
            link: Arc::new(Link::new(connection, StallRule::WithoutPause(STALL_PAUSE))),
            timeout: self.timeout,
            check_limit,
            // Saturating: a timeout of `Duration::MAX` ("never") must not overflow here.
            probe_timeout: (self.connect_timeout.saturating_add(response_timeout))
                .saturating_mul(2)
                .saturating_add(link::PROBE_TIMEOUT),
            nodes: self.nodes,
            client,
            config,
        })
    }
}
