//! A bounded map of keys with expiry times: the in-memory stand-in for a Redis keyspace.
//!
//! Keys and their meaning are the same as in Redis. An entry is gone once `now` reaches its
//! expiry (like `PEXPIRE`). The table never holds more than its capacity: expired entries are
//! swept every [`SWEEP_EVERY`] inserts and whenever it is full; when it is full and nothing
//! has expired, the entries closest to expiry are evicted first. Those are the ones that
//! would vanish soonest anyway and hold the least remaining information, so evicting them
//! disturbs the fewest decisions; the cost is that a flood of new clients can reset the
//! counters of clients that were about to be reset.

use std::collections::{HashMap, VecDeque};

/// Inserts between two sweeps of expired entries.
pub(super) const SWEEP_EVERY: u32 = 1024;

/// What one key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredValue {
    /// A window counter (`INCR`).
    Counter(u64),
    /// Sliding-log timestamps in ms, oldest first (a sorted set of unique members).
    Log(VecDeque<u64>),
    /// A GCRA theoretical arrival time in microseconds.
    Tat(u64),
}

/// One key's value and expiry, as [`MemoryStore::entries`](super::MemoryStore::entries)
/// shows it.
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
    /// `INCR key`, and `PEXPIRE key ttl` when the key was new.
    Increment { key: String, ttl: u64 },
    /// `ZADD key now member`, `PEXPIRE key ttl`.
    Append { key: String, ttl: u64 },
    /// `SET key tat PX ttl`.
    SetTat { key: String, tat: u64, ttl: u64 },
}

impl Write {
    fn key(&self) -> &str {
        match self {
            Write::Increment { key, .. }
            | Write::Append { key, .. }
            | Write::SetTat { key, .. } => key,
        }
    }
}

/// A bounded keyspace.
#[derive(Debug)]
pub(super) struct Table {
    entries: HashMap<String, StoredEntry>,
    capacity: usize,
    inserts_since_sweep: u32,
}

impl Table {
    pub(super) fn new(capacity: usize) -> Self {
        Table {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            inserts_since_sweep: 0,
        }
    }

    /// The live value of `key` at `now`.
    pub(super) fn get(&self, key: &str, now: u64) -> Option<&StoredValue> {
        self.entry(key, now).map(|e| &e.value)
    }

    /// The live entry of `key` at `now`.
    pub(super) fn entry(&self, key: &str, now: u64) -> Option<&StoredEntry> {
        self.entries.get(key).filter(|e| e.expires_at > now)
    }

    /// The live log of `key`, pruned of timestamps at or before `newest_excluded` (none:
    /// nothing is pruned).
    pub(super) fn pruned_log(
        &mut self,
        key: &str,
        now: u64,
        newest_excluded: Option<u64>,
    ) -> Option<&VecDeque<u64>> {
        let entry = self.entries.get_mut(key).filter(|e| e.expires_at > now)?;
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

    /// Applies the commit phase of one check.
    pub(super) fn apply(&mut self, writes: Vec<Write>, now: u64) {
        let new_keys = writes
            .iter()
            .filter(|w| self.get(w.key(), now).is_none())
            .count();
        self.make_room(new_keys, &writes, now);
        for write in writes {
            self.write(write, now);
        }
    }

    fn write(&mut self, write: Write, now: u64) {
        match write {
            Write::Increment { key, ttl } => match self.live_mut(&key, now) {
                Some(StoredEntry {
                    value: StoredValue::Counter(n),
                    ..
                }) => *n += 1,
                _ => self.insert(key, StoredValue::Counter(1), now + ttl),
            },
            Write::Append { key, ttl } => match self.live_mut(&key, now) {
                Some(StoredEntry {
                    value: StoredValue::Log(log),
                    expires_at,
                }) => {
                    let at = log.partition_point(|&t| t <= now);
                    log.insert(at, now);
                    // Never shortened: an entry logged at a later time (before a clock
                    // stepped back) still counts until that time + the window.
                    *expires_at = (*expires_at).max(now + ttl);
                }
                _ => self.insert(key, StoredValue::Log(VecDeque::from([now])), now + ttl),
            },
            Write::SetTat { key, tat, ttl } => self.insert(key, StoredValue::Tat(tat), now + ttl),
        }
    }

    fn live_mut(&mut self, key: &str, now: u64) -> Option<&mut StoredEntry> {
        self.entries.get_mut(key).filter(|e| e.expires_at > now)
    }

    fn insert(&mut self, key: String, value: StoredValue, expires_at: u64) {
        self.entries.insert(key, StoredEntry { value, expires_at });
        self.inserts_since_sweep += 1;
    }

    /// Ensures `needed` new keys fit, never evicting a key that `writes` touch.
    fn make_room(&mut self, needed: usize, writes: &[Write], now: u64) {
        if self.inserts_since_sweep >= SWEEP_EVERY || self.entries.len() + needed > self.capacity {
            self.sweep(now);
        }
        let over = (self.entries.len() + needed).saturating_sub(self.capacity);
        if over == 0 {
            return;
        }
        // Evict a batch, so a full table does not pay a full scan on every insert.
        let batch = over.max(self.capacity / 64).min(self.entries.len());
        let mut candidates: Vec<(u64, &String)> = self
            .entries
            .iter()
            .filter(|(key, _)| !writes.iter().any(|w| w.key() == key.as_str()))
            .map(|(key, entry)| (entry.expires_at, key))
            .collect();
        let batch = batch.min(candidates.len());
        if batch == 0 {
            return;
        }
        candidates.select_nth_unstable(batch - 1);
        let doomed: Vec<String> = candidates[..batch]
            .iter()
            .map(|(_, key)| (*key).clone())
            .collect();
        for key in doomed {
            self.entries.remove(&key);
        }
    }

    /// Drops every expired entry.
    pub(super) fn sweep(&mut self, now: u64) {
        self.entries.retain(|_, entry| entry.expires_at > now);
        self.inserts_since_sweep = 0;
    }

    /// Every entry, expired ones included (until swept).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&String, &StoredEntry)> {
        self.entries.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn increment(key: &str, ttl: u64) -> Write {
        Write::Increment {
            key: key.to_owned(),
            ttl,
        }
    }

    #[test]
    fn entries_expire_like_pexpire() {
        let mut table = Table::new(10);
        table.apply(vec![increment("a", 100)], 1_000);
        table.apply(vec![increment("a", 100)], 1_050);
        assert_eq!(
            table.get("a", 1_099),
            Some(&StoredValue::Counter(2)),
            "INCR keeps the first TTL"
        );
        assert_eq!(table.get("a", 1_100), None);
        table.apply(vec![increment("a", 100)], 1_100);
        assert_eq!(table.get("a", 1_100), Some(&StoredValue::Counter(1)));
    }

    #[test]
    fn a_full_table_evicts_expired_entries_first_then_the_closest_to_expiry() {
        let mut table = Table::new(3);
        table.apply(vec![increment("short", 10)], 0);
        table.apply(vec![increment("long", 1_000)], 0);
        table.apply(vec![increment("mid", 500)], 0);
        table.apply(vec![increment("new", 1_000)], 20);
        assert_eq!(table.len(), 3);
        assert!(table.get("short", 0).is_none(), "expired entry swept");
        table.apply(vec![increment("newer", 1_000)], 30);
        assert_eq!(table.len(), 3);
        assert!(table.get("mid", 30).is_none(), "closest to expiry evicted");
        assert!(table.get("long", 30).is_some() && table.get("new", 30).is_some());
    }

    #[test]
    fn a_check_never_evicts_its_own_keys() {
        let mut table = Table::new(2);
        table.apply(vec![increment("a", 10)], 0);
        table.apply(vec![increment("b", 1_000)], 0);
        table.apply(vec![increment("a", 10), increment("c", 1_000)], 1);
        assert_eq!(table.get("a", 1), Some(&StoredValue::Counter(2)));
        assert_eq!(table.get("c", 1), Some(&StoredValue::Counter(1)));
        assert!(table.get("b", 1).is_none());
    }

    #[test]
    fn many_clients_cannot_grow_the_table_past_its_capacity() {
        let mut table = Table::new(100);
        for i in 0..10_000u64 {
            table.apply(vec![increment(&format!("client{i}"), 60_000)], i);
            assert!(table.len() <= 100);
        }
    }
}
