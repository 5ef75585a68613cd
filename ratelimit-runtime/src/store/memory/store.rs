use std::{
    collections::hash_map::RandomState,
    fmt,
    hash::BuildHasher,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex, MutexGuard, PoisonError,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use super::{
    adjust, fixed_window, gcra,
    peek::Peek,
    sliding_log, sliding_window,
    table::{Rank, StoredEntry, Table, Write},
};
use crate::{
    key::{algorithm_code, RouteKey},
    policy::{Algorithm, Limit},
    store::{
        decision::in_order, script::block_key, AdjustFuture, AdjustRequest, Adjustment,
        CheckFuture, CheckRequest, Decision, LimitState, Receipt, Store,
    },
};

/// How many keys a [`MemoryStore`] holds at most, unless configured otherwise.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// Route keys are spread over this many independently locked shards.
const SHARDS: usize = 16;
/// The fewest keys a shard holds, below which the store takes fewer shards.
const MIN_SHARD_KEYS: usize = 64;

/// Counters in process memory, with the same semantics as the Redis scripts.
///
/// For a single instance and for tests: with several instances each one counts only what
/// it sees (see the crate docs). All limits of one check are decided under one lock, so
/// checks are atomic and all-or-nothing like the script. Memory is bounded: expired keys are
/// swept as new ones arrive, and at most `capacity` keys are kept (one per limit and
/// client, as in Redis). When full with nothing expired, the store evicts the keys whose
/// clients had spent the least at their last count (the fewest requests, then the smallest
/// share of the budget, then the closest to expiry), since eviction hands a client back what
/// it spent: evicting a client that spent n requests takes a flood of new keys that each
/// spent n or more.
/// The first eviction of a live key, and each time the total doubles, is logged as a
/// warning ([`evicted`](Self::evicted) counts them): the capacity is too small for the
/// traffic. The capacity is split evenly across 16 shards (fewer, of 64 keys at least, for a
/// capacity under 1,024).
///
/// Time is the injected `now_millis`, else a monotonic clock started at the system time
/// when the store was built (a step of the system clock does not move it).
pub struct MemoryStore {
    shards: Box<[Mutex<Table>]>,
    hasher: RandomState,
    evicted: AtomicU64,
    clock: MonotonicMillis,
    /// A setting the builder refused, for the limiter's startup check.
    refused: Option<String>,
}

impl MemoryStore {
    /// A store holding at most [`DEFAULT_CAPACITY`] keys: exactly
    /// [`builder`](Self::builder)`().build()`, the defaults without a builder.
    pub fn new() -> Self {
        MemoryStore::builder().build()
    }

    /// A builder, to set the capacity; with nothing set it builds what
    /// [`new`](Self::new) does.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            capacity: DEFAULT_CAPACITY,
            refused: None,
        }
    }

    /// The live entry stored under `key` (a key as Redis names it, such as
    /// `rl:{GET:/x|ip:1.2.3.4}:fw60000`) at `now_millis`.
    pub fn entry(&self, key: &str, now_millis: u64) -> Option<StoredEntry> {
        self.lock(hash_tag(key)).entry(key, now_millis).cloned()
    }

    /// Every stored key with its entry, expired ones that were not swept yet included.
    // Hidden from the docs: it lists every key for this workspace's tests; users look a key
    // up with `entry`.
    #[doc(hidden)]
    pub fn entries(&self) -> Vec<(String, StoredEntry)> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            all.extend(shard.entries().map(|(k, e)| (k.to_owned(), e.clone())));
        }
        all
    }

    /// How many live keys the store has evicted to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// How many keys are stored (expired ones that were not swept yet included).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, tag: &str) -> usize {
        (self.hasher.hash_one(tag) % self.shards.len() as u64) as usize
    }

    fn lock(&self, tag: &str) -> MutexGuard<'_, Table> {
        self.lock_shard(self.shard(tag))
    }

    fn lock_shard(&self, index: usize) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave a table half-written in a way that
        // matters more than losing it: keep serving.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn decide(&self, request: &CheckRequest<'_>) -> Decision {
        let now = request.now_millis.unwrap_or_else(|| self.clock.now());
        if request.limits.first().is_some_and(Limit::is_ban) {
            return self.decide_banning(request, now);
        }
        if request.key.spans_identities(request.limits) {
            return self.decide_groups(request, now);
        }
        let mut table = self.lock(request.key.hash_tag());
        let mut peeks = peek_all(&mut table, request.key, request.limits, now);
        let allowed = peeks.iter().all(|(p, _)| p.allowed);
        let (limits, writes) = finish(
            &mut table,
            request.key,
            request.limits,
            &mut peeks,
            allowed,
            now,
        );
        let evicted = apply(&mut table, writes, now);
        drop(table);
        self.after(evicted, limits, allowed, now)
    }

    /// A check whose stack starts with bans, as `scripts/check.lua` decides it: a ban that
    /// holds refuses the whole stack, no limit read; when a limit refuses (or a ban counts a
    /// refusal decided elsewhere, `br`), each ban counts it, and starts at its max. Each ban
    /// is read and written under its shard's lock, and the limits are decided as a check
    /// without bans, under theirs: unlike the script, a request decided while another thread
    /// starts the ban may still pass.
    fn decide_banning(&self, request: &CheckRequest<'_>, now: u64) -> Decision {
        let (bans, rest) = crate::store::ban::split_bans(request.limits);
        for (i, ban) in bans.iter().enumerate() {
            let bkey = block_key(request.key, ban);
            let blocked = adjust::blocked_for(&self.lock(hash_tag(&bkey)), &bkey, now);
            if blocked > 0 {
                return crate::store::ban::banned(request.limits, blocked, i, None);
            }
        }
        let mut ban_states: Vec<LimitState> = bans
            .iter()
            .map(|ban| crate::store::ban::open(*ban, ban.max()))
            .collect();
        let rest_request = CheckRequest {
            key: request.key,
            limits: rest,
            now_millis: Some(now),
        };
        let mut decided = if rest.is_empty() {
            Decision::new(Vec::new()).with_receipt(Receipt::new(now, None))
        } else {
            self.decide(&rest_request)
        };
        let refused_elsewhere = bans.iter().any(|b| b.ban_code() == Some("br"));
        if !decided.allowed || refused_elsewhere {
            for (ban, state) in bans.iter().zip(&mut ban_states) {
                let (stem, bkey) = (request.key.limit_key(ban), block_key(request.key, ban));
                let mut table = self.lock(hash_tag(&stem));
                let window = ban.window().as_millis();
                let peek =
                    fixed_window::peek(&table, &stem, (u64::from(ban.max()), 1), window, now);
                let mut writes = Vec::new();
                if peek.allowed && peek.remaining > 0 {
                    writes.extend(peek.write.clone().map(|write| (write, peek.rank)));
                    *state = crate::store::ban::open(*ban, peek.remaining as u32);
                } else {
                    let block = ban.block().map_or(0, |b| b.as_millis());
                    table.remove(&stem);
                    writes.push(adjust::lockout(bkey, now, block));
                    *state = crate::store::ban::started(*ban, block, &mut decided.limits);
                }
                let evicted = apply(&mut table, writes, now);
                drop(table);
                self.after(evicted, Vec::new(), false, now);
            }
        }
        let receipt = decided.receipt.take();
        ban_states.append(&mut decided.limits);
        let decision = Decision::new(ban_states);
        match receipt {
            Some(receipt) if decision.allowed && !refused_elsewhere => {
                decision.with_receipt(receipt)
            }
            _ => decision,
        }
    }

    /// A check whose limits count different identities, with keys under several hash tags:
    /// every shard they live in is locked (in order, so two such checks cannot deadlock),
    /// and the limits are decided together as in one table.
    fn decide_groups(&self, request: &CheckRequest<'_>, now: u64) -> Decision {
        let groups = request.key.groups(request.limits);
        let (shards, mut tables) = self.lock_groups(&groups);
        let mut peeks: Vec<Vec<(Peek, Option<String>)>> = Vec::with_capacity(groups.len());
        for ((key, limits), shard) in groups.iter().zip(&shards) {
            let table = locked(&mut tables, *shard);
            peeks.push(peek_all(table, key, limits, now));
        }
        let allowed = peeks.iter().flatten().all(|(p, _)| p.allowed);
        let mut states = Vec::with_capacity(request.limits.len());
        let mut writes: Vec<(usize, Vec<(Write, Rank)>)> = Vec::new();
        for (((key, limits), shard), group_peeks) in groups.iter().zip(&shards).zip(&mut peeks) {
            let table = locked(&mut tables, *shard);
            let (group_states, group_writes) =
                finish(table, key, limits, group_peeks, allowed, now);
            states.extend(group_states);
            match writes.iter_mut().find(|(s, _)| s == shard) {
                Some((_, pending)) => pending.extend(group_writes),
                None => writes.push((*shard, group_writes)),
            }
        }
        let mut evicted = 0;
        for (shard, pending) in writes {
            evicted += apply(locked(&mut tables, shard), pending, now);
        }
        drop(tables);
        let limits = in_order(request.limits, states).expect("a state per limit");
        self.after(evicted, limits, allowed, now)
    }

    /// The shard of each of `groups` (one per hash tag), and every one of them locked, in
    /// order, so that two checks locking several cannot deadlock.
    fn lock_groups(
        &self,
        groups: &[(RouteKey, Vec<Limit>)],
    ) -> (Vec<usize>, Vec<(usize, MutexGuard<'_, Table>)>) {
        let shards: Vec<usize> = groups
            .iter()
            .map(|(key, _)| self.shard(key.hash_tag()))
            .collect();
        let mut order = shards.clone();
        order.sort_unstable();
        order.dedup();
        let tables = order.iter().map(|i| (*i, self.lock_shard(*i))).collect();
        (shards, tables)
    }

    /// A check that may wait up to `wait` ms for its turn, as `scripts/reserve.lua`: the
    /// earliest time from now at which every limit lets the request in, and the request
    /// counted then. Every shard the limits live in is locked for the search and the count.
    fn reserve_decide(&self, request: &CheckRequest<'_>, wait: u64) -> Decision {
        let now = request.now_millis.unwrap_or_else(|| self.clock.now());
        let groups = request.key.groups(request.limits);
        let (shards, mut tables) = self.lock_groups(&groups);
        // What left a log's window by now counts for no one any more.
        for ((key, limits), shard) in groups.iter().zip(&shards) {
            let table = locked(&mut tables, *shard);
            for limit in limits
                .iter()
                .filter(|l| l.algorithm() == Algorithm::SlidingLog)
            {
                let window = limit.window().as_millis();
                table.pruned_log(&key.limit_key(limit), now, now.checked_sub(window));
            }
        }
        let (mut at, mut moves) = (now, 0);
        let peeks = loop {
            let mut peeks = Vec::with_capacity(groups.len());
            let mut later = at;
            for ((key, limits), shard) in groups.iter().zip(&shards) {
                let table = locked(&mut tables, *shard);
                let group: Vec<Peek> = limits
                    .iter()
                    .map(|l| peek_ahead(table, key, l, at))
                    .collect();
                for peek in group.iter().filter(|p| !p.allowed) {
                    later = later.max(at + peek.retry_after);
                }
                peeks.push(group);
            }
            moves += 1;
            if later == at || later - now > wait || moves >= MAX_MOVES {
                break peeks;
            }
            at = later;
        };
        let allowed = peeks.iter().flatten().all(|p| p.allowed);
        let delay = at - now;
        let mut states = Vec::with_capacity(request.limits.len());
        let mut evicted = 0;
        for (((_, limits), shard), group) in groups.iter().zip(&shards).zip(peeks) {
            let mut writes = Vec::new();
            for (limit, mut peek) in limits.iter().zip(group) {
                if allowed {
                    if let Some(write) = peek.write.take() {
                        writes.push((written_ahead(write, limit, delay, now), peek.rank));
                    }
                } else {
                    // Figures from the time of the call.
                    if !peek.allowed {
                        peek.retry_after += delay;
                    }
                    peek.reset_after += delay;
                }
                states.push(state_of(*limit, &peek));
            }
            evicted += apply(locked(&mut tables, *shard), writes, now);
        }
        drop(tables);
        let limits = in_order(request.limits, states).expect("a state per limit");
        if evicted > 0 {
            self.note_evictions(evicted as u64);
        }
        let decision = Decision::new(limits);
        if allowed {
            decision
                .with_receipt(Receipt::new(at, None))
                .waiting(Duration::from_millis(delay))
        } else {
            decision
        }
    }

    /// What a check of `request` would answer now, counting nothing: its first phase, as
    /// `scripts/peek.lua` answers (a lockout a refusal would start is not started). Each
    /// identity's limits are read under their shard's lock.
    fn look(&self, request: &CheckRequest<'_>) -> Decision {
        let now = request.now_millis.unwrap_or_else(|| self.clock.now());
        let mut states = Vec::with_capacity(request.limits.len());
        for (key, limits) in request.key.groups(request.limits) {
            let peeks = peek_all(&mut self.lock(key.hash_tag()), &key, &limits, now);
            states.extend(
                limits
                    .iter()
                    .zip(&peeks)
                    .map(|(limit, (p, _))| state_of(*limit, p)),
            );
        }
        Decision::new(in_order(request.limits, states).expect("a state per limit"))
    }

    /// The decision, once the tables are unlocked; evictions counted.
    fn after(&self, evicted: usize, limits: Vec<LimitState>, allowed: bool, now: u64) -> Decision {
        if evicted > 0 {
            self.note_evictions(evicted as u64);
        }
        let decision = Decision::new(limits);
        if allowed {
            decision.with_receipt(Receipt::new(now, None))
        } else {
            decision
        }
    }

    /// Gives units back, or resets, as `scripts/give_back.lua` does.
    /// (Limits of other identities live under other hash tags, in other shards: each
    /// identity's limits are changed under their shard's lock.)
    fn change(&self, request: &AdjustRequest<'_>) -> u64 {
        let now = request.now_millis.unwrap_or_else(|| self.clock.now());
        let groups = request.key.groups(request.limits);
        groups
            .iter()
            .map(|(key, limits)| self.change_group(key, limits, request.change, now))
            .sum()
    }

    fn change_group(
        &self,
        route_key: &RouteKey,
        limits: &[Limit],
        change: Adjustment<'_>,
        now: u64,
    ) -> u64 {
        let mut table = self.lock(route_key.hash_tag());
        let mut changed = 0;
        // A renewal answers the earliest end of the leases it renewed, 0 when one was gone.
        let mut renewed: Option<u64> = None;
        for limit in limits {
            let key = route_key.limit_key(limit);
            match change {
                Adjustment::Release { receipt } if limit.is_concurrency() => {
                    let (window, at) = (limit.window().as_millis(), receipt.counted_at_millis());
                    changed += adjust::release(&mut table, &key, window, at, now);
                }
                Adjustment::Renew { receipt } if limit.is_concurrency() => {
                    let (window, at) = (limit.window().as_millis(), receipt.counted_at_millis());
                    let ends = adjust::renew(&mut table, &key, window, at, now).unwrap_or(0);
                    renewed = Some(renewed.map_or(ends, |earlier| earlier.min(ends)));
                }
                Adjustment::Release { .. } | Adjustment::Renew { .. } => {}
                Adjustment::GiveBack { units, receipt } => {
                    let receipt = Receipt::for_units(receipt);
                    let bounds = (
                        algorithm_code(limit.algorithm()),
                        u64::from(limit.max()),
                        limit.window().as_millis(),
                    );
                    let counted_at = receipt.map(Receipt::counted_at_millis);
                    changed += adjust::give_back(
                        &mut table,
                        &key,
                        bounds,
                        crate::store::script::give_back_units(units, receipt.is_some(), limit),
                        counted_at,
                        now,
                    );
                }
                Adjustment::Charge { units } => {
                    let bounds = (
                        limit.algorithm(),
                        u64::from(limit.max()),
                        limit.window().as_millis(),
                    );
                    let (charged, evicted) =
                        adjust::charge(&mut table, &key, bounds, u64::from(units), now);
                    changed += charged;
                    if evicted > 0 {
                        self.note_evictions(evicted as u64);
                    }
                }
                Adjustment::Reset => {
                    let mut keys = vec![key];
                    keys.extend(limit.block().map(|_| block_key(route_key, limit)));
                    for key in keys {
                        if table.get(&key, now).is_some() {
                            changed += 1;
                        }
                        table.remove(&key);
                    }
                }
            }
        }
        renewed.unwrap_or(changed)
    }

    /// Counts evictions, and warns at the first and whenever the total doubles.
    fn note_evictions(&self, evicted: u64) {
        let before = self.evicted.fetch_add(evicted, Ordering::Relaxed);
        let total = before + evicted;
        if before == 0 || total.ilog2() > before.ilog2() {
            tracing::warn!(
                target: "ratelimit",
                store = "memory",
                evicted = total,
                capacity = self.capacity(),
                "rate-limit store: the in-memory store is full and evicts live keys (the clients that had spent the least of their budget get it back); raise its capacity or use Redis"
            );
        }
    }

    fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).capacity())
            .sum()
    }
}

/// Applies `writes` to `table` at once: how many live entries were evicted to make room.
fn apply(table: &mut Table, writes: Vec<(Write, Rank)>, now: u64) -> usize {
    if writes.is_empty() {
        0
    } else {
        table.apply(writes, now)
    }
}

/// The locked table of `shard` among `tables`.
fn locked<'a>(tables: &'a mut [(usize, MutexGuard<'_, Table>)], shard: usize) -> &'a mut Table {
    let (_, guard) = tables
        .iter_mut()
        .find(|(i, _)| *i == shard)
        .expect("every shard of the check is locked");
    guard
}

/// Per limit: its peek, and its lockout key when it has a block and is not locked out.
fn peek_all(
    table: &mut Table,
    key: &RouteKey,
    limits: &[Limit],
    now: u64,
) -> Vec<(Peek, Option<String>)> {
    let mut peeks = Vec::with_capacity(limits.len());
    for limit in limits {
        let bkey = limit.block().map(|_| block_key(key, limit));
        let blocked = bkey
            .as_deref()
            .map_or(0, |bkey| adjust::blocked_for(table, bkey, now));
        if blocked > 0 {
            peeks.push((Peek::rejected(blocked, blocked), None));
            continue;
        }
        let stem = key.limit_key(limit);
        let max = (u64::from(limit.max()), u64::from(limit.cost()));
        let window = limit.window().as_millis();
        let peek = match limit.algorithm() {
            Algorithm::FixedWindow => fixed_window::peek(table, &stem, max, window, now),
            Algorithm::SlidingWindow => sliding_window::peek(table, &stem, max, window, now),
            Algorithm::SlidingLog => sliding_log::peek(table, &stem, max, window, now),
            Algorithm::Gcra => gcra::peek(table, &stem, max, window, now),
            // `Algorithm` is non-exhaustive for users; the assertion below fails to compile
            // when one is added without a peek here.
            _ => unreachable!("an algorithm without a memory-store peek"),
        };
        peeks.push((peek, bkey));
    }
    peeks
}

/// The most times a reservation's search moves its time (as `scripts/reserve.lua`): a fixed
/// window moves one window at a time.
const MAX_MOVES: u32 = 1024;

/// `limit`'s peek at `at`, a time that may lie ahead of the store's: what it would answer
/// then, counting what was reserved for later times too.
fn peek_ahead(table: &Table, key: &RouteKey, limit: &Limit, at: u64) -> Peek {
    let stem = key.limit_key(limit);
    let max = (u64::from(limit.max()), u64::from(limit.cost()));
    let window = limit.window().as_millis();
    match limit.algorithm() {
        Algorithm::FixedWindow => fixed_window::peek(table, &stem, max, window, at),
        Algorithm::SlidingWindow => sliding_window::peek(table, &stem, max, window, at),
        Algorithm::SlidingLog => sliding_log::peek_ahead(table, &stem, max, window, at),
        Algorithm::Gcra => gcra::peek(table, &stem, max, window, at),
        _ => unreachable!("an algorithm without a memory-store peek"),
    }
}

/// A peek's write at a time `delay` ms after `now`, made a write at `now`: the key lives
/// that much longer, and the window counters that still count now stay.
fn written_ahead(write: Write, limit: &Limit, delay: u64, now: u64) -> Write {
    let window = limit.window().as_millis();
    match write {
        Write::Increment {
            key,
            window: start,
            ttl,
            oldest,
            by,
        } => {
            let current = now - now % window;
            let counts = if limit.algorithm() == Algorithm::SlidingWindow {
                current.saturating_sub(window)
            } else {
                current
            };
            Write::Increment {
                key,
                window: start,
                ttl: ttl + delay,
                oldest: oldest.min(counts),
                by,
            }
        }
        Write::Append {
            key,
            at,
            ttl,
            count,
        } => Write::Append {
            key,
            at,
            ttl: ttl + delay,
            count,
        },
        Write::SetTat { key, tat, ttl } => Write::SetTat {
            key,
            tat,
            ttl: ttl + delay,
        },
        lockout @ Write::Lockout { .. } => lockout,
    }
}

/// What `peek` tells of `limit`.
fn state_of(limit: Limit, peek: &Peek) -> LimitState {
    LimitState::new(
        limit,
        peek.allowed,
        u32::try_from(peek.remaining).unwrap_or(u32::MAX),
        Duration::from_millis(peek.retry_after),
        Duration::from_millis(peek.reset_after),
    )
}

/// The commit phase on one table: every write when the request is `allowed`; else each
/// limit with a block that refused by its own count locks the client out (for its block, or
/// until its budget would be whole if later), its count gone so the budget is whole when
/// the lockout ends. The states of `limits`, and the writes to
/// apply to the table (at once with every other write of the check to that table, so that
/// making room for one cannot evict another).
fn finish(
    table: &mut Table,
    key: &RouteKey,
    limits: &[Limit],
    peeks: &mut [(Peek, Option<String>)],
    allowed: bool,
    now: u64,
) -> (Vec<LimitState>, Vec<(Write, Rank)>) {
    let mut writes = Vec::new();
    if !allowed {
        for (limit, (peek, bkey)) in limits.iter().zip(peeks.iter_mut()) {
            if let (false, Some(bkey), Some(block)) = (peek.allowed, bkey.take(), limit.block()) {
                // At least until the budget would have been whole anyway: a block shorter
                // than the window must not hand out a whole budget per block.
                let lockout = block.as_millis().max(peek.reset_after);
                table.remove(&key.limit_key(limit));
                writes.push(adjust::lockout(bkey, now, lockout));
                *peek = Peek::rejected(lockout, lockout);
            }
        }
    }
    let states = limits
        .iter()
        .zip(peeks.iter())
        .map(|(limit, (p, _))| state_of(*limit, p))
        .collect();
    if allowed {
        writes.extend(
            limits
                .iter()
                .zip(peeks.iter_mut())
                .filter_map(|(limit, (p, _))| {
                    // A concurrency limit's places are evicted last, as a lockout is: evicting them
                    // would let more requests run at once than the limit says.
                    let rank = if limit.is_concurrency() {
                        adjust::HELD
                    } else {
                        p.rank
                    };
                    p.write.take().map(|write| (write, rank))
                }),
        );
    }
    (states, writes)
}

// Every algorithm has a peek in `MemoryStore::check`: this fails to compile when one is
// added to the grammar, until the match there has its arm.
const _: () = assert!(Algorithm::ALL.len() == 4);

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("keys", &self.len())
            .finish()
    }
}

impl Store for MemoryStore {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        let checked = match request.time_out_of_range() {
            Some(error) => Err(error),
            None => Ok(self.decide(&request)),
        };
        Box::pin(std::future::ready(checked))
    }

    fn reserve<'a>(&'a self, request: CheckRequest<'a>, wait: Duration) -> CheckFuture<'a> {
        let checked = match request.time_out_of_range() {
            Some(error) => Err(error),
            None if !crate::store::check::reservable(request.limits) => Ok(self.decide(&request)),
            None => Ok(self.reserve_decide(
                &request,
                u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            )),
        };
        Box::pin(std::future::ready(checked))
    }

    fn refused_settings(&self) -> Vec<String> {
        self.refused.iter().cloned().collect()
    }

    fn adjust<'a>(&'a self, request: AdjustRequest<'a>) -> AdjustFuture<'a> {
        let changed = match request.time_out_of_range() {
            Some(error) => Err(error),
            None => Ok(self.change(&request)),
        };
        Box::pin(std::future::ready(changed))
    }

    fn peek<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        let looked = match request.time_out_of_range() {
            Some(error) => Err(error),
            None => Ok(self.look(&request)),
        };
        Box::pin(std::future::ready(looked))
    }

    fn bans(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
#[must_use]
pub struct MemoryStoreBuilder {
    capacity: usize,
    refused: Option<String>,
}

impl MemoryStoreBuilder {
    /// The most keys the store holds (default [`DEFAULT_CAPACITY`]).
    ///
    /// 0 is refused ([`Store::refused_settings`], which
    /// [`RateLimiter::check_settings`](crate::RateLimiter::check_settings) reports, so an App
    /// wrapped with a limiter counting in the store does not start): a store holding nothing
    /// would evict a live client for every new one, and there is no unbounded store. The
    /// capacity stays as it was.
    pub fn capacity(mut self, keys: usize) -> Self {
        if keys == 0 {
            self.refused = Some(format!(
                "`MemoryStore::builder().capacity(0)`: a memory store holds at least one key (default {DEFAULT_CAPACITY}); there is no unbounded store"
            ));
        } else {
            self.capacity = keys;
            self.refused = None;
        }
        self
    }

    /// Builds the store.
    pub fn build(self) -> MemoryStore {
        // The shares add up to the capacity exactly (rounding every share up would let the
        // store hold up to SHARDS - 1 keys more than asked). A small capacity takes fewer
        // shards: keys land in shards by hash, and a full shard evicts a live client while
        // another has room.
        let shards = (self.capacity / MIN_SHARD_KEYS).clamp(1, SHARDS);
        let (share, rest) = (self.capacity / shards, self.capacity % shards);
        MemoryStore {
            shards: (0..shards)
                .map(|i| Mutex::new(Table::new(share + usize::from(i < rest))))
                .collect(),
            hasher: RandomState::new(),
            evicted: AtomicU64::new(0),
            clock: MonotonicMillis::new(),
            refused: self.refused,
        }
    }
}

/// The text Redis Cluster would hash: from the first `{` to the first `}` after it.
fn hash_tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            key[open + 1..]
                .find('}')
                .map(|close| &key[open + 1..open + 1 + close])
        })
        .unwrap_or(key)
}

/// The store's own clock: Unix milliseconds read once, when the store is built, then
/// advanced by a monotonic clock. The store only compares its own readings, so a step of
/// the system clock (an NTP correction, a VM resumed) must neither lock clients out for the
/// length of a step back nor hand every budget back on a step forward.
struct MonotonicMillis {
    start: Instant,
    start_millis: u64,
}

impl MonotonicMillis {
    fn new() -> Self {
        let start_millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        MonotonicMillis {
            start: Instant::now(),
            start_millis,
        }
    }

    fn now(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.start_millis.saturating_add(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        key::RouteKey,
        policy::{IdentityPart, Limit, Window},
        store::StoredValue,
    };

    #[test]
    fn entries_are_found_by_their_redis_key() {
        let store = MemoryStore::new();
        let key = RouteKey::new("rl", "GET", "/x", &[(IdentityPart::Ip, "1.2.3.4")]);
        let limits = [Limit::new(5, Window::from_secs(60), Algorithm::FixedWindow)];
        let now = 1_700_000_040_000;
        let decision = store.decide(&CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: Some(now),
        });
        assert!(decision.allowed);
        let stored = key.limit_key(&limits[0]);
        let entry = store.entry(&stored, now).expect("counter stored");
        assert_eq!(entry.value, StoredValue::Windows(vec![(now, 1)]));
        assert_eq!(entry.expires_at, now + 60_000);
        assert_eq!(store.entries().len(), 1);
    }

    #[test]
    fn the_capacity_bounds_the_store() {
        let store = MemoryStore::builder().capacity(64).build();
        let limits = [Limit::new(
            5,
            Window::from_secs(60),
            Algorithm::SlidingWindow,
        )];
        for i in 0..5_000 {
            let key = RouteKey::new("rl", "GET", "/x", &[(IdentityPart::UserId, &i.to_string())]);
            store.decide(&CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(1_000_000 + i),
            });
        }
        assert!(store.len() <= 64, "{}", store.len());
    }

    #[test]
    fn a_capacity_under_the_shard_count_is_still_the_bound() {
        for capacity in [1, 3, 15] {
            let store = MemoryStore::builder().capacity(capacity).build();
            let limits = [Limit::new(5, Window::from_secs(60), Algorithm::FixedWindow)];
            for i in 0..200 {
                let key =
                    RouteKey::new("rl", "GET", "/x", &[(IdentityPart::UserId, &i.to_string())]);
                store.decide(&CheckRequest {
                    key: &key,
                    limits: &limits,
                    now_millis: Some(1_000_000 + i),
                });
            }
            assert_eq!(store.len(), capacity);
        }
    }

    /// A small store is one table: as many live clients as its capacity all keep their
    /// counts (spread over shards by hash, two could land in one shard of one key and evict
    /// each other while another shard stood empty, each getting its budget back).
    #[test]
    fn a_small_store_keeps_as_many_live_clients_as_its_capacity() {
        let limits = [Limit::new(1, Window::from_secs(60), Algorithm::FixedWindow)];
        for round in 0..50u64 {
            let store = MemoryStore::builder().capacity(2).build();
            let keys: Vec<RouteKey> = (0..2)
                .map(|i| {
                    let id = format!("{round}-{i}");
                    RouteKey::new("rl", "GET", "/x", &[(IdentityPart::UserId, &id)])
                })
                .collect();
            for (at, key) in keys.iter().chain(&keys).enumerate() {
                let decided = store.decide(&CheckRequest {
                    key,
                    limits: &limits,
                    now_millis: Some(1_000_000 + at as u64),
                });
                assert_eq!(decided.allowed, at < 2, "round {round}, check {at}");
            }
        }
    }

    #[test]
    fn a_capacity_that_is_no_multiple_of_the_shard_count_is_still_the_bound() {
        let store = MemoryStore::builder().capacity(1_000).build();
        let limits = [Limit::new(5, Window::from_secs(60), Algorithm::Gcra)];
        for i in 0..20_000 {
            let key = RouteKey::new("rl", "GET", "/x", &[(IdentityPart::UserId, &i.to_string())]);
            store.decide(&CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(1_000_000 + i),
            });
        }
        // 20,000 live keys fill every shard.
        assert_eq!(store.len(), 1_000);
    }

    fn allowed(store: &MemoryStore, key: &RouteKey, limits: &[Limit], now: u64) -> bool {
        store
            .decide(&CheckRequest {
                key,
                limits,
                now_millis: Some(now),
            })
            .allowed
    }

    /// A flood of made-up usernames from the same address (each a new key, each allowed)
    /// must not give back a login budget spent first: eviction by expiry alone would take
    /// the oldest key, that budget, and give all ten guesses back minutes early; ranking by
    /// the share of the budget first would let one request per made-up user on a 1-per-hour
    /// route evict a budget spent to 9 of 10 (share 900 against the flood's 1000).
    #[test]
    fn a_flood_of_new_keys_does_not_give_back_a_spent_budget() {
        let t0 = 1_700_000_040_000;
        let client = |route: &str, username: &str| {
            RouteKey::new(
                "rl",
                "POST",
                route,
                &[
                    (IdentityPart::Ip, "203.0.113.7"),
                    (IdentityPart::Username, username),
                ],
            )
        };
        let login = [Limit::new(
            10,
            Window::from_secs(300),
            Algorithm::SlidingLog,
        )];
        let floods = [
            ("/login", login, 1),
            (
                "/resend",
                [Limit::new(
                    1,
                    Window::from_secs(3_600),
                    Algorithm::FixedWindow,
                )],
                1,
            ),
            (
                "/password-reset",
                [Limit::new(5, Window::from_secs(900), Algorithm::SlidingLog)],
                5,
            ),
        ];
        let cases = floods.iter().flat_map(|flood| [(flood, 20), (flood, 9)]);
        for (&(route, limits, each), guesses) in cases {
            let store = MemoryStore::builder().capacity(1_000).build();
            let alice = client("/login", "alice");
            let spent = (0..guesses)
                .filter(|_| allowed(&store, &alice, &login, t0))
                .count();
            assert_eq!(spent, guesses.min(10));
            for i in 0..1_300u64 {
                let key = client(route, &format!("u{i}"));
                for _ in 0..each {
                    assert!(allowed(&store, &key, &limits, t0 + 10 + i));
                }
            }
            assert!(store.evicted() > 0, "{route}: the flood filled the store");
            let back = (0..10)
                .filter(|_| allowed(&store, &alice, &login, t0 + 5_000))
                .count();
            assert_eq!(back, 10 - spent, "{route}: alice's spent guesses came back");
        }
    }

    /// Like the script's hash, one entry holds a sliding window's current and previous
    /// counters: with a window counter per key, a full store would evict the previous
    /// window's counters first (they expire first) and the sliding window would forget them.
    #[test]
    fn a_full_store_keeps_the_previous_window_of_a_sliding_window() {
        let store = MemoryStore::builder().capacity(1_600).build();
        let w = 60_000;
        let limits = [Limit::new(
            10,
            Window::from_millis(w),
            Algorithm::SlidingWindow,
        )];
        let client =
            |name: &str| RouteKey::new("rl", "GET", "/search", &[(IdentityPart::ApiKey, name)]);
        let (victim, start) = (client("victim"), 1_700_000_040_000);
        for _ in 0..10 {
            assert!(allowed(&store, &victim, &limits, start + w - 10));
        }
        for i in 0..5_000u64 {
            allowed(
                &store,
                &client(&format!("other{i}")),
                &limits,
                start + w + 1 + i / 10,
            );
        }
        assert!(store.evicted() > 0, "the others filled the store");
        // 1 s into the next window the previous 10 still weigh 59/60 x 10: nothing fits.
        assert!(!allowed(&store, &victim, &limits, start + w + 1_000));
    }
}
