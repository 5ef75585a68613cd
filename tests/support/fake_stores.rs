//! Stores that stand in for a Redis in trouble, for tests of what the limiter does then.
//! Each counts the checks it was asked for.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use ratelimit_runtime::store::{CheckFuture, CheckRequest, Store, StoreError, StoreErrorKind};

/// A store that never answers, as a hung Redis or one behind a dead network path: every
/// call runs into the limiter's timeout.
#[derive(Clone, Default)]
pub struct Hung(Arc<AtomicUsize>);

impl Hung {
    /// How many checks it was asked for.
    pub fn calls(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Store for Hung {
    fn check<'a>(&'a self, _: CheckRequest<'a>) -> CheckFuture<'a> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }

    fn kind(&self) -> &'static str {
        "hung"
    }
}

/// A store that is down, as a Redis that refuses connections: every call fails at once.
#[derive(Clone, Default)]
pub struct Down(Arc<AtomicUsize>);

impl Down {
    /// How many checks it was asked for.
    pub fn calls(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Store for Down {
    fn check<'a>(&'a self, _: CheckRequest<'a>) -> CheckFuture<'a> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Err(StoreError::new(
                StoreErrorKind::Connection,
                "connection refused",
            ))
        })
    }

    fn kind(&self) -> &'static str {
        "down"
    }
}
