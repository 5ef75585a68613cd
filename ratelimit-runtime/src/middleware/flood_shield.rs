//! Once a key is rejected with a known retry time, this instance answers further requests for
//! it with 429 until that time passes, without asking the store: a flood costs one store
//! call per key and [`REMEMBERED_AT_MOST`] at most.

use quick_cache::sync::Cache;

/// The longest the shield answers for a key without asking the store again: a budget reset
/// or given back on another instance (`RateLimiter::reset`, `Budget`) is seen within this
/// long, while a flood of one key still costs the store one call in this long.
pub(crate) const REMEMBERED_AT_MOST: u64 = 1_000;

/// A bounded map from key to the rejection it is known to be under, and until when it is
/// remembered.
pub(crate) struct FloodShield {
    until: Option<Cache<String, (Blocked, u64)>>,
}

/// A remembered rejection, in local milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocked {
    /// Until when requests are rejected.
    pub(crate) until: u64,
    /// When the binding limit's budget is fully restored.
    pub(crate) reset_at: u64,
    /// Which stacked limit rejected.
    pub(crate) limit_index: usize,
}

impl FloodShield {
    /// A shield remembering at most `capacity` keys (0 turns the shield off).
    pub(crate) fn new(capacity: usize) -> Self {
        FloodShield {
            until: (capacity > 0).then(|| Cache::new(capacity)),
        }
    }

    /// The rejection `key` is still known to be under at local time `now`.
    pub(crate) fn blocked(&self, key: &str, now: u64) -> Option<Blocked> {
        let cache = self.until.as_ref()?;
        let (blocked, remembered) = cache.get(key)?;
        if blocked.until > now && remembered > now {
            Some(blocked)
        } else {
            cache.remove(key);
            None
        }
    }

    /// Remembers, at local time `now`, that `key` is rejected until `blocked.until` (for
    /// [`REMEMBERED_AT_MOST`] at most).
    pub(crate) fn block(&self, key: &str, blocked: Blocked, now: u64) {
        if let Some(cache) = &self.until {
            let remembered = blocked.until.min(now.saturating_add(REMEMBERED_AT_MOST));
            cache.insert(key.to_owned(), (blocked, remembered));
        }
    }

    /// Forgets `key`: its budget was reset or given back here.
    pub(crate) fn forget(&self, key: &str) {
        if let Some(cache) = &self.until {
            cache.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn until(until: u64) -> Blocked {
        Blocked {
            until,
            reset_at: until,
            limit_index: 0,
        }
    }

    #[test]
    fn a_blocked_key_stays_blocked_until_its_retry_time() {
        let shield = FloodShield::new(16);
        shield.block("k", until(1500), 1000);
        assert_eq!(shield.blocked("k", 1000), Some(until(1500)));
        assert_eq!(shield.blocked("k", 1499), Some(until(1500)));
        assert_eq!(shield.blocked("k", 1500), None);
        assert_eq!(shield.blocked("other", 1000), None);
    }

    #[test]
    fn a_long_rejection_is_remembered_a_second_at_most_and_forgotten_on_demand() {
        let shield = FloodShield::new(16);
        shield.block("k", until(900_000), 1000);
        assert_eq!(shield.blocked("k", 1999), Some(until(900_000)));
        assert_eq!(shield.blocked("k", 2000), None, "asks the store again");
        shield.block("k", until(900_000), 3000);
        shield.forget("k");
        assert_eq!(shield.blocked("k", 3001), None);
    }

    #[test]
    fn the_shield_is_bounded_and_can_be_turned_off() {
        let shield = FloodShield::new(100);
        for i in 0..10_000 {
            shield.block(&format!("k{i}"), until(1000), 0);
        }
        let remembered = (0..10_000)
            .filter(|i| shield.blocked(&format!("k{i}"), 1).is_some())
            .count();
        assert!(remembered <= 200, "remembered {remembered}");
        let off = FloodShield::new(0);
        off.block("k", until(1000), 0);
        assert_eq!(off.blocked("k", 1), None);
    }
}
