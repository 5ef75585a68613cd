//! Once a key is rejected with a known retry time, this instance answers further requests for
//! it with 429 until that time passes, without asking the store: a flood costs no Redis work.

use quick_cache::sync::Cache;

/// A bounded map from key to the rejection it is known to be under.
pub(crate) struct FloodShield {
    until: Option<Cache<String, Blocked>>,
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
        let blocked = cache.get(key)?;
        if blocked.until > now {
            Some(blocked)
        } else {
            cache.remove(key);
            None
        }
    }

    /// Remembers that `key` is rejected until `blocked.until`.
    pub(crate) fn block(&self, key: &str, blocked: Blocked) {
        if let Some(cache) = &self.until {
            cache.insert(key.to_owned(), blocked);
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
        shield.block("k", until(1500));
        assert_eq!(shield.blocked("k", 1000), Some(until(1500)));
        assert_eq!(shield.blocked("k", 1499), Some(until(1500)));
        assert_eq!(shield.blocked("k", 1500), None);
        assert_eq!(shield.blocked("other", 1000), None);
    }

    #[test]
    fn the_shield_is_bounded_and_can_be_turned_off() {
        let shield = FloodShield::new(100);
        for i in 0..10_000 {
            shield.block(&format!("k{i}"), until(1000));
        }
        let remembered = (0..10_000)
            .filter(|i| shield.blocked(&format!("k{i}"), 1).is_some())
            .count();
        assert!(remembered <= 200, "remembered {remembered}");
        let off = FloodShield::new(0);
        off.block("k", until(1000));
        assert_eq!(off.blocked("k", 1), None);
    }
}
