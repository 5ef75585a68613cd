//! The Redis Sentinel store: the primary found through sentinels and followed through a
//! failover.
//!
//! Every 250 ms the sentinels are asked which address serves the primary
//! (`SENTINEL get-master-addr-by-name`), and the address most of those that answer name is
//! the primary's. A connection is made to that address only once it answers `ROLE` as a
//! master, and is dropped as soon as the sentinels name another, it answers `READONLY` (it was
//! demoted), it fails, or three checks in a row on it time out; the next check connects to
//! the primary the sentinels name then. So a check is never sent to a replica the sentinels
//! do not name as primary, and never to one that says it is a replica.

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, Weak,
    },
    time::{Duration, Instant},
};

use ::redis::{
    aio::MultiplexedConnection, AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo,
    ErrorKind, IntoConnectionInfo, RedisError, RedisResult, Value,
};
use arc_swap::ArcSwapOption;

use super::{
    config_error::{redact, StoreConfigError},
    redis::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT},
    script::ScriptCall,
    script_call::{self, ScriptConnection},
    AdjustFuture, AdjustRequest, CheckFuture, CheckRequest, Store,
};

/// How often the sentinels are asked for the primary's address.
const ASK_EVERY: Duration = Duration::from_millis(250);

/// Timeouts in a row on one connection to the primary before it is dropped.
const DROP_AFTER: u32 = 3;

/// How long after a failed connection attempt the next one waits, unless the sentinels name
/// another primary meanwhile.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Counters in the primary of a Redis deployment watched by Sentinel.
///
/// The sentinels are asked every 250 ms which address serves the primary named
/// `master_name`; the store connects to the address most of them name, once it answers `ROLE`
/// as a master, and follows a failover as soon as they name another: checks resume within
/// about a quarter of a second of the promotion. A check is never sent to a replica: a
/// connection that answers `READONLY` (its server was demoted) is dropped at once, as is one
/// on which checks keep timing out; after a failed connection attempt (a wrong password, a
/// primary down until the sentinels name another) checks fail at once for 100 ms rather than
/// each trying again. Every check is one script call over a multiplexed
/// connection, and never waits longer than the configured timeout, or
/// `RateLimiter::timeout` when that is set. Build one per process and share it: under
/// [`RateLimiter`](crate::RateLimiter) each actix worker opens its own connection (see
/// [`Store::worker_store`]) and all share the sentinels' answers.
///
/// ```no_run
/// # async fn run() -> Result<(), ratelimit_runtime::store::StoreConfigError> {
/// use ratelimit_runtime::store::RedisSentinelStore;
///
/// let store = RedisSentinelStore::builder(
///     ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"],
///     "mymaster",
/// )
/// .master_password("app-secret")
/// .build()
/// .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisSentinelStore {
    watch: Arc<Watch>,
    primary: Arc<Primary>,
    timeout: Duration,
}

impl RedisSentinelStore {
    /// A builder for a store on the primary the sentinels at `sentinels` (URLs with the
    /// sentinels' own credentials; `rediss://` for TLS, to the primary too) name
    /// `master_name`.
    pub fn builder<I, S>(sentinels: I, master_name: impl Into<String>) -> RedisSentinelStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisSentinelStoreBuilder {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master_name: master_name.into(),
            master_username: None,
            master_password: None,
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

impl fmt::Debug for RedisSentinelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sentinels: Vec<String> = self.watch.urls.iter().map(|url| redact(url)).collect();
        f.debug_struct("RedisSentinelStore")
            .field("sentinels", &sentinels)
            .field("master_name", &self.watch.master_name)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Store for RedisSentinelStore {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        self.check_within(request, self.timeout)
    }

    fn check_within<'a>(&'a self, request: CheckRequest<'a>, timeout: Duration) -> CheckFuture<'a> {
        Box::pin(script_call::check(self.on_primary(), request, timeout))
    }

    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        Box::pin(script_call::adjust(
            self.on_primary(),
            request,
            self.timeout,
        ))
    }

    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        Box::pin(script_call::peek(self.on_primary(), request, self.timeout))
    }

    fn kind(&self) -> &'static str {
        "redis-sentinel"
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn worker_store(&self) -> Option<Arc<dyn Store>> {
        tokio::runtime::Handle::try_current().ok()?;
        Some(Arc::new(RedisSentinelStore {
            primary: Arc::new(Primary::default()),
            ..self.clone()
        }))
    }
}

impl RedisSentinelStore {
    fn on_primary(&self) -> OnPrimary<'_> {
        OnPrimary(self)
    }

    /// `call` on the primary's connection, made first if there is none or the sentinels
    /// name another primary since.
    async fn run(&self, call: &ScriptCall<'_>) -> RedisResult<Value> {
        let held = self.connection().await?;
        let mut pending = Pending {
            primary: &self.primary,
            id: held.id,
            ended: false,
        };
        let reply = script_call::invoke(&mut held.connection.clone(), call).await;
        pending.ended = true;
        match &reply {
            Err(error) if script_call::is_connection_loss(error) => {
                self.primary.drop_connection(held.id);
            }
            Err(error) if error.kind() == ErrorKind::Server(::redis::ServerErrorKind::ReadOnly) => {
                tracing::warn!(
                    target: "ratelimit",
                    master_name = %self.watch.master_name,
                    "rate-limit store: the server the sentinels named as primary answers as a replica (it was demoted); connecting to the primary they name now"
                );
                self.primary.drop_connection(held.id);
            }
            Err(error) if error.is_timeout() => self.primary.timed_out(held.id),
            _ => self.primary.answered(),
        }
        reply
    }

    async fn connection(&self) -> RedisResult<Arc<Held>> {
        let named = self.watch.named().await?;
        if let Some(held) = self.primary.current(named.generation) {
            return Ok(held);
        }
        let _gate = self.primary.connecting.lock().await;
        let named = self.watch.named().await?;
        if let Some(held) = self.primary.current(named.generation) {
            return Ok(held);
        }
        if let Some(error) = self.primary.refused_lately(named.generation) {
            return Err(error);
        }
        let connected = async {
            let connection = self
                .watch
                .client_for(&named.address)?
                .get_multiplexed_async_connection_with_config(&self.watch.config)
                .await?;
            is_master(connection.clone(), &named.address).await?;
            Ok(connection)
        }
        .await;
        let connection = match connected {
            Ok(connection) => connection,
            Err(error) => {
                self.primary.refused(named.generation, &error);
                return Err(error);
            }
        };
        Ok(self.primary.install(named.generation, connection))
    }
}

/// Whether the server behind `connection` answers `ROLE` as a master.
async fn is_master(mut connection: MultiplexedConnection, address: &Address) -> RedisResult<()> {
    let role: Value = ::redis::cmd("ROLE").query_async(&mut connection).await?;
    let Value::Array(fields) = role else {
        return Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "ROLE: not an array",
        )));
    };
    let role = match fields.first() {
        Some(Value::BulkString(role)) => String::from_utf8_lossy(role).into_owned(),
        Some(Value::SimpleString(role)) => role.clone(),
        _ => String::new(),
    };
    if role == "master" {
        return Ok(());
    }
    Err(RedisError::from((
        ErrorKind::Server(::redis::ServerErrorKind::ReadOnly),
        "the server the sentinels name as primary is not a master (yet)",
        format!("{address} answers ROLE `{role}`"),
    )))
}

/// The store as the connection a check's script runs over.
struct OnPrimary<'a>(&'a RedisSentinelStore);

impl ScriptConnection for OnPrimary<'_> {
    fn run<'a>(
        &'a mut self,
        call: &'a ScriptCall<'a>,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a {
        self.0.run(call)
    }
}

/// A primary's address as the sentinels name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Address {
    host: String,
    port: u16,
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The primary's address, and how many other addresses the sentinels named before it.
struct Named {
    generation: u64,
    address: Address,
}

/// The sentinels, and the primary they name, shared by a store's clones and worker stores.
struct Watch {
    urls: Vec<String>,
    sentinels: Vec<Sentinel>,
    master_name: String,
    /// The primary's connection settings (credentials, TLS); the address is the sentinels'.
    template: ConnectionInfo,
    tls_root: Option<Vec<u8>>,
    config: AsyncConnectionConfig,
    /// How long a sentinel may take to answer, connecting included.
    ask_timeout: Duration,
    named: ArcSwapOption<Named>,
    /// Counts rounds of asking, so that checks waiting for a first answer wake.
    asked: tokio::sync::watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

impl Watch {
    /// The primary the sentinels name now, waiting for the first round of asking if it has
    /// not ended yet.
    async fn named(&self) -> RedisResult<Arc<Named>> {
        let mut asked = self.asked.subscribe();
        if let Some(named) = self.named.load_full() {
            return Ok(named);
        }
        if *asked.borrow_and_update() == 0 {
            let _ = asked.changed().await;
        }
        self.named.load_full().ok_or_else(|| {
            let why = lock(&self.last_error)
                .clone()
                .unwrap_or_else(|| "no sentinel answered".to_owned());
            RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel named the primary",
                format!("`{}`: {why}", self.master_name),
            ))
        })
    }

    /// Asks every sentinel at once and keeps the address most of those that answer name.
    async fn ask(&self) {
        let answers = futures_util::future::join_all(self.sentinels.iter().map(|sentinel| {
            tokio::time::timeout(
                self.ask_timeout,
                sentinel.primary_of(&self.master_name, self.ask_timeout),
            )
        }))
        .await;
        let mut votes: HashMap<Address, usize> = HashMap::new();
        let mut error = None;
        for answer in answers {
            match answer {
                Ok(Ok(address)) => *votes.entry(address).or_default() += 1,
                Ok(Err(e)) => error = Some(e.to_string()),
                Err(_) => error = Some("a sentinel did not answer in time".to_owned()),
            }
        }
        match votes.into_iter().max_by_key(|(_, votes)| *votes) {
            Some((address, _)) => {
                let current = self.named.load();
                if current.as_ref().map(|named| &named.address) != Some(&address) {
                    let generation = current.as_ref().map_or(0, |named| named.generation + 1);
                    if current.is_some() {
                        tracing::warn!(
                            target: "ratelimit",
                            master_name = %self.master_name,
                            primary = %address,
                            "rate-limit store: the sentinels name a new primary; checks go there"
                        );
                    }
                    self.named.store(Some(Arc::new(Named {
                        generation,
                        address,
                    })));
                }
                *lock(&self.last_error) = None;
            }
            None => {
                *lock(&self.last_error) =
                    Some(error.unwrap_or_else(|| "no sentinel answered".to_owned()));
            }
        }
        self.asked.send_modify(|n| *n += 1);
    }

    /// A client for the primary at `address`.
    fn client_for(&self, address: &Address) -> RedisResult<Client> {
        let mut addr = self.template.addr().clone();
        if let ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } =
            &mut addr
        {
            host.clone_from(&address.host);
            *port = address.port;
        }
        let info = self.template.clone().set_addr(addr);
        match &self.tls_root {
            None => Client::open(info),
            Some(pem) => Client::build_with_tls(info, super::tls::private_ca(pem)),
        }
    }
}

/// Asks the sentinels every [`ASK_EVERY`] while the store lives.
async fn keep_asking(watch: Weak<Watch>) {
    loop {
        let Some(watch) = watch.upgrade() else {
            return;
        };
        watch.ask().await;
        drop(watch);
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// One sentinel, and the connection it is asked over.
struct Sentinel {
    client: Client,
    connection: ArcSwapOption<MultiplexedConnection>,
    config: AsyncConnectionConfig,
}

impl Sentinel {
    async fn primary_of(&self, master_name: &str, bound: Duration) -> RedisResult<Address> {
        let mut connection = match self.connection.load_full() {
            Some(connection) => (*connection).clone(),
            None => {
                let connection = self
                    .client
                    .get_multiplexed_async_connection_with_config(
                        &self.config.clone().set_response_timeout(Some(bound)),
                    )
                    .await?;
                self.connection.store(Some(Arc::new(connection.clone())));
                connection
            }
        };
        let reply: RedisResult<Option<(String, u16)>> = ::redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master_name)
            .query_async(&mut connection)
            .await;
        match reply {
            Ok(Some((host, port))) => Ok(Address { host, port }),
            Ok(None) => Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "the sentinel does not watch a primary of this name",
                master_name.to_owned(),
            ))),
            Err(error) => {
                if script_call::is_connection_loss(&error) || error.is_timeout() {
                    self.connection.store(None);
                }
                Err(error)
            }
        }
    }
}

/// A store's connection to the primary, numbered, with the sentinels' generation it was made
/// for.
struct Held {
    id: u64,
    generation: u64,
    connection: MultiplexedConnection,
}

#[derive(Default)]
struct Primary {
    held: ArcSwapOption<Held>,
    connecting: tokio::sync::Mutex<()>,
    made: AtomicU64,
    timeouts: AtomicU32,
    /// The last connection attempt that failed: its generation, when, and why.
    refused: Mutex<Option<(u64, Instant, RedisError)>>,
}

impl Primary {
    /// Why a connection to the primary of `generation` failed less than [`RETRY_AFTER`]
    /// ago: checks meanwhile fail at once rather than each trying again (a wrong password,
    /// a primary down until the sentinels name another).
    fn refused_lately(&self, generation: u64) -> Option<RedisError> {
        match &*lock(&self.refused) {
            Some((failed, at, error)) if *failed == generation && at.elapsed() < RETRY_AFTER => {
                Some(error.clone())
            }
            _ => None,
        }
    }

    fn refused(&self, generation: u64, error: &RedisError) {
        *lock(&self.refused) = Some((generation, Instant::now(), error.clone()));
    }

    /// The connection, if it was made for the primary of `generation`.
    fn current(&self, generation: u64) -> Option<Arc<Held>> {
        self.held
            .load_full()
            .filter(|held| held.generation == generation)
    }

    fn install(&self, generation: u64, connection: MultiplexedConnection) -> Arc<Held> {
        let held = Arc::new(Held {
            id: self.made.fetch_add(1, Ordering::Relaxed),
            generation,
            connection,
        });
        self.timeouts.store(0, Ordering::Relaxed);
        self.held.store(Some(Arc::clone(&held)));
        held
    }

    fn drop_connection(&self, id: u64) {
        self.held.rcu(|current| match current {
            Some(held) if held.id == id => None,
            other => other.clone(),
        });
    }

    fn answered(&self) {
        if self.timeouts.load(Ordering::Relaxed) != 0 {
            self.timeouts.store(0, Ordering::Relaxed);
        }
    }

    /// A check on connection `id` timed out; after [`DROP_AFTER`] in a row it is dropped (a
    /// primary whose host is gone answers neither way).
    fn timed_out(&self, id: u64) {
        if self.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= DROP_AFTER {
            self.drop_connection(id);
        }
    }
}

/// Counts a call given up before it ended (its caller's timeout) as a timeout.
struct Pending<'a> {
    primary: &'a Primary,
    id: u64,
    ended: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.primary.timed_out(self.id);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Configures a [`RedisSentinelStore`].
#[derive(Clone)]
#[must_use]
pub struct RedisSentinelStoreBuilder {
    sentinels: Vec<String>,
    master_name: String,
    master_username: Option<String>,
    master_password: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    tls_root: Option<Vec<u8>>,
}

impl fmt::Debug for RedisSentinelStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sentinels: Vec<String> = self.sentinels.iter().map(|url| redact(url)).collect();
        f.debug_struct("RedisSentinelStoreBuilder")
            .field("sentinels", &sentinels)
            .field("master_name", &self.master_name)
            .field("master_username", &self.master_username)
            .field(
                "master_password",
                &self.master_password.as_ref().map(|_| "…"),
            )
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl RedisSentinelStoreBuilder {
    /// The password the primary wants (`requirepass`, or the user's with
    /// [`master_username`](Self::master_username)); the sentinels' own is in their URLs.
    pub fn master_password(mut self, password: impl Into<String>) -> Self {
        self.master_password = Some(password.into());
        self
    }

    /// The ACL user to sign in to the primary as (with
    /// [`master_password`](Self::master_password)).
    pub fn master_username(mut self, username: impl Into<String>) -> Self {
        self.master_username = Some(username.into());
        self
    }

    /// The longest one check may take (default 50 ms), unless `RateLimiter::timeout` is set.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest one connection attempt, to a sentinel or the primary, may take (default
    /// 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts this CA (PEM) for `rediss://` sentinels and the primary instead of the system
    /// trust store.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// Builds the store without waiting for the sentinels: they are asked in the background,
    /// and checks fail with connection or timeout errors until one names the primary.
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// When there is no sentinel or no master name, a URL is malformed or names a user
    /// without a password, a master username comes without a password, or a timeout is
    /// under 1 ms.
    pub async fn build(self) -> Result<RedisSentinelStore, StoreConfigError> {
        if self.sentinels.is_empty() {
            return Err(StoreConfigError::new(
                "a redis sentinel store needs at least one sentinel url",
            ));
        }
        if self.master_name.trim().is_empty() {
            return Err(StoreConfigError::new(
                "a redis sentinel store needs the name the sentinels know the primary by",
            ));
        }
        if self.master_username.is_some() && self.master_password.is_none() {
            return Err(StoreConfigError::new(
                "a master username without a master password would not be sent: give both",
            ));
        }
        StoreConfigError::check_timeouts(self.timeout, self.connect_timeout)?;
        super::tls::ensure_crypto_provider();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout.max(self.timeout)));
        let mut sentinels = Vec::with_capacity(self.sentinels.len());
        let mut template = None;
        for url in &self.sentinels {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|err| StoreConfigError::for_url(url, err))?;
            StoreConfigError::check_user_has_password(url, &info)?;
            if !matches!(
                info.addr(),
                ConnectionAddr::Tcp(..) | ConnectionAddr::TcpTls { .. }
            ) {
                return Err(StoreConfigError::new(format!(
                    "the sentinel url `{}` is not a TCP address",
                    redact(url)
                )));
            }
            let client = match &self.tls_root {
                None => Client::open(info.clone()),
                Some(pem) => Client::build_with_tls(info.clone(), super::tls::private_ca(pem)),
            }
            .map_err(|err| StoreConfigError::for_url(url, err))?;
            template.get_or_insert(info);
            sentinels.push(Sentinel {
                client,
                connection: ArcSwapOption::empty(),
                config: config.clone(),
            });
        }
        let template = template.expect("at least one sentinel");
        let mut redis = ::redis::RedisConnectionInfo::default();
        if let Some(username) = &self.master_username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.master_password {
            redis = redis.set_password(password);
        }
        let watch = Arc::new(Watch {
            urls: self.sentinels,
            sentinels,
            master_name: self.master_name,
            template: template.set_redis_settings(redis),
            tls_root: self.tls_root,
            config,
            ask_timeout: self.connect_timeout.saturating_add(self.timeout),
            named: ArcSwapOption::empty(),
            asked: tokio::sync::watch::channel(0).0,
            last_error: Mutex::default(),
        });
        tokio::spawn(keep_asking(Arc::downgrade(&watch)));
        Ok(RedisSentinelStore {
            watch,
            primary: Arc::new(Primary::default()),
            timeout: self.timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_builder_without_sentinels_or_a_name_is_refused() {
        let none: [&str; 0] = [];
        let err = RedisSentinelStore::builder(none, "m")
            .build()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("at least one sentinel"), "{err}");
        let err = RedisSentinelStore::builder(["redis://127.0.0.1:26379"], " ")
            .build()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("name"), "{err}");
        let err = RedisSentinelStore::builder(["redis://127.0.0.1:26379"], "m")
            .master_username("app")
            .build()
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("without a master password"),
            "{err}"
        );
    }
}
