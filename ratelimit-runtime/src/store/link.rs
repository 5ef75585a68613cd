//! A Redis store's connection, replaced when it stops answering.
//!
//! redis-rs reconnects by itself when a connection errors, but not when it merely stops
//! answering: the path to Redis may drop packets without a reset (a failover moved the
//! address, a NAT or conntrack entry was dropped, a proxy or a whole host hung), and the kernel
//! would retransmit for a quarter of an hour while every check ran into its timeout. Nor does
//! it leave a connection that answers but cannot serve: one
//! still open to a primary demoted to replica behind a failover proxy or a DNS name (every
//! check answered `READONLY`), or a connection manager whose reconnect was refused by Redis
//! (a `SELECT` answered `BUSY` while a long script ran), which answers that error for ever.
//! After [`STALLED_AFTER`] failed checks (timeouts or errors) a probe opens a new connection
//! in the background; it takes the old one's place only if it answers (`PING`) while the old one,
//! asked the same and given as long, does not, or was answered `READONLY`. So a Redis that is
//! busy rather than unreachable (a slow command, a fork, `CLIENT PAUSE`), or a check that
//! fails on its data, keeps its connections, and is probed less and less often; so is a
//! replica that every new connection reaches too. A Redis that refuses new connections at
//! once while the old one only answers errors (a changed password, `maxclients`) is probed
//! every second, to be used again as soon as it accepts.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, RwLock,
    },
    time::{Duration, Instant},
};

use ::redis::{aio::ConnectionLike, ErrorKind, RedisResult, ServerErrorKind};

use super::{
    script::BatchOutcome,
    script_call::{self, ScriptConnection},
    AdjustRequest, CheckRequest, Decision, Store, StoreError, StoreErrorKind,
};

/// Failed checks in a row (timeouts, errors; a check that answers starts the count again)
/// before a connection counts as stalled.
const STALLED_AFTER: u32 = 3;

/// How long after a connection was made, or a probe failed, the first probe for a new
/// connection waits; it doubles after each failed probe, up to [`PROBE_BACKOFF_MAX`].
const PROBE_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two probes while checks keep timing out.
const PROBE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The result of a probe's `PING`, where a `NOPERM` refusal counts as an answer: only a live,
/// authenticated connection is refused by the ACL, and a least-privilege user that may run
/// the check scripts need not be let run `PING` (were the refusal a failure, such a user's
/// store would never take a new connection, and would fail until a restart after a stall or
/// a password change).
pub(super) fn answered(ping: RedisResult<()>) -> RedisResult<()> {
    match ping {
        Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => Ok(()),
        other => other,
    }
}

/// How long a probe of one server may take to connect and have its `PING` answered.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection being opened by a probe: made, and answering.
pub(crate) type Opening<C> = Pin<Box<dyn Future<Output = RedisResult<C>> + Send>>;

/// A store whose checks run over a [`Link`].
pub(crate) trait Linked: Store + Sync {
    type Connection: ScriptConnection + ConnectionLike + Clone + Send + Sync + 'static;

    fn link(&self) -> &Arc<Link<Self::Connection>>;

    /// A new connection to the same server, answering `PING`.
    fn reconnect(&self) -> Opening<Self::Connection>;

    /// How long [`Linked::reconnect`] may take before the probe counts as failed; the old
    /// connection gets as long to show it still answers.
    fn probe_timeout(&self) -> Duration;

    /// Whether `connection` still answers: every server behind it answers `PING`.
    fn answers(connection: Self::Connection) -> Opening<()>;
}

/// One check of `request` on `store`'s current connection within `timeout`, counted for its
/// stall rule.
pub(crate) async fn check<S: Linked>(
    store: &S,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    let link = store.link();
    let (generation, connection) = link.current();
    let mut watch = Watch {
        store,
        generation,
        ended: false,
    };
    let checked = script_call::check(connection, request, timeout).await;
    watch.ended = true;
    let wrote = checked.as_ref().map(|decision| decision.allowed);
    link.observe(generation, Health::of(wrote), store);
    checked
}

/// One check of `request` that may wait up to `wait` for its turn, on `store`'s current
/// connection within `timeout`, counted for its stall rule as a check.
pub(crate) async fn reserve<S: Linked>(
    store: &S,
    request: CheckRequest<'_>,
    wait: Duration,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    let link = store.link();
    let (generation, connection) = link.current();
    let mut watch = Watch {
        store,
        generation,
        ended: false,
    };
    let checked = script_call::reserve(connection, request, wait, timeout).await;
    watch.ended = true;
    let wrote = checked.as_ref().map(|decision| decision.allowed);
    link.observe(generation, Health::of(wrote), store);
    checked
}

/// `units` concurrent checks of `request` in one call on `store`'s current connection within
/// `timeout`, counted for its stall rule as one check.
pub(crate) async fn check_batch<S: Linked>(
    store: &S,
    request: CheckRequest<'_>,
    units: u32,
    timeout: Duration,
) -> Result<BatchOutcome, StoreError> {
    let link = store.link();
    let (generation, connection) = link.current();
    let mut watch = Watch {
        store,
        generation,
        ended: false,
    };
    let checked = script_call::check_batch(connection, request, units, timeout).await;
    watch.ended = true;
    let wrote = checked.as_ref().map(|outcome| outcome.passed > 0);
    link.observe(generation, Health::of(wrote), store);
    checked
}

/// One give-back or reset of `request` on `store`'s current connection within `timeout`
/// (not counted for the stall rule: checks alone tell whether a connection answers).
pub(crate) async fn adjust<S: Linked>(
    store: &S,
    request: AdjustRequest<'_>,
    timeout: Duration,
) -> Result<u64, StoreError> {
    let (_, connection) = store.link().current();
    script_call::adjust(connection, request, timeout).await
}

/// What `request`'s check would answer on `store`'s current connection, counting nothing.
pub(crate) async fn peek<S: Linked>(
    store: &S,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    let (_, connection) = store.link().current();
    script_call::peek(connection, request, timeout).await
}

/// How a check on a connection ended, for its stall rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Answered,
    /// Decided without writing (a refusal): the connection works, but may reach a replica.
    AnsweredWithoutWrite,
    TimedOut,
    /// Redis answered `READONLY`: the connection reaches a replica.
    ReadOnly,
    /// A connection error or another error from Redis: the connection may be broken for
    /// good (redis-rs's connection manager keeps answering a failed reconnect's error, such
    /// as a `SELECT` refused while Redis ran a long script), or the error is the data's.
    Failed,
}

impl Health {
    /// How a check ended: whether the script wrote (it counted at least one request), or
    /// why it failed.
    fn of(wrote: Result<bool, &StoreError>) -> Health {
        match wrote {
            Err(e) if e.kind() == StoreErrorKind::Timeout => Health::TimedOut,
            Err(e) if e.is_read_only() => Health::ReadOnly,
            Err(e) if matches!(e.kind(), StoreErrorKind::Connection | StoreErrorKind::Redis) => {
                Health::Failed
            }
            // Refused: decided without a write, which a replica does as well as a primary.
            Ok(false) => Health::AnsweredWithoutWrite,
            // Counted (the script wrote), or answered in a shape the store refuses: the
            // connection works.
            Ok(true) | Err(_) => Health::Answered,
        }
    }
}

/// A store's connection, replaced when it stalls.
pub(crate) struct Link<C> {
    /// The connection, and how many have come before it.
    connection: RwLock<(u64, C)>,
    /// That count, to compare without the lock.
    generation: AtomicU64,
    /// Failed checks (timeouts, errors) counted towards a stall on the current connection.
    stalled: AtomicU32,
    /// Whether a check on the current connection was answered `READONLY` (or it replaced
    /// one that was) and none has written since: a new connection that answers then
    /// replaces it even though it answers too, and its refusals (decided without a write,
    /// as a replica decides them) count for nothing.
    read_only: AtomicBool,
    /// Whether the probe's back-off has grown since a check on the current connection was
    /// last answered: the next answer resets it.
    backed_off: AtomicBool,
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

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Link<C> {
    pub(crate) fn new(connection: C) -> Self {
        Link {
            connection: RwLock::new((0, connection)),
            generation: AtomicU64::new(0),
            stalled: AtomicU32::new(0),
            read_only: AtomicBool::new(false),
            backed_off: AtomicBool::new(false),
            probe: Mutex::new(Probe {
                running: false,
                not_before: Instant::now() + PROBE_BACKOFF,
                backoff: PROBE_BACKOFF,
            }),
        }
    }

    /// The connection to check on, and its generation.
    pub(crate) fn current(&self) -> (u64, C) {
        match self.connection.read() {
            Ok(connection) => connection.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    fn probe_state(&self) -> MutexGuard<'_, Probe> {
        self.probe
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts how a check on connection `generation` ended; a timeout also when the check
    /// was given up before it ended (a caller's shorter timer dropped it). Results from a
    /// connection already replaced do not count.
    fn observe<S>(self: &Arc<Self>, generation: u64, health: Health, store: &S)
    where
        S: Linked<Connection = C>,
    {
        if generation != self.generation() {
            return;
        }
        if health == Health::ReadOnly {
            self.read_only.store(true, Ordering::Relaxed);
        }
        // A refusal on a connection that was answered `READONLY` tells nothing: a replica
        // refuses as well as a primary (otherwise over-limit clients among the others would
        // reset the back-off, and a server made a replica for good would get a new connection
        // every second again).
        if health == Health::AnsweredWithoutWrite && self.read_only.load(Ordering::Relaxed) {
            return;
        }
        if matches!(health, Health::Answered | Health::AnsweredWithoutWrite) {
            self.read_only.store(false, Ordering::Relaxed);
            if self.stalled.load(Ordering::Relaxed) != 0 || self.backed_off.load(Ordering::Relaxed)
            {
                self.stalled.store(0, Ordering::Relaxed);
                self.backed_off.store(false, Ordering::Relaxed);
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
        let (opening, probe_timeout) = (store.reconnect(), store.probe_timeout());
        // The old connection is asked too, with as long to answer: one that still answers is
        // on a server that is busy now and then (a slow command), not on a silent path, and is
        // kept.
        let old_answers = S::answers(self.current().1);
        let kind = store.kind();
        runtime.spawn(async move {
            let (fresh, old_answers) = tokio::join!(
                tokio::time::timeout(probe_timeout, opening),
                tokio::time::timeout(probe_timeout, old_answers)
            );
            // Refused at once rather than unanswered: the old connection answers a connection
            // or authentication error (as redis-rs's connection manager does for ever once its
            // reconnect was refused). Not `BUSY` or `LOADING`: a busy Redis answers those at
            // once too, and is probed less and less often.
            let old_refused = matches!(&old_answers, Ok(Err(e)) if refused_at_once(e));
            let old_silent = old_answers.is_err();
            let old_answers = matches!(old_answers, Ok(Ok(())));
            // A replica answers `PING` as well as the primary does.
            let old_read_only = link.read_only.load(Ordering::Relaxed);
            let mut probe = link.probe_state();
            probe.running = false;
            match fresh {
                Ok(Ok(fresh)) if !old_answers || old_read_only => {
                    if old_answers {
                        tracing::warn!(
                            target: "ratelimit",
                            store = kind,
                            "rate-limit store: the Redis connection reaches a read-only replica (checks answered READONLY); trying a new connection, which may reach a primary (the address's server is probed less and less often while it stays a replica)"
                        );
                    } else {
                        tracing::warn!(
                            target: "ratelimit",
                            store = kind,
                            "rate-limit store: checks kept failing on a Redis connection that no longer answers, while a new one answers; using the new one"
                        );
                    }
                    let mut connection = match link.connection.write() {
                        Ok(connection) => connection,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    *connection = (connection.0 + 1, fresh);
                    link.generation.store(connection.0, Ordering::Relaxed);
                    link.stalled.store(0, Ordering::Relaxed);
                    // Replaced for reaching a replica: the new connection is not known to
                    // be writable either until a check on it writes, so its refusals do not
                    // reset the back-off.
                    link.read_only.store(old_answers, Ordering::Relaxed);
                    if old_answers {
                        // The old connection answered, on a replica: the new one may reach the
                        // same replica (no failover proxy in front, nowhere else to go), and
                        // replacing it every second would not help. Until a check on the new
                        // one is answered, the wait grows.
                        probe.not_before = Instant::now() + probe.backoff;
                        probe.backoff = (probe.backoff * 2).min(PROBE_BACKOFF_MAX);
                        link.backed_off.store(true, Ordering::Relaxed);
                    } else {
                        probe.backoff = PROBE_BACKOFF;
                        probe.not_before = Instant::now() + PROBE_BACKOFF;
                    }
                }
                // The old connection answers only an error and Redis refused the new one at
                // once too (a password changed, `maxclients` reached, nothing listening): the
                // old one is broken and Redis answers, so the next probe comes a second later,
                // to take over as soon as Redis accepts again (a back-off grown to 16 s would
                // keep a store failing long after the password is restored).
                Ok(Err(_)) if old_refused => {
                    probe.not_before = Instant::now() + PROBE_BACKOFF;
                }
                // Neither the old connection nor a new one answers anything: the path to
                // Redis is silent (packets dropped, a host gone, a paused server). Nothing says
                // a new connection would not help once the path is back, so the next probe
                // comes a second later (a back-off grown to 30 s would keep the store failing
                // for up to that long after Redis is reachable again).
                Err(_) if old_silent => {
                    probe.not_before = Instant::now() + PROBE_BACKOFF;
                }
                // The old connection still answers, if only with an error (the server is busy,
                // not out of reach), or Redis answers a new connection with an error (busy,
                // loading): another connection would not help. Wait longer before trying again.
                Ok(Ok(_)) | Ok(Err(_)) | Err(_) => {
                    probe.not_before = Instant::now() + probe.backoff;
                    probe.backoff = (probe.backoff * 2).min(PROBE_BACKOFF_MAX);
                    link.backed_off.store(true, Ordering::Relaxed);
                }
            }
        });
    }
}

/// An error that says Redis refused the connection itself, not that it is busy.
fn refused_at_once(error: &::redis::RedisError) -> bool {
    error.kind() == ::redis::ErrorKind::AuthenticationFailed
        || error.is_connection_refusal()
        || error.is_io_error()
}

/// Reports a check that was given up before it ended (dropped by a caller's timer) as a
/// timeout of its connection.
struct Watch<'a, S: Linked> {
    store: &'a S,
    generation: u64,
    ended: bool,
}

impl<S: Linked> Drop for Watch<'_, S> {
    fn drop(&mut self) {
        if !self.ended {
            self.store
                .link()
                .observe(self.generation, Health::TimedOut, self.store);
        }
    }
}
