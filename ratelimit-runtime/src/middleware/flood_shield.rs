//! Once a key is rejected with a known retry time, this instance answers further requests for
//! it with 429 until that time passes, without asking the store: a flood costs no Redis work.

use quick_cache::sync::Cache;

/// A bounded map from key to the time (ms) until which it is known to be over its limit.
pub(crate) struct FloodShield {
    until: Option<Cache<String, u64>>,
}

impl FloodShield {
    /// A shield remembering at most `capacity` keys (0 turns the shield off).
    pub(crate) fn new(capacity: usize) -> Self {
        FloodShield {
            until: (capacity > 0).then(|| Cache::new(capacity)),
        }
    }

    /// How long `key` is still known to be rejected, in ms, at local time `now`.
    pub(crate) fn blocked_for(&self, key: &str, now: u64) -> Option<u64> {
        let cache = self.until.as_ref()?;
        let until = cache.get(key)?;
        if until > now {
            Some(until - now)
        } else {
            cache.remove(key);
            None
        }
    }

    /// Remembers that `key` is rejected for `retry_ms` from `now`.
    pub(crate) fn block(&self, key: &str, now: u64, retry_ms: u64) {
        if let Some(cache) = &self.until {
            if retry_ms > 0 {
                cache.insert(key.to_owned(), now.saturating_add(retry_ms));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_key_stays_blocked_until_its_retry_time() {
        let shield = FloodShield::new(16);
        shield.block("k", 1000, 500);
        assert_eq!(shield.blocked_for("k", 1000), Some(500));
        assert_eq!(shield.blocked_for("k", 1499), Some(1));
        assert_eq!(shield.blocked_for("k", 1500), None);
        assert_eq!(shield.blocked_for("other", 1000), None);
    }

    #[test]
    fn the_shield_is_bounded_and_can_be_turned_off() {
        let shield = FloodShield::new(100);
        for i in 0..10_000 {
            shield.block(&format!("k{i}"), 0, 1000);
        }
        let remembered = (0..10_000)
            .filter(|i| shield.blocked_for(&format!("k{i}"), 1).is_some())
            .count();
        assert!(remembered <= 200, "remembered {remembered}");
        let off = FloodShield::new(0);
        off.block("k", 0, 1000);
        assert_eq!(off.blocked_for("k", 1), None);
    }
}
