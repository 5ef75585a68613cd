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

/// The time source passed to every check.
#[derive(Clone, Default)]
pub enum Clock {
    /// The store's own clock: Redis `TIME` for Redis, the system clock for the in-memory store.
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
    pub fn at(millis: u64) -> Self {
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
        self.millis.store(millis, Ordering::SeqCst);
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.millis
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl From<ManualClock> for Clock {
    fn from(clock: ManualClock) -> Self {
        Clock::Manual(clock)
    }
}
