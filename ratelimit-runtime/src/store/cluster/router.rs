//! A check sent to its slot's master over that master's own connection.
//!
//! The slot map is read with `CLUSTER SLOTS` in the background (after a `MOVED`, and while a
//! master's breaker is open) and swapped in whole; a check reads it without a lock. Every
//! master has its own connection, made in the background, and its own breaker: after
//! [`OPEN_AFTER`] checks in a row over at least [`OPEN_SPAN`](super::master::OPEN_SPAN)
//! that found a master silent or unreachable (no reply before their deadline or before
//! their caller gave them up, or the connection failed), its slots fail at once, and
//! nothing else waits.
//! While it is open, the slot map is read again every [`PROBE_EVERY`] from the other nodes,
//! and the master's address is sent a plain `PING`: the breaker closes when the map names
//! another master for its slots (a replica was promoted), or when the address answers.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, Weak,
    },
    time::{Duration, Instant},
};

use ::redis::{
    aio::{ConnectionLike, MultiplexedConnection},
    AsyncConnectionConfig, Client, ConnectionInfo, ErrorKind, RedisError, RedisResult,
    ServerErrorKind, Value,
};
use arc_swap::ArcSwap;

use super::{
    master::{Master, OPEN_AFTER},
    slots::{self, key_slot, Address},
};
use crate::store::{
    script::ScriptCall,
    script_call::{self, ScriptConnection},
};

/// How often an open breaker's master is probed, and the slot map read again.
pub(super) const PROBE_EVERY: Duration = Duration::from_millis(250);

/// How much longer a probe waits for a master's old connection to answer once a new one has:
/// one that answers within it is kept.
const OLD_GRACE: Duration = Duration::from_millis(50);

/// The least time between two reads of the slot map.
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// Nodes asked at once for the slot map.
const ASKED_AT_ONCE: usize = 3;

/// Redirects (`MOVED`, `ASK`) one call follows.
const MAX_REDIRECTS: u32 = 5;

/// The wait before a call answered `TRYAGAIN` (a multi-key call during a slot's migration,
/// some keys moved and some not) is sent again.
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(10);

/// Slot ranges and their masters, sorted by first slot.
#[derive(Default)]
struct SlotMap {
    ranges: Vec<(u16, u16, Arc<Master>)>,
}

impl SlotMap {
    fn master(&self, slot: u16) -> Option<&Arc<Master>> {
        let after = self.ranges.partition_point(|range| range.0 <= slot);
        let range = self.ranges.get(after.checked_sub(1)?)?;
        (slot <= range.1).then_some(&range.2)
    }

    fn names(&self, address: &Address) -> bool {
        self.ranges.iter().any(|range| range.2.address == *address)
    }

    fn masters(&self) -> Vec<Arc<Master>> {
        let mut seen = HashSet::new();
        self.ranges
            .iter()
            .filter(|range| seen.insert(range.2.address.clone()))
            .map(|range| Arc::clone(&range.2))
            .collect()
    }
}

/// How a cluster's nodes are reached.
pub(super) struct Reach {
    /// The seeds' connection settings (credentials, TLS); each node's address replaces theirs.
    pub(super) template: ConnectionInfo,
    pub(super) tls_root: Option<Vec<u8>>,
    pub(super) config: AsyncConnectionConfig,
    pub(super) seeds: Vec<Address>,
    /// How long a node may take to answer a probe's or a refresh's call, connecting included.
    pub(super) probe_timeout: Duration,
}

/// The slot map, the masters and their connections.
pub(super) struct Router {
    reach: Arc<Reach>,
    map: ArcSwap<SlotMap>,
    /// Every master of the map, and the seeds, by address.
    masters: Mutex<HashMap<Address, Arc<Master>>>,
    /// Whether a refresh started by a redirect is under way.
    refreshing: AtomicBool,
    /// One refresh at a time, and when the last one ended.
    refreshed_at: tokio::sync::Mutex<Option<Instant>>,
    /// Counts finished refreshes, so that checks waiting for a first map wake.
    refreshes: tokio::sync::watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

impl Router {
    /// A router with no slot map yet; the first check, or [`Router::refresh_soon`], reads it.
    pub(super) fn new(reach: Arc<Reach>) -> Arc<Router> {
        Arc::new(Router {
            reach,
            map: ArcSwap::from_pointee(SlotMap::default()),
            masters: Mutex::default(),
            refreshing: AtomicBool::new(false),
            refreshed_at: tokio::sync::Mutex::new(None),
            refreshes: tokio::sync::watch::channel(0).0,
            last_error: Mutex::default(),
        })
    }

    /// Another router on the same cluster with the same slot map and connections of its own.
    pub(super) fn fork(&self) -> RedisResult<Arc<Router>> {
        let fork = Router::new(Arc::clone(&self.reach));
        let ranges: Vec<(u16, u16, Address)> = self
            .map
            .load()
            .ranges
            .iter()
            .map(|range| (range.0, range.1, range.2.address.clone()))
            .collect();
        if !ranges.is_empty() {
            fork.apply(ranges)?;
        }
        Ok(fork)
    }

    /// The script's reply to `call` from the master of its key's slot, redirects followed.
    /// With a `deadline` (a check's own timeout), a call it cuts short counts against its
    /// master's breaker; without one (a give-back, a peek) only connection errors do.
    pub(super) async fn run(
        self: &Arc<Self>,
        call: &ScriptCall<'_>,
        deadline: Option<Instant>,
    ) -> RedisResult<Value> {
        let slot = key_slot(call.first_key().as_bytes());
        let mut master = self.master_of(slot).await?;
        let (mut asking, mut redirects) = (false, 0);
        loop {
            if master.is_open() {
                return Err(RedisError::from((
                    ErrorKind::ClusterConnectionNotFound,
                    "the Redis Cluster master of this slot stopped answering; its slots fail at once until it answers or they move to another master",
                    master.address.to_string(),
                )));
            }
            let reply = self.send(&master, call, asking, deadline).await;
            let redirect = reply.as_ref().err().and_then(|error| {
                let moved = error.kind() == ErrorKind::Server(ServerErrorKind::Moved);
                let (address, _) = error.redirect_node()?;
                // A node that does not know its own address names none (`:6381`): it is
                // the one that answered.
                Some((
                    moved,
                    Address::parse_or_host(address, &master.address.host)?,
                ))
            });
            match (reply, redirect) {
                (Err(_), Some((moved, address))) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    if moved {
                        self.refresh_soon();
                    }
                    master = self.master_at(&address)?;
                    asking = !moved;
                }
                (Err(error), _) if error.kind() == ErrorKind::Server(ServerErrorKind::TryAgain) => {
                    tokio::time::sleep(TRY_AGAIN_PAUSE).await;
                    master = self.master_of(slot).await?;
                    asking = false;
                }
                (reply, _) => return reply,
            }
        }
    }

    /// `call` on `master`'s connection (after `ASKING` when `asking`), counted for its
    /// breaker: a connection error counts against it, and so does a check given up before
    /// its reply (its `deadline` passed, or a caller's shorter timer dropped it: a caller
    /// that never waits as long as the store would is otherwise never told the master is
    /// silent); any reply, an error reply included, counts for it. A client that went away
    /// opens nothing while the master answers: every reply starts the count again.
    async fn send(
        self: &Arc<Self>,
        master: &Arc<Master>,
        call: &ScriptCall<'_>,
        asking: bool,
        deadline: Option<Instant>,
    ) -> RedisResult<Value> {
        let attempt = async {
            let held = master.connection().await?;
            let mut connection = held.connection.clone();
            let reply = if asking {
                match after_asking(&mut connection, call.evalsha()).await {
                    Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        after_asking(&mut connection, call.eval()).await
                    }
                    other => other,
                }
            } else {
                script_call::invoke(&mut connection, call).await
            };
            if reply.as_ref().is_err_and(script_call::is_connection_loss) {
                master.drop_connection(held.id);
            }
            reply
        };
        let reply = match deadline {
            Some(deadline) => {
                let mut unanswered = Unanswered {
                    router: self,
                    master,
                    ended: false,
                };
                let Ok(reply) = crate::store::until(deadline.into(), attempt).await else {
                    return Err(RedisError::from(std::io::Error::from(
                        std::io::ErrorKind::TimedOut,
                    )));
                };
                unanswered.ended = true;
                reply
            }
            None => attempt.await,
        };
        match &reply {
            Err(error) if script_call::is_connection_loss(error) || error.is_timeout() => {
                self.failed(master);
            }
            _ => master.answered(),
        }
        reply
    }

    /// Counts a failed call of `master`; the one that opens its breaker starts its probe.
    fn failed(self: &Arc<Self>, master: &Arc<Master>) {
        if !master.failed() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            master.close(); // Nothing could close it again.
            return;
        };
        tracing::warn!(
            target: "ratelimit",
            master = %master.address,
            "rate-limit store: a Redis Cluster master did not answer {OPEN_AFTER} checks in a row; its slots fail at once (each route per its fail mode) until it answers or its slots move to another master"
        );
        runtime.spawn(probe(Arc::downgrade(self), Arc::clone(master)));
    }

    /// The master of `slot` in the slot map, read first if there is none yet.
    async fn master_of(self: &Arc<Self>, slot: u16) -> RedisResult<Arc<Master>> {
        let mut refreshes = self.refreshes.subscribe();
        let mut waited = false;
        loop {
            let map = self.map.load();
            if let Some(master) = map.master(slot) {
                return Ok(Arc::clone(master));
            }
            self.refresh_soon();
            if waited || !map.ranges.is_empty() {
                let why = lock(&self.last_error)
                    .clone()
                    .unwrap_or_else(|| "no master serves it".to_owned());
                return Err(RedisError::from((
                    ErrorKind::ClusterConnectionNotFound,
                    "no master for the slot in the Redis Cluster's slot map",
                    format!("slot {slot}: {why}"),
                )));
            }
            waited = true;
            // Woken by the end of the refresh under way (the router holds the sender).
            let _ = refreshes.changed().await;
        }
    }

    /// The master at `address`, known or new.
    fn master_at(&self, address: &Address) -> RedisResult<Arc<Master>> {
        let mut masters = lock(&self.masters);
        if let Some(master) = masters.get(address) {
            return Ok(Arc::clone(master));
        }
        let master = Arc::new(Master::new(
            address.clone(),
            self.client_for(address)?,
            self.reach.config.clone(),
        ));
        masters.insert(address.clone(), Arc::clone(&master));
        Ok(master)
    }

    /// A client for `address` with the seeds' credentials and TLS.
    fn client_for(&self, address: &Address) -> RedisResult<Client> {
        crate::store::tls::client_at(
            &self.reach.template,
            &address.host,
            address.port,
            self.reach.tls_root.as_deref(),
        )
    }

    /// Starts reading the slot map in the background, unless that is under way.
    pub(super) fn refresh_soon(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refreshing.store(false, Ordering::Release);
            return;
        };
        let router = Arc::clone(self);
        runtime.spawn(async move {
            router.refresh().await;
            router.refreshing.store(false, Ordering::Release);
        });
    }

    /// Reads the slot map from the first node that answers (of the map's masters whose
    /// breaker is closed, then the seeds, [`ASKED_AT_ONCE`] at most) and swaps it in; one
    /// read at a time, and none sooner than [`MIN_REFRESH`] after the last.
    async fn refresh(&self) {
        let mut refreshed_at = self.refreshed_at.lock().await;
        if refreshed_at.is_some_and(|at| at.elapsed() < MIN_REFRESH) {
            return;
        }
        self.read_slot_map().await;
        *refreshed_at = Some(Instant::now());
    }

    async fn read_slot_map(&self) {
        let mut asked: Vec<Arc<Master>> = self.map.load().masters();
        for seed in &self.reach.seeds {
            if asked.iter().all(|master| master.address != *seed) {
                match self.master_at(seed) {
                    Ok(master) => asked.push(master),
                    Err(error) => self.failed_refresh(&error),
                }
            }
        }
        asked.retain(|master| !master.is_open());
        asked.truncate(ASKED_AT_ONCE);
        let bound = self.reach.probe_timeout;
        let reads = asked.into_iter().map(|master| {
            Box::pin(async move {
                let read = async {
                    let mut connection = master.connection().await?.connection.clone();
                    let reply: Value = ::redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query_async(&mut connection)
                        .await?;
                    slots::ranges(&reply, &master.address).ok_or_else(|| {
                        RedisError::from((
                            ErrorKind::UnexpectedReturnType,
                            "CLUSTER SLOTS: no readable slot range",
                        ))
                    })
                };
                match tokio::time::timeout(bound, read).await {
                    Ok(read) => read,
                    Err(_) => Err(RedisError::from((
                        ErrorKind::Io,
                        "CLUSTER SLOTS: no answer in time",
                        master.address.to_string(),
                    ))),
                }
            })
        });
        let read = if reads.len() == 0 {
            Err(RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "no node of the Redis Cluster to ask for its slot map",
            )))
        } else {
            futures_util::future::select_ok(reads)
                .await
                .map(|(ranges, _)| ranges)
        };
        match read.and_then(|ranges| self.apply(ranges)) {
            Ok(()) => *lock(&self.last_error) = None,
            Err(error) => self.failed_refresh(&error),
        }
        self.refreshes.send_modify(|n| *n += 1);
    }

    fn failed_refresh(&self, error: &RedisError) {
        *lock(&self.last_error) = Some(format!("the slot map could not be read: {error}"));
    }

    /// Makes `ranges` the slot map, and starts connecting to its new masters. A master it no
    /// longer names whose breaker is open is forgotten (its probe ends); others are kept,
    /// with their connections, for redirects.
    fn apply(&self, ranges: Vec<(u16, u16, Address)>) -> RedisResult<()> {
        let mut map = SlotMap {
            ranges: Vec::with_capacity(ranges.len()),
        };
        for (first, last, address) in ranges {
            let master = self.master_at(&address)?;
            if master.current().is_none() {
                master.connect_soon();
            }
            map.ranges.push((first, last, master));
        }
        let named: HashSet<Address> = map
            .ranges
            .iter()
            .map(|range| range.2.address.clone())
            .chain(self.reach.seeds.iter().cloned())
            .collect();
        self.map.store(Arc::new(map));
        lock(&self.masters).retain(|address, master| {
            let orphan = !named.contains(address) && master.is_open();
            if orphan {
                master.close();
            }
            !orphan
        });
        Ok(())
    }
}

/// Counts a check that ends without its reply (its deadline passed, or it was dropped)
/// against its master's breaker.
struct Unanswered<'a> {
    router: &'a Arc<Router>,
    master: &'a Arc<Master>,
    ended: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.router.failed(self.master);
        }
    }
}

/// Probes `master` while its breaker is open: closed when the slot map names another master
/// for its slots, or when its address answers. Ends with the router.
async fn probe(router: Weak<Router>, master: Arc<Master>) {
    let moved = async {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let Some(router) = router.upgrade() else {
                return;
            };
            if !master.is_open() {
                return;
            }
            router.refresh().await;
            if !router.map.load().names(&master.address) {
                master.close();
                tracing::warn!(
                    target: "ratelimit",
                    master = %master.address,
                    "rate-limit store: the slots of a Redis Cluster master that stopped answering moved to another master; they are checked there"
                );
                return;
            }
        }
    };
    let answers = async {
        for attempt in 0.. {
            // The first probe at once: a master that only paused answers it.
            if attempt > 0 {
                tokio::time::sleep(PROBE_EVERY).await;
            }
            let Some(bound) = router.upgrade().map(|router| router.reach.probe_timeout) else {
                return;
            };
            if !master.is_open() {
                return;
            }
            if answers(&master, bound).await {
                master.close();
                tracing::warn!(
                    target: "ratelimit",
                    master = %master.address,
                    "rate-limit store: a Redis Cluster master that stopped answering answers again; its slots are checked again"
                );
                return;
            }
        }
    };
    tokio::join!(moved, answers);
}

/// Whether `master` answers a `PING`, on its connection or a new one, within `bound`. The
/// connection checks use is kept when it answers; replaced by the new one when that answers
/// `PONG` and the old one has not within [`OLD_GRACE`] more. So a probe ends as soon as one
/// of them answers: a master whose old connection alone went silent is decided again within
/// a round trip or two, not after `bound`.
async fn answers(master: &Master, bound: Duration) -> bool {
    let current = master.current();
    let old = tokio::time::timeout(bound, async {
        match &current {
            Some(held) => ping(held.connection.clone()).await,
            None => Err(()),
        }
    });
    let fresh = tokio::time::timeout(bound, async {
        let connection = master.connect().await.map_err(drop)?;
        ping(connection.clone())
            .await
            .map(|pong| (connection, pong))
    });
    tokio::pin!(old, fresh);
    tokio::select! {
        biased;
        old_reply = &mut old => {
            matches!(old_reply, Ok(Ok(_))) || took_over(master, fresh.await)
        }
        fresh_reply = &mut fresh => match fresh_reply {
            Ok(Ok((_, true))) => {
                // On a server that was busy rather than out of reach, both answer once it
                // is done, the old one (asked first) most often first: it is kept.
                matches!(tokio::time::timeout(OLD_GRACE, &mut old).await, Ok(Ok(Ok(_))))
                    || took_over(master, fresh_reply)
            }
            // Answered, with an error (`BUSY`, `LOADING`): the server is there, and its old
            // connection may still answer once it is done.
            Ok(Ok((_, false))) => true,
            // No new connection: the old one may still answer within the bound.
            _ => matches!(old.await, Ok(Ok(_))),
        },
    }
}

/// Whether the probe's new connection answered: made the one checks use when it answered
/// `PONG`; true too when it answered an error (the server is there, busy or loading, and
/// the old connection may answer once it is done).
fn took_over(
    master: &Master,
    fresh: Result<Result<(MultiplexedConnection, bool), ()>, tokio::time::error::Elapsed>,
) -> bool {
    match fresh {
        Ok(Ok((connection, true))) => {
            tracing::warn!(
                target: "ratelimit",
                master = %master.address,
                "rate-limit store: checks kept failing on a Redis Cluster master's connection that no longer answers, while a new one answers; using the new one"
            );
            master.install(connection);
            true
        }
        Ok(Ok((_, false))) => true,
        _ => false,
    }
}

/// A `PING`'s answer: `Ok(true)` for `PONG` (or an ACL's refusal, which only a live,
/// authenticated connection gets), `Ok(false)` for another error reply, `Err` for none.
async fn ping(mut connection: MultiplexedConnection) -> Result<bool, ()> {
    match ::redis::cmd("PING")
        .query_async::<()>(&mut connection)
        .await
    {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => Ok(true),
        Err(error) if matches!(error.kind(), ErrorKind::Server(_)) => Ok(false),
        Err(_) => Err(()),
    }
}

/// `command` right after `ASKING`, in one pipeline on one connection: the importing node
/// runs it only right after an `ASKING` on the same connection, and in the pipeline nothing
/// else that shares the connection comes between them.
async fn after_asking(
    connection: &mut MultiplexedConnection,
    command: ::redis::Cmd,
) -> RedisResult<Value> {
    let mut pipeline = ::redis::pipe();
    pipeline.cmd("ASKING").add_command(command);
    match connection.req_packed_commands(&pipeline, 1, 1).await?.pop() {
        Some(Value::ServerError(error)) => Err(error.into()),
        Some(reply) => Ok(reply),
        None => Err(RedisError::from((
            ErrorKind::Parse,
            "no reply to the script call",
        ))),
    }
}

/// The router as the connection a check's script runs over, with the check's deadline
/// (`None` for a give-back or a peek).
pub(super) struct Routed<'a> {
    pub(super) router: &'a Arc<Router>,
    pub(super) deadline: Option<Instant>,
}

impl ScriptConnection for Routed<'_> {
    fn run<'a>(
        &'a mut self,
        call: &'a ScriptCall<'a>,
    ) -> impl std::future::Future<Output = RedisResult<Value>> + Send + 'a {
        self.router.run(call, self.deadline)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
