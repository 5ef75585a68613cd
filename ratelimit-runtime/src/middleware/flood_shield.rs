//! Once a key is rejected with a known retry time, this instance answers further requests for
//! it with 429 until that time passes, without asking the store: a flood costs one store
//! call per key and [`REMEMBERED_AT_MOST`], however many of its requests are in flight.

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

/// What the shield knows of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shielded {
    /// Nothing: the store decides.
    No,
    /// Rejected, as remembered: answered without the store.
    Blocked(Blocked),
    /// Rejected when the store was last asked, a second ago: this request asks it again,
    /// and whoever makes the call forgets the key if the store lets the request pass.
    Asking,
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

    /// What the shield knows of `key` at local time `now`. Once a second, while a rejection
    /// lasts, one request asks the store again ([`Shielded::Asking`]) and the others are
    /// answered from the shield until its answer comes (a refusal renews the entry, a pass
    /// forgets it; [`REMEMBERED_AT_MOST`] at most): a flood asks one store call a second,
    /// however many of its requests are in flight.
    pub(crate) fn shielded(&self, key: &str, now: u64) -> Shielded {
        let Some(cache) = self.until.as_ref() else {
            return Shielded::No;
        };
        let Some((blocked, remembered)) = cache.get(key) else {
            return Shielded::No;
        };
        if blocked.until <= now {
            cache.remove(key);
            return Shielded::No;
        }
        if remembered > now {
            return Shielded::Blocked(blocked);
        }
        let asked_until = blocked.until.min(now.saturating_add(REMEMBERED_AT_MOST));
        cache.insert(key.to_owned(), (blocked, asked_until));
        Shielded::Asking
    }

    /// The rejection `key` is remembered under at `now`, when [`shielded`](Self::shielded)
    /// would answer [`Shielded::Blocked`]; `None` otherwise, and nothing changes (no request
    /// is made the one that asks the store again).
    pub(crate) fn peek(&self, key: &str, now: u64) -> Option<Blocked> {
        let (blocked, remembered) = self.until.as_ref()?.get(key)?;
        (blocked.until > now && remembered > now).then_some(blocked)
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
        assert_eq!(shield.shielded("k", 1000), Shielded::Blocked(until(1500)));
        assert_eq!(shield.shielded("k", 1499), Shielded::Blocked(until(1500)));
        assert_eq!(shield.shielded("k", 1500), Shielded::No);
        assert_eq!(shield.shielded("other", 1000), Shielded::No);
    }

    #[test]
    fn a_long_rejection_is_asked_again_once_a_second_and_forgotten_on_demand() {
        let shield = FloodShield::new(16);
        shield.block("k", until(900_000), 1000);
        assert_eq!(
            shield.shielded("k", 1999),
            Shielded::Blocked(until(900_000))
        );
        assert_eq!(shield.peek("k", 1999), Some(until(900_000)));
        // The second is over: one request asks the store, the others are still answered;
        // a peek is none of them.
        assert_eq!(shield.peek("k", 2000), None);
        assert_eq!(shield.shielded("k", 2000), Shielded::Asking);
        assert_eq!(
            shield.shielded("k", 2000),
            Shielded::Blocked(until(900_000))
        );
        assert_eq!(
            shield.shielded("k", 2999),
            Shielded::Blocked(until(900_000))
        );
        // No answer within that second (a store down): the next second's request asks.
        assert_eq!(shield.shielded("k", 3000), Shielded::Asking);
        // The store lets it pass (a reset elsewhere): forgotten.
        shield.forget("k");
        assert_eq!(shield.shielded("k", 3001), Shielded::No);
        // Asked again near the retry time: answered until then only.
        shield.block("k", until(5500), 4000);
        assert_eq!(shield.shielded("k", 5000), Shielded::Asking);
        assert_eq!(shield.shielded("k", 5499), Shielded::Blocked(until(5500)));
        assert_eq!(shield.shielded("k", 5500), Shielded::No);
    }

    #[test]
    fn the_shield_is_bounded_and_can_be_turned_off() {
        let shield = FloodShield::new(100);
        for i in 0..10_000 {
            shield.block(&format!("k{i}"), until(1000), 0);
        }
        let remembered = (0..10_000)
            .filter(|i| shield.shielded(&format!("k{i}"), 1) != Shielded::No)
            .count();
        assert!(remembered <= 200, "remembered {remembered}");
        let off = FloodShield::new(0);
        off.block("k", until(1000), 0);
        assert_eq!(off.shielded("k", 1), Shielded::No);
    }
}
