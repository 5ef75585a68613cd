//! The Redis Sentinel store: the primary found through sentinels and followed through a
//! failover.
//!
//! Every 250 ms the sentinels are asked which address serves the primary
//! (`SENTINEL get-master-addr-by-name`); the address more than half of the configured
//! sentinels name is the primary's (without such a majority, the one named before stays). A
//! connection is made to that address, in the background, only once it answers `ROLE` as a
//! master, and is dropped as soon as the sentinels name another, it answers `READONLY` (it
//! was demoted), it fails, or three checks in a row on it time out; the next check connects
//! to the primary the sentinels name then. So checks go only to a server the sentinels name
//! as primary and that said it was a master; one sent in the moment between its demotion and
//! the sentinels' switch is refused by it (`READONLY`), not decided.

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, OnceLock, Weak,
    },
    time::{Duration, Instant},
};

use ::redis::{
    aio::MultiplexedConnection, AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo,
    ErrorKind, IntoConnectionInfo, RedisError, RedisResult, Value,
};
use arc_swap::ArcSwapOption;

use super::{
    coalesce::{Coalescer, Sharing},
    config_error::{redact, StoreConfigError},
    redis::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT},
    script::{BatchOutcome, ScriptCall},
    script_call::{self, ScriptConnection},
    AdjustFuture, AdjustRequest, CheckFuture, CheckRequest, Store,
};

/// How often the sentinels are asked for the primary's address.
const ASK_EVERY: Duration = Duration::from_millis(250);

/// How long the other sentinels have to answer a round once one has.
const ROUND_GRACE: Duration = Duration::from_millis(100);

/// Timeouts in a row on one connection to the primary before it is dropped.
const DROP_AFTER: u32 = 3;

/// How long after a failed connection attempt the next one waits, unless the sentinels name
/// another primary meanwhile.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Counters in the primary of a Redis deployment watched by Sentinel.
///
/// The sentinels are asked every 250 ms which address serves the primary named
/// `master_name`; the store connects to the address more than half of them name (a sentinel
/// that does not answer holds a round up to 100 ms after the first answer), once it answers
/// `ROLE` as a master, and follows a failover as soon as they name another: in the tests,
/// checks resume within about 0.3 s of the promotion. A connection that answers `READONLY`
/// (its server was demoted) is dropped at once, as is one on which three checks in a row
/// time out (their own timeout, or a caller's shorter one);
/// after a failed connection attempt (a wrong password, a primary down until the sentinels
/// name another) checks fail at once for 100 ms rather than each trying again. Every check
/// is one script call (concurrent checks of one key share calls, as with
/// [`RedisStore`](super::RedisStore)) over a multiplexed
/// connection, and never waits longer than the configured timeout, or
/// the deprecated `RateLimiter::timeout` when that is set. Build one per process and share it: under
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
    /// Concurrent checks of one key sharing one call (each worker store its own).
    coalescer: Arc<Coalescer>,
    timeout: Duration,
    /// The longest a check waits, whatever the deprecated `RateLimiter::timeout` says: less than the
    /// connection's response timeout.
    check_limit: Duration,
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

    /// The primary's address as the sentinels name it now (`host:port`, `[host]:port` for
    /// an IPv6 host), waiting for their first answer when there has been none yet.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use ratelimit_runtime::store::RedisSentinelStore;
    ///
    /// let store = RedisSentinelStore::builder(["redis://10.0.0.5:26379"], "limiter")
    ///     .build()
    ///     .await?;
    /// println!("counting in {}", store.primary_address().await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// When no majority of the sentinels has named a primary yet (none answered, or they
    /// disagreed), with why. Once one has been named it is kept, and answered, until a
    /// majority names another.
    pub async fn primary_address(&self) -> Result<String, super::StoreError> {
        let named = self
            .watch
            .named()
            .await
            .map_err(|error| script_call::store_error(&error))?;
        let Address { host, port } = &named.address;
        Ok(if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        })
    }

    /// A copy that makes its own connection to the primary, driven by the runtime it is
    /// first used on; the sentinels' answers stay shared.
    fn with_own_connection(&self) -> RedisSentinelStore {
        RedisSentinelStore {
            primary: Arc::new(Primary::default()),
            coalescer: Arc::default(),
            ..self.clone()
        }
    }

    /// A copy that asks the sentinels itself and connects to the primary itself, all driven
    /// by the current runtime (call it in one): a thread of its own (the overrides') then
    /// never waits on a task of a runtime that is busy or blocked, as the App's is while it
    /// waits for the overrides' first read.
    pub(crate) fn detached(&self) -> RedisSentinelStore {
        let watch = Arc::new(self.watch.fresh());
        tokio::spawn(keep_asking(Arc::downgrade(&watch)));
        RedisSentinelStore {
            watch,
            ..self.with_own_connection()
        }
    }

    /// Counts the primaries named so far (from 0, the first), once one has been: it moves
    /// when the sentinels name another.
    pub(crate) fn primary_generation(&self) -> Option<u64> {
        self.watch
            .named
            .load()
            .as_ref()
            .map(|named| named.generation)
    }

    /// `cmd` on the primary's connection (made first when there is none) within `timeout`,
    /// for reads and writes besides checks (the overrides' hash). A lost connection, a
    /// demoted primary or no answer in time drops the connection, so that the next command
    /// makes one anew (a stalled connection is not kept for want of an error).
    pub(crate) async fn query<T: ::redis::FromRedisValue>(
        &self,
        cmd: &::redis::Cmd,
        timeout: Duration,
    ) -> RedisResult<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let held = super::until(deadline, self.connection())
            .await
            .map_err(|_| script_call::no_answer_within(timeout))??;
        let reply: RedisResult<Value> =
            match super::until(deadline, cmd.query_async(&mut held.connection.clone())).await {
                Ok(reply) => reply,
                Err(_) => {
                    self.primary.drop_connection(held.id);
                    return Err(script_call::no_answer_within(timeout));
                }
            };
        match &reply {
            Err(error) if script_call::is_connection_loss(error) || is_read_only(error) => {
                self.primary.drop_connection(held.id);
            }
            Err(_) => {}
            Ok(_) => held.answered(),
        }
        Ok(::redis::from_redis_value(reply?)?)
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
        let timeout = timeout.min(self.check_limit);
        if Coalescer::shares(&request) {
            return Box::pin(self.coalescer.check(self, request, timeout));
        }
        Box::pin(self.check_alone(request, timeout))
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
        let timeout = timeout.min(self.check_limit);
        let on = self.on_primary(Some(Instant::now() + timeout));
        Box::pin(script_call::reserve(on, request, wait, timeout))
    }

    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        Box::pin(script_call::adjust(
            self.on_primary(None),
            request,
            self.timeout,
        ))
    }

    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        Box::pin(script_call::peek(
            self.on_primary(None),
            request,
            self.timeout,
        ))
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
        "redis-sentinel"
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn worker_store(&self) -> Option<Arc<dyn Store>> {
        tokio::runtime::Handle::try_current().ok()?;
        Some(Arc::new(self.with_own_connection()))
    }
}

impl Sharing for RedisSentinelStore {
    fn coalescer(&self) -> &Coalescer {
        &self.coalescer
    }

    fn check_alone<'a>(
        &'a self,
        request: CheckRequest<'a>,
        timeout: Duration,
    ) -> impl Future<Output = Result<super::Decision, super::StoreError>> + Send + 'a {
        let on = self.on_primary(Some(Instant::now() + timeout));
        script_call::check(on, request, timeout)
    }

    fn check_together<'a>(
        &'a self,
        request: CheckRequest<'a>,
        units: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<BatchOutcome, super::StoreError>> + Send + 'a {
        let on = self.on_primary(Some(Instant::now() + timeout));
        script_call::check_batch(on, request, units, timeout)
    }
}

impl RedisSentinelStore {
    fn on_primary(&self, deadline: Option<Instant>) -> OnPrimary<'_> {
        OnPrimary {
            store: self,
            deadline,
        }
    }

    /// `call` on the primary's connection, made first if there is none or the sentinels
    /// name another primary since. With a `deadline` (a check's own timeout), a check given up
    /// before its reply (the deadline passed, or a caller's shorter timer dropped it) counts
    /// as that connection's timeout: a caller that never waits as long as the store would is
    /// otherwise never told the connection is silent. Any reply starts the count again.
    async fn run(&self, call: &ScriptCall<'_>, deadline: Option<Instant>) -> RedisResult<Value> {
        let used = OnceLock::new();
        let attempt = async {
            let held = self.connection().await?;
            let _ = used.set(Arc::clone(&held));
            let reply = script_call::invoke(&mut held.connection.clone(), call).await;
            Ok::<_, RedisError>((held, reply))
        };
        let (held, reply) = match deadline {
            Some(deadline) => {
                let mut unanswered = Unanswered {
                    primary: &self.primary,
                    used: &used,
                    ended: false,
                };
                let Ok(attempt) = super::until(deadline.into(), attempt).await else {
                    return Err(RedisError::from(std::io::Error::from(
                        std::io::ErrorKind::TimedOut,
                    )));
                };
                unanswered.ended = true;
                attempt?
            }
            None => attempt.await?,
        };
        match &reply {
            Err(error) if script_call::is_connection_loss(error) => {
                self.primary.drop_connection(held.id);
            }
            Err(error) if is_read_only(error) => {
                tracing::warn!(
                    target: "ratelimit",
                    master_name = %self.watch.master_name,
                    "rate-limit store: the server the sentinels named as primary answers as a replica (it was demoted); connecting to the primary they name now"
                );
                self.primary.drop_connection(held.id);
            }
            _ => held.answered(),
        }
        reply
    }

    /// The connection to the primary the sentinels name; when there is none for it, one is
    /// made in the background and this waits for it (the caller's timeout bounds the wait).
    async fn connection(&self) -> RedisResult<Arc<Held>> {
        let named = self.watch.named().await?;
        if let Some(held) = self.primary.current(named.generation) {
            return Ok(held);
        }
        if let Some(error) = self.primary.refused_lately(named.generation) {
            return Err(error);
        }
        let mut attempts = self.primary.attempts.subscribe();
        attempts.borrow_and_update();
        self.connect_soon(&named);
        loop {
            if attempts.changed().await.is_err() {
                break;
            }
            if let Some(held) = self.primary.current(named.generation) {
                return Ok(held);
            }
            // No attempt for this primary (or a later one) under way any more.
            if self.primary.connecting.load(Ordering::Acquire) <= named.generation {
                break;
            }
        }
        Err(self
            .primary
            .refused_lately(named.generation)
            .unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no connection to the primary"))))
    }

    /// Starts connecting to the primary `named` in the background unless a connection to
    /// it (or to one named later) is being made: it is used once it answers `ROLE` as a
    /// master. An attempt still under way to a primary named before (one that went silent
    /// keeps it waiting for its timeout) does not hold this one back.
    fn connect_soon(&self, named: &Named) {
        let (generation, address) = (named.generation, named.address.clone());
        let mine = generation + 1;
        let claimed = self.primary.connecting.fetch_update(
            Ordering::AcqRel,
            Ordering::Acquire,
            |under_way| (under_way < mine).then_some(mine),
        );
        if claimed.is_err() {
            return;
        }
        let (watch, primary) = (Arc::clone(&self.watch), Arc::clone(&self.primary));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            primary.attempt_ended(mine);
            return;
        };
        runtime.spawn(async move {
            let connected = async {
                let connection = watch
                    .client_for(&address)?
                    .get_multiplexed_async_connection_with_config(&watch.config)
                    .await?;
                is_master(connection.clone(), &address).await?;
                Ok::<_, RedisError>(connection)
            }
            .await;
            match connected {
                Ok(connection) => primary.install(generation, connection),
                Err(error) => primary.refused(generation, &error),
            }
            primary.attempt_ended(mine);
        });
    }
}

/// Whether `error` is Redis's `READONLY`: the server is a replica. Redis 7 answers a script
/// that writes on a replica with it; Redis 6 wraps it in the script's error.
fn is_read_only(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(::redis::ServerErrorKind::ReadOnly)
        || error.to_string().contains("READONLY")
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

/// The store as the connection a check's script runs over, with the check's deadline.
struct OnPrimary<'a> {
    store: &'a RedisSentinelStore,
    deadline: Option<Instant>,
}

impl ScriptConnection for OnPrimary<'_> {
    fn run<'a>(
        &'a mut self,
        call: &'a ScriptCall<'a>,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a {
        self.store.run(call, self.deadline)
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
    /// The same settings, with connections of its own to the sentinels and nothing asked
    /// yet.
    fn fresh(&self) -> Watch {
        Watch {
            urls: self.urls.clone(),
            sentinels: self
                .sentinels
                .iter()
                .map(|sentinel| Sentinel::new(sentinel.client.clone(), sentinel.config.clone()))
                .collect(),
            master_name: self.master_name.clone(),
            template: self.template.clone(),
            tls_root: self.tls_root.clone(),
            config: self.config.clone(),
            ask_timeout: self.ask_timeout,
            named: ArcSwapOption::empty(),
            asked: tokio::sync::watch::channel(0).0,
            last_error: Mutex::default(),
        }
    }

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

    /// Asks every sentinel at once and keeps the address more than half of them name.
    async fn ask(&self) {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let mut answers: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|sentinel| {
                tokio::time::timeout(
                    self.ask_timeout,
                    sentinel.primary_of(&self.master_name, self.ask_timeout),
                )
            })
            .collect();
        // Decided as soon as more than half of the sentinels agree, so a dead one does not
        // hold the round; without such a majority the primary stays the one named before.
        let majority = self.sentinels.len() / 2 + 1;
        let mut votes: HashMap<Address, usize> = HashMap::new();
        let mut error = None;
        let mut agreed = None;
        // Once one sentinel has answered, the others have [`ROUND_GRACE`] to: one that
        // stopped answering must not hold every round for the ask timeout.
        let mut grace_ends: Option<Instant> = None;
        loop {
            let next = match grace_ends {
                Some(ends) => match tokio::time::timeout_at(ends.into(), answers.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        error = Some("a sentinel did not answer in time".to_owned());
                        break;
                    }
                },
                None => answers.next().await,
            };
            let Some(answer) = next else {
                break;
            };
            grace_ends.get_or_insert_with(|| Instant::now() + ROUND_GRACE);
            match answer {
                Ok(Ok(address)) => {
                    let count = votes.entry(address.clone()).or_default();
                    *count += 1;
                    if *count >= majority {
                        agreed = Some(address);
                        break;
                    }
                }
                Ok(Err(e)) => error = Some(e.to_string()),
                Err(_) => error = Some("a sentinel did not answer in time".to_owned()),
            }
        }
        match agreed {
            Some(address) => {
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
                let why = match error {
                    Some(error) if votes.is_empty() => error,
                    _ => format!(
                        "no {majority} of the {} sentinels named the same primary",
                        self.sentinels.len()
                    ),
                };
                *lock(&self.last_error) = Some(why);
            }
        }
        self.asked.send_modify(|n| *n += 1);
    }

    /// A client for the primary at `address`.
    fn client_for(&self, address: &Address) -> RedisResult<Client> {
        super::tls::client_at(
            &self.template,
            &address.host,
            address.port,
            self.tls_root.as_deref(),
        )
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
    /// A sentinel asked over `client`, not connected yet.
    fn new(client: Client, config: AsyncConnectionConfig) -> Sentinel {
        Sentinel {
            client,
            connection: ArcSwapOption::empty(),
            config,
        }
    }

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
/// for, and the checks on it that timed out in a row.
struct Held {
    id: u64,
    generation: u64,
    connection: MultiplexedConnection,
    timeouts: AtomicU32,
}

impl Held {
    fn answered(&self) {
        if self.timeouts.load(Ordering::Relaxed) != 0 {
            self.timeouts.store(0, Ordering::Relaxed);
        }
    }

    /// A check on it timed out; after [`DROP_AFTER`] in a row it is dropped (a primary
    /// whose host is gone answers neither way).
    fn timed_out(&self, primary: &Primary) {
        if self.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= DROP_AFTER {
            primary.drop_connection(self.id);
        }
    }
}

/// Counts a check that ends without its reply (its deadline passed, or it was dropped) as a
/// timeout of the connection it was sent on (of the current one when it never got one).
struct Unanswered<'a> {
    primary: &'a Primary,
    used: &'a OnceLock<Arc<Held>>,
    ended: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let held = self.used.get().cloned();
        if let Some(held) = held.or_else(|| self.primary.held.load_full()) {
            held.timed_out(self.primary);
        }
    }
}

#[derive(Default)]
struct Primary {
    held: ArcSwapOption<Held>,
    /// The generation of the primary a connection is being made to, plus one (0: none), in
    /// a task of its own.
    connecting: AtomicU64,
    /// Counts connection attempts that ended.
    attempts: tokio::sync::watch::Sender<u64>,
    made: AtomicU64,
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

    /// Keeps `connection` to the primary of `generation`, unless one to a primary named
    /// later is held already (an attempt to an earlier one that ended late).
    fn install(&self, generation: u64, connection: MultiplexedConnection) {
        let held = Arc::new(Held {
            id: self.made.fetch_add(1, Ordering::Relaxed),
            generation,
            connection,
            timeouts: AtomicU32::new(0),
        });
        self.held.rcu(|current| match current {
            Some(newer) if newer.generation > generation => Some(Arc::clone(newer)),
            _ => Some(Arc::clone(&held)),
        });
    }

    /// An attempt marked `mine` (its generation plus one) ended: the mark goes, unless an
    /// attempt to a primary named later has taken it, and the waiting look again.
    fn attempt_ended(&self, mine: u64) {
        let _ = self
            .connecting
            .compare_exchange(mine, 0, Ordering::AcqRel, Ordering::Acquire);
        self.attempts.send_modify(|n| *n += 1);
    }

    fn drop_connection(&self, id: u64) {
        self.held.rcu(|current| match current {
            Some(held) if held.id == id => None,
            other => other.clone(),
        });
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

    /// The longest one check may take (default 50 ms), unless the deprecated `RateLimiter::timeout` is set.
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
    /// When there is no sentinel or no master name, a URL is malformed, names a user
    /// without a password or asks for `#insecure` TLS, the URLs mix `redis://` and
    /// `rediss://`, a master username comes without a password, the CA given to
    /// [`tls_root_certificate`](Self::tls_root_certificate) holds no PEM certificate, or a
    /// timeout is under 1 ms.
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
        StoreConfigError::check_timeouts("RedisSentinelStore", self.timeout, self.connect_timeout)?;
        super::tls::ensure_crypto_provider();
        let check_limit = self.connect_timeout.max(self.timeout);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(check_limit.saturating_add(check_limit / 4)));
        let mut sentinels = Vec::with_capacity(self.sentinels.len());
        let mut template: Option<ConnectionInfo> = None;
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
            let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            if let Some(first) = &template {
                if matches!(first.addr(), ConnectionAddr::TcpTls { .. }) != tls {
                    return Err(StoreConfigError::new(format!(
                        "the sentinel urls mix `redis://` and `rediss://` (`{}`): the primary is reached as the first one says, with TLS or without, so give every sentinel the same scheme",
                        redact(url)
                    )));
                }
            }
            let client = super::tls::client(info.clone(), self.tls_root.as_deref())
                .map_err(|err| StoreConfigError::for_url(url, err))?;
            template.get_or_insert(info);
            sentinels.push(Sentinel::new(client, config.clone()));
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
            coalescer: Arc::default(),
            timeout: self.timeout,
            check_limit,
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
        let err = RedisSentinelStore::builder(
            [
                "rediss://127.0.0.1:26379",
                "redis://:secret@127.0.0.1:26380",
            ],
            "m",
        )
        .build()
        .await
        .unwrap_err();
        let said = err.to_string();
        assert!(
            said.contains("mix `redis://` and `rediss://`") && !said.contains("secret"),
            "{said}"
        );
    }
}
