//! A bounded map of keys with expiry times: the in-memory stand-in for a Redis keyspace.
//!
//! Keys and their meaning are the same as in Redis: a window algorithm's counters are
//! fields of one entry at the limit's key (a hash in Redis), named by window start, and a
//! new window drops the older ones as the script does. An entry is gone once `now` reaches
//! its expiry (like `PEXPIRE`). The table never holds more than its capacity: expired
//! entries are swept every [`SWEEP_EVERY`] inserts and whenever it is full, found through an
//! index ordered by expiry, so a sweep costs what has expired since the last one and not the
//! table's size (a table kept just below its capacity sweeps on nearly every insert, and a
//! scan of every entry would cost 110 µs a request at 100,000 keys a shard, under the
//! shard's lock);
//! the index files each entry under an expiry at or before its own and is corrected when a
//! sweep reaches it, so the writes that only lengthen a key's life (all but a GCRA `SET`
//! after a clock stepped back) never touch it; when it is full
//! and nothing has expired, the entries whose clients had spent the least at their last
//! count are evicted first: the fewest requests, then the smallest share of the budget, then
//! the closest to expiry ([`Rank`]). Evicting an entry gives its client back what it had
//! spent, so a flood of new keys evicts its own kind before a client that spent more than
//! each of them: evicting one that spent n requests takes a flood of keys that each spent n
//! or more. The store logs a warning when it evicts live entries (it is too small for its
//! traffic).

use std::{
    collections::{BTreeSet, HashMap, VecDeque},
    sync::Arc,
};

/// Inserts between two sweeps of expired entries.
pub(super) const SWEEP_EVERY: u32 = 1024;

/// What one key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoredValue {
    /// Window counters (`HINCRBY key <window start> 1`): each window's start in ms and its
    /// count, oldest first.
    Windows(Vec<(u64, u64)>),
    /// Sliding-log timestamps in ms, oldest first (a sorted set of unique members).
    Log(VecDeque<u64>),
    /// A GCRA theoretical arrival time in microseconds.
    Tat(u64),
    /// A lockout (`block`): its end in ms.
    Lockout(u64),
}

impl StoredValue {
    /// The count of the window starting at `start` (0 when there is none, or when this
    /// holds no window counters).
    pub fn window(&self, start: u64) -> u64 {
        match self {
            StoredValue::Windows(windows) => windows
                .iter()
                .find(|(s, _)| *s == start)
                .map_or(0, |(_, n)| *n),
            _ => 0,
        }
    }
}

/// One key's value and expiry, as [`MemoryStore::entry`](super::MemoryStore::entry) shows
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    /// What the key holds.
    pub value: StoredValue,
    /// When the key expires, in the store's milliseconds (like a Redis TTL).
    pub expires_at: u64,
}

/// One write of a commit phase, applied only when every limit allowed the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Write {
    /// `HINCRBY key window by`; for a new window (`new_window.lua`), the key lives at
    /// least `ttl` more and windows that started before `oldest` go.
    Increment {
        key: String,
        window: u64,
        ttl: u64,
        oldest: u64,
        by: u64,
    },
    /// `ZADD key at member` (`count` members; `at` is the check's time, or a later one a
    /// reservation counted at), `PEXPIRE key ttl`.
    Append {
        key: String,
        at: u64,
        ttl: u64,
        count: u64,
    },
    /// `SET key tat PX ttl`.
    SetTat { key: String, tat: u64, ttl: u64 },
    /// `SET key ends PX ttl`: a lockout ending at `ends`.
    Lockout { key: String, ends: u64, ttl: u64 },
}

impl Write {
    fn key(&self) -> &str {
        match self {
            Write::Increment { key, .. }
            | Write::Append { key, .. }
            | Write::SetTat { key, .. }
            | Write::Lockout { key, .. } => key,
        }
    }
}

/// How much of its budget a client had spent at an entry's last write: what evicting the
/// entry would give back. Entries are evicted lowest first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    /// The requests spent, what a flood must spend per key to evict the entry: one request
    /// per made-up key, even on a 1-per-hour route, must not evict a login budget spent to
    /// 9 of 10 (ranking by share first would let it).
    pub(super) requests: u32,
    /// The share of the limit spent, in thousandths: of two entries that spent as many
    /// requests, the one nearer its limit stays.
    pub(super) share: u16,
}

/// A [`Write`] and the rank its entry has after it.
pub(super) type Ranked = (Write, Rank);

/// A stored entry and the rank of its last write.
#[derive(Debug)]
struct Slot {
    entry: StoredEntry,
    rank: Rank,
    /// Where the expiry index files it: at or before `entry.expires_at`.
    indexed_at: u64,
}

/// A bounded keyspace.
#[derive(Debug)]
pub(super) struct Table {
    entries: HashMap<Arc<str>, Slot>,
    /// Every entry once, as `(indexed_at, key)`: an entry that has expired comes before
    /// any that has not (its `indexed_at` is at or before its expiry).
    expiries: BTreeSet<(u64, Arc<str>)>,
    capacity: usize,
    inserts_since_sweep: u32,
    /// Entries looked at by sweeps and evictions since the table was made (tests only read it).
    visited: u64,
}

impl Table {
    pub(super) fn new(capacity: usize) -> Self {
        Table {
            entries: HashMap::new(),
            expiries: BTreeSet::new(),
            capacity: capacity.max(1),
            inserts_since_sweep: 0,
            visited: 0,
        }
    }

    /// The live value of `key` at `now`.
    pub(super) fn get(&self, key: &str, now: u64) -> Option<&StoredValue> {
        self.entry(key, now).map(|e| &e.value)
    }

    /// The live entry of `key` at `now`.
    pub(super) fn entry(&self, key: &str, now: u64) -> Option<&StoredEntry> {
        self.entries
            .get(key)
            .map(|slot| &slot.entry)
            .filter(|e| e.expires_at > now)
    }

    /// The live log of `key`, pruned of timestamps at or before `newest_excluded` (none:
    /// nothing is pruned).
    pub(super) fn pruned_log(
        &mut self,
        key: &str,
        now: u64,
        newest_excluded: Option<u64>,
    ) -> Option<&VecDeque<u64>> {
        if self
            .entries
            .get(key)
            .is_some_and(|slot| slot.entry.expires_at <= now)
        {
            // Every timestamp of an expired log is at least a window old: the script's
            // `ZREMRANGEBYSCORE` would empty (and so delete) the key now, whether or not the
            // request is then counted, and a clock that steps back must not find them again.
            self.remove(key);
            return None;
        }
        let entry = self.live_mut(key, now)?;
        let StoredValue::Log(log) = &mut entry.value else {
            return None;
        };
        while log
            .front()
            .is_some_and(|&t| newest_excluded.is_some_and(|excluded| t <= excluded))
        {
            log.pop_front();
        }
        Some(log)
    }

    /// Applies the commit phase of one check; answers how many live entries it evicted to
    /// make room.
    pub(super) fn apply(&mut self, writes: Vec<Ranked>, now: u64) -> usize {
        let new_keys = writes
            .iter()
            .filter(|(w, _)| self.get(w.key(), now).is_none())
            .count();
        let evicted = self.make_room(new_keys, &writes, now);
        for (write, rank) in writes {
            self.write(write, rank, now);
        }
        evicted
    }

    fn write(&mut self, write: Write, rank: Rank, now: u64) {
        match write {
            Write::Increment {
                key,
                window,
                ttl,
                oldest,
                by,
            } => match self.live_mut(&key, now) {
                Some(StoredEntry {
                    value: StoredValue::Windows(windows),
                    expires_at,
                }) => {
                    match windows.iter_mut().find(|(start, _)| *start == window) {
                        Some((_, n)) => *n += by,
                        None => {
                            // As `new_window.lua`: never shortened, and a newer window (one
                            // counted before the clock stepped back) stays.
                            let at = windows.partition_point(|(start, _)| *start < window);
                            windows.insert(at, (window, by));
                            windows.retain(|(start, _)| *start >= oldest);
                            *expires_at = (*expires_at).max(now + ttl);
                        }
                    }
                    self.rank(&key, rank);
                }
                _ => self.insert(
                    key,
                    StoredValue::Windows(vec![(window, by)]),
                    now + ttl,
                    rank,
                ),
            },
            Write::Append {
                key,
                at,
                ttl,
                count,
            } => match self.live_mut(&key, now) {
                Some(StoredEntry {
                    value: StoredValue::Log(log),
                    expires_at,
                }) => {
                    let place = log.partition_point(|&t| t <= at);
                    for _ in 0..count {
                        log.insert(place, at);
                    }
                    // Never shortened: an entry logged at a later time (before a clock
                    // stepped back) still counts until that time + the window.
                    *expires_at = (*expires_at).max(now + ttl);
                    self.rank(&key, rank);
                }
                _ => self.insert(
                    key,
                    StoredValue::Log(std::iter::repeat_n(at, count as usize).collect()),
                    now + ttl,
                    rank,
                ),
            },
            Write::SetTat { key, tat, ttl } => {
                self.insert(key, StoredValue::Tat(tat), now + ttl, rank);
            }
            Write::Lockout { key, ends, ttl } => {
                self.insert(key, StoredValue::Lockout(ends), now + ttl, rank);
            }
        }
    }

    pub(super) fn live_mut(&mut self, key: &str, now: u64) -> Option<&mut StoredEntry> {
        self.entries
            .get_mut(key)
            .map(|slot| &mut slot.entry)
            .filter(|e| e.expires_at > now)
    }

    fn rank(&mut self, key: &str, rank: Rank) {
        if let Some(slot) = self.entries.get_mut(key) {
            slot.rank = rank;
        }
    }

    fn insert(&mut self, key: String, value: StoredValue, expires_at: u64, rank: Rank) {
        self.inserts_since_sweep += 1;
        let entry = StoredEntry { value, expires_at };
        // An overwrite (GCRA's `SET`, or a key past its expiry) keeps the key's allocation
        // and its place in the index, unless it now expires before that place.
        if let Some(slot) = self.entries.get_mut(key.as_str()) {
            let indexed_at = slot.indexed_at;
            slot.entry = entry;
            slot.rank = rank;
            if expires_at < indexed_at {
                slot.indexed_at = expires_at;
                if let Some((stored, _)) = self.entries.get_key_value(key.as_str()) {
                    let stored = Arc::clone(stored);
                    self.expiries.remove(&(indexed_at, Arc::clone(&stored)));
                    self.expiries.insert((expires_at, stored));
                }
            }
            return;
        }
        let key: Arc<str> = Arc::from(key);
        let slot = Slot {
            entry,
            rank,
            indexed_at: expires_at,
        };
        self.entries.insert(Arc::clone(&key), slot);
        self.expiries.insert((expires_at, key));
    }

    pub(super) fn remove(&mut self, key: &str) {
        if let Some((key, slot)) = self.entries.remove_entry(key) {
            self.expiries.remove(&(slot.indexed_at, key));
        }
    }

    /// Ensures `needed` new keys fit, never evicting a key that `writes` touch; answers how
    /// many live entries it evicted.
    fn make_room(&mut self, needed: usize, writes: &[Ranked], now: u64) -> usize {
        if self.inserts_since_sweep >= SWEEP_EVERY || self.entries.len() + needed > self.capacity {
            self.sweep(now);
        }
        let over = (self.entries.len() + needed).saturating_sub(self.capacity);
        if over == 0 {
            return 0;
        }
        // Evict a batch, so a full table does not pay a full scan on every insert.
        let batch = over.max(self.capacity / 64).min(self.entries.len());
        self.visited += self.entries.len() as u64;
        let mut candidates: Vec<(Rank, u64, &Arc<str>)> = self
            .entries
            .iter()
            .filter(|(key, _)| !writes.iter().any(|(w, _)| w.key() == &***key))
            .map(|(key, slot)| (slot.rank, slot.entry.expires_at, key))
            .collect();
        let batch = batch.min(candidates.len());
        if batch == 0 {
            return 0;
        }
        candidates.select_nth_unstable(batch - 1);
        let doomed: Vec<Arc<str>> = candidates[..batch]
            .iter()
            .map(|(_, _, key)| Arc::clone(key))
            .collect();
        for key in doomed {
            self.remove(&key);
        }
        batch
    }

    /// Drops every expired entry: it looks at those filed in the index at or before `now`,
    /// drops the expired ones and files the others again at their expiry.
    pub(super) fn sweep(&mut self, now: u64) {
        while self.expiries.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, key)) = self.expiries.pop_first() else {
                break;
            };
            self.visited += 1;
            match self.entries.get_mut(&*key) {
                Some(slot) if slot.entry.expires_at > now => {
                    slot.indexed_at = slot.entry.expires_at;
                    self.expiries.insert((slot.entry.expires_at, key));
                }
                _ => {
                    self.entries.remove(&*key);
                }
            }
        }
        self.inserts_since_sweep = 0;
    }

    /// Every entry, expired ones included (until swept).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&str, &StoredEntry)> {
        self.entries.iter().map(|(key, slot)| (&**key, &slot.entry))
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A count in the window starting at 0, by a client that has spent nothing else.
    fn increment(key: &str, ttl: u64) -> Ranked {
        counted(key, 0, ttl, (0, 0))
    }

    /// A count in the window starting at `window`, by a client that has spent `requests`
    /// requests, `share` thousandths of its budget, with it.
    fn counted(key: &str, window: u64, ttl: u64, (requests, share): (u32, u16)) -> Ranked {
        let write = Write::Increment {
            key: key.to_owned(),
            window,
            ttl,
            oldest: window,
            by: 1,
        };
        (write, Rank { requests, share })
    }

    fn count(table: &Table, key: &str, now: u64) -> Option<u64> {
        table.get(key, now).map(|value| value.window(0))
    }

    #[test]
    fn entries_expire_like_pexpire() {
        let mut table = Table::new(10);
        table.apply(vec![increment("a", 100)], 1_000);
        table.apply(vec![increment("a", 100)], 1_050);
        assert_eq!(
            count(&table, "a", 1_099),
            Some(2),
            "HINCRBY keeps the first TTL"
        );
        assert_eq!(table.get("a", 1_100), None);
        table.apply(vec![increment("a", 100)], 1_100);
        assert_eq!(count(&table, "a", 1_100), Some(1));
    }

    #[test]
    fn a_new_window_drops_older_ones_and_keeps_newer_ones() {
        let mut table = Table::new(10);
        let window = |start: u64, oldest: u64| {
            let write = Write::Increment {
                key: "k".to_owned(),
                window: start,
                ttl: 10_000,
                oldest,
                by: 1,
            };
            vec![(write, Rank::default())]
        };
        table.apply(window(1_000, 1_000), 1_000);
        table.apply(window(2_000, 1_000), 2_000);
        table.apply(window(3_000, 2_000), 3_000);
        assert_eq!(
            table.get("k", 3_000),
            Some(&StoredValue::Windows(vec![(2_000, 1), (3_000, 1)]))
        );
        // The clock stepped back: the window counted later stays.
        table.apply(window(1_000, 0), 1_500);
        assert_eq!(
            table.get("k", 1_500),
            Some(&StoredValue::Windows(vec![
                (1_000, 1),
                (2_000, 1),
                (3_000, 1)
            ]))
        );
        assert_eq!(table.entry("k", 0).map(|e| e.expires_at), Some(13_000));
    }

    #[test]
    fn a_full_table_evicts_expired_entries_first_then_the_closest_to_expiry() {
        let mut table = Table::new(3);
        table.apply(vec![increment("short", 10)], 0);
        table.apply(vec![increment("long", 1_000)], 0);
        table.apply(vec![increment("mid", 500)], 0);
        assert_eq!(table.apply(vec![increment("new", 1_000)], 20), 0);
        assert_eq!(table.len(), 3);
        assert!(table.get("short", 0).is_none(), "expired entry swept");
        assert_eq!(table.apply(vec![increment("newer", 1_000)], 30), 1);
        assert_eq!(table.len(), 3);
        assert!(table.get("mid", 30).is_none(), "closest to expiry evicted");
        assert!(table.get("long", 30).is_some() && table.get("new", 30).is_some());
    }

    #[test]
    fn a_full_table_evicts_the_least_spent_budget_first() {
        let mut table = Table::new(4);
        // A client that spent 9 of 10, whose entry expires first.
        table.apply(vec![counted("nine", 0, 100, (9, 900))], 0);
        table.apply(vec![counted("fresh", 0, 1_000, (1, 100))], 0);
        table.apply(vec![counted("half", 0, 1_000, (5, 500))], 0);
        table.apply(vec![counted("one", 0, 1_000, (1, 1_000))], 0);
        // Fewer requests first, then the smaller share, then the nearer expiry; then the
        // flood's own one-request keys: the entries that spent 5 and 9 requests stay.
        for (i, gone) in ["fresh", "one", "new0"].iter().enumerate() {
            table.apply(vec![counted(&format!("new{i}"), 0, 1_000, (1, 1_000))], 1);
            assert!(table.get(gone, 1).is_none(), "{gone} evicted");
        }
        for i in 3..10 {
            table.apply(vec![counted(&format!("new{i}"), 0, 1_000, (1, 1_000))], 1);
        }
        assert!(table.get("nine", 1).is_some() && table.get("half", 1).is_some());
    }

    #[test]
    fn a_check_never_evicts_its_own_keys() {
        let mut table = Table::new(2);
        table.apply(vec![increment("a", 10)], 0);
        table.apply(vec![increment("b", 1_000)], 0);
        table.apply(vec![increment("a", 10), increment("c", 1_000)], 1);
        assert_eq!(count(&table, "a", 1), Some(2));
        assert_eq!(count(&table, "c", 1), Some(1));
        assert!(table.get("b", 1).is_none());
    }

    /// The expiry index holds every entry once, at or before its expiry, and nothing else.
    fn assert_indexed(table: &Table) {
        assert_eq!(table.expiries.len(), table.entries.len());
        for (key, slot) in &table.entries {
            assert!(slot.indexed_at <= slot.entry.expires_at, "{key}");
            assert!(
                table.expiries.contains(&(slot.indexed_at, Arc::clone(key))),
                "{key} at {}",
                slot.indexed_at
            );
        }
    }

    /// New clients arriving as fast as old ones expire keep the table just below its
    /// capacity: every few inserts find it full and sweep. A sweep that scanned every entry
    /// would cost each insert about capacity ÷ 5 entries looked at (110 µs a request at
    /// 100,000 keys a shard); through the expiry index it costs what expired.
    #[test]
    fn a_table_kept_just_below_capacity_sweeps_only_what_expired() {
        const CAPACITY: u64 = 10_000;
        let mut table = Table::new(CAPACITY as usize);
        let ttl = CAPACITY - 5;
        let mut evicted = 0;
        for i in 0..CAPACITY {
            evicted += table.apply(vec![increment(&format!("client{i}"), ttl)], i);
        }
        let visited_before = table.visited;
        for i in CAPACITY..3 * CAPACITY {
            evicted += table.apply(vec![increment(&format!("client{i}"), ttl)], i);
        }
        let per_insert = (table.visited - visited_before) as f64 / (2 * CAPACITY) as f64;
        assert!(
            per_insert <= 2.0,
            "{per_insert} entries looked at per insert"
        );
        assert_eq!(evicted, 0, "only expired entries made room");
        assert!(table.len() <= CAPACITY as usize);
        assert_indexed(&table);
    }

    /// Every way an entry's expiry changes or an entry goes keeps the index exact: new
    /// windows, log appends, GCRA overwrites, expired logs dropped, sweeps, evictions.
    #[test]
    fn the_expiry_index_follows_every_write() {
        let mut table = Table::new(8);
        for now in 0..400u64 {
            let key = format!("k{}", now % 11);
            let write = match now % 3 {
                0 => Write::Increment {
                    key,
                    window: now / 50 * 50,
                    ttl: 100 + now % 7,
                    oldest: now / 50 * 50,
                    by: 1,
                },
                1 => Write::Append {
                    key: format!("log{}", now % 5),
                    at: now,
                    ttl: 30 + now % 13,
                    count: 1,
                },
                _ => Write::SetTat {
                    key,
                    tat: now,
                    ttl: 20 + now % 17,
                },
            };
            if let Write::Append { key, .. } = &write {
                table.pruned_log(key, now, now.checked_sub(30));
            }
            let rank = Rank {
                requests: (now % 4) as u32,
                share: 0,
            };
            table.apply(vec![(write, rank)], now);
            assert!(table.len() <= 8);
            assert_indexed(&table);
        }
    }

    /// A key whose life was lengthened is not swept at its old expiry; one whose life a
    /// `SET` shortened (a clock that stepped back) is swept at its new one.
    #[test]
    fn a_sweep_follows_lengthened_and_shortened_lives() {
        let tat = |key: &str, ttl: u64| {
            let write = Write::SetTat {
                key: key.to_owned(),
                tat: 0,
                ttl,
            };
            vec![(write, Rank::default())]
        };
        let mut table = Table::new(10);
        table.apply(tat("longer", 100), 0);
        table.apply(tat("longer", 1_000), 50);
        table.apply(tat("shorter", 1_000), 0);
        table.apply(tat("shorter", 100), 0);
        table.sweep(500);
        assert!(table.get("longer", 500).is_some(), "lengthened: kept");
        assert!(
            table.entries().all(|(key, _)| key != "shorter"),
            "shortened: swept"
        );
        assert_indexed(&table);
        table.sweep(1_050);
        assert_eq!(table.len(), 0);
        assert_indexed(&table);
    }

    #[test]
    fn many_clients_cannot_grow_the_table_past_its_capacity() {
        let mut table = Table::new(100);
        for i in 0..10_000u64 {
            table.apply(vec![increment(&format!("client{i}"), 60_000)], i);
            assert!(table.len() <= 100);
        }
    }

    /// Random writes of every kind at times that go back and forth, keys of mixed
    /// kinds, pruned logs and tiny capacities: the index stays exact and a sweep, like a scan
    /// of every entry, leaves no expired entry behind and drops no live one.
    #[test]
    fn random_writes_keep_the_index_exact() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for capacity in [1usize, 2, 3, 7, 50] {
            let mut table = Table::new(capacity);
            let mut now = 10_000u64;
            for _ in 0..20_000 {
                now = match next(10) {
                    0 => now.saturating_sub(next(500)),
                    _ => now + next(40),
                };
                let key = format!("k{}", next(12));
                let ttl = 1 + next(300);
                let write = match next(3) {
                    0 => Write::Increment {
                        key: key.clone(),
                        window: now / 100 * 100,
                        ttl,
                        oldest: (now / 100 * 100).saturating_sub(100),
                        by: 1,
                    },
                    1 => {
                        table.pruned_log(&key, now, now.checked_sub(ttl));
                        Write::Append {
                            key: key.clone(),
                            at: now,
                            ttl,
                            count: 1,
                        }
                    }
                    _ => Write::SetTat {
                        key: key.clone(),
                        tat: now,
                        ttl,
                    },
                };
                let rank = Rank {
                    requests: next(5) as u32,
                    share: 0,
                };
                let mut writes = vec![(write, rank)];
                if next(4) == 0 {
                    writes.push(increment(&format!("k{}", next(12)), 1 + next(300)));
                }
                let live_before: Vec<String> = table
                    .entries
                    .iter()
                    .filter(|(_, s)| s.entry.expires_at > now)
                    .map(|(k, _)| k.to_string())
                    .collect();
                let n = writes.len();
                let evicted = table.apply(writes, now);
                assert_indexed(&table);
                assert!(table.len() <= capacity.max(n));
                let lost = live_before
                    .iter()
                    .filter(|k| !table.entries.contains_key(k.as_str()))
                    .count();
                assert!(
                    lost <= evicted,
                    "{lost} live entries gone, {evicted} evicted"
                );
                if next(8) == 0 {
                    table.sweep(now);
                    assert_indexed(&table);
                    assert!(table.entries.values().all(|s| s.entry.expires_at > now));
                }
            }
        }
    }
}
