//! Whose clock decides window boundaries.
//!
//! In production every decision reads the store's own clock (Redis `TIME` inside the
//! script), because app instances' clocks drift. Tests inject the time instead, so a test
//! can stand one millisecond before a window rolls over without sleeping.

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::store::MAX_INJECTED_MILLIS;

/// The time source passed to every check.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Clock {
    /// The store's own clock: Redis `TIME` for Redis; for the in-memory store a monotonic
    /// clock that starts at the system time when the store is built (a step of the system
    /// clock does not move it).
    #[default]
    Store,
    /// A clock the test controls, in milliseconds since the Unix epoch.
    Manual(ManualClock),
}

impl Clock {
    /// The injected time in milliseconds, or `None` to use the store's clock.
    pub fn now_millis(&self) -> Option<u64> {
        match self {
            Clock::Store => None,
            Clock::Manual(clock) => Some(clock.now_millis()),
        }
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clock::Store => f.write_str("Clock::Store"),
            Clock::Manual(clock) => write!(f, "Clock::Manual({}ms)", clock.now_millis()),
        }
    }
}

/// A settable clock shared between a test and the limiter.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    millis: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `millis` since the Unix epoch.
    ///
    /// # Panics
    ///
    /// Past [`MAX_INJECTED_MILLIS`] (the year 2255), which no store accepts; so do
    /// [`ManualClock::set`] and [`ManualClock::advance`].
    pub fn at(millis: u64) -> Self {
        in_range(millis);
        ManualClock {
            millis: Arc::new(AtomicU64::new(millis)),
        }
    }

    /// The current injected time.
    pub fn now_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }

    /// Moves the clock to `millis`.
    pub fn set(&self, millis: u64) {
        in_range(millis);
        self.millis.store(millis, Ordering::SeqCst);
    }

    /// Moves the clock forward.
    ///
    /// # Panics
    ///
    /// When that would pass [`MAX_INJECTED_MILLIS`]; the clock then stays where it was (the
    /// check comes before the move, so even `Duration::MAX` does not wrap it).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let moved = self
            .millis
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |before| {
                before
                    .checked_add(by)
                    .filter(|after| *after <= MAX_INJECTED_MILLIS)
            });
        if let Err(before) = moved {
            in_range(before.saturating_add(by));
        }
    }
}

fn in_range(millis: u64) {
    assert!(
        millis <= MAX_INJECTED_MILLIS,
        "an injected time of {millis} ms is past the latest a store accepts ({MAX_INJECTED_MILLIS} ms, in the year 2255)"
    );
}

impl From<ManualClock> for Clock {
    fn from(clock: ManualClock) -> Self {
        Clock::Manual(clock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_stays_within_what_the_stores_accept() {
        let clock = ManualClock::at(MAX_INJECTED_MILLIS - 1_000);
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now_millis(), MAX_INJECTED_MILLIS);
        for past in [
            std::panic::catch_unwind(|| ManualClock::at(MAX_INJECTED_MILLIS + 1)).is_err(),
            std::panic::catch_unwind(|| clock.set(u64::MAX)).is_err(),
            std::panic::catch_unwind(|| clock.advance(Duration::from_millis(1))).is_err(),
        ] {
            assert!(past, "a time past the latest must be refused");
        }
    }
}
