//! Waiting for a turn (`wait` on a route): a request over its rate limits that one store
//! call gave a turn within its wait sleeps on a timer until then, holding one of its
//! worker's places for waiting requests ([`Failure::max_waiting`](crate::settings::Failure::max_waiting)).
//! A request dropped before its turn (actix drops it when its client resets the connection,
//! or closes it with half-closed connections off) gives back what its turn counted.

use std::{cell::Cell, rc::Rc, sync::Arc, time::Duration};

use super::lease::spawn;
use crate::{
    key::RouteKey,
    policy::Limit,
    store::{adjust_within, AdjustRequest, Adjustment, Receipt, Store},
};

/// One of a worker's places for requests waiting for their turn, from the store call that
/// finds the turn until the request runs; given back when dropped.
pub(crate) struct Waiting {
    count: Rc<Cell<usize>>,
}

impl Waiting {
    /// A place among `count`'s, when fewer than `max` are taken.
    pub(crate) fn enter(count: &Rc<Cell<usize>>, max: usize) -> Option<Waiting> {
        let taken = count.get();
        (taken < max).then(|| {
            count.set(taken + 1);
            Waiting {
                count: Rc::clone(count),
            }
        })
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.count.set(self.count.get() - 1);
    }
}

/// What gives a turn back when its request is dropped before it: the store, and where the
/// reservation counted.
pub(crate) struct Turn {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) clock: crate::clock::Clock,
    pub(crate) key: RouteKey,
    /// The limits as checked (with the request's cost).
    pub(crate) limits: Vec<Limit>,
    pub(crate) receipt: Receipt,
    pub(crate) route: String,
}

/// Sleeps `delay`, holding `place`; dropped before it is over, gives `turn` back on a task
/// of its own (logged when that cannot be: outside the server's runtime, the turn stays
/// counted).
pub(crate) async fn wait_for(delay: Duration, place: Option<Waiting>, turn: Turn) {
    let mut guard = GiveBackUnlessServed {
        turn: Some(turn),
        _place: place,
    };
    tokio::time::sleep(delay).await;
    guard.turn = None;
}

struct GiveBackUnlessServed {
    turn: Option<Turn>,
    _place: Option<Waiting>,
}

impl Drop for GiveBackUnlessServed {
    fn drop(&mut self) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        let route = turn.route.clone();
        if spawn(give_back(turn)).is_none() {
            tracing::warn!(
                target: "ratelimit",
                route = %route,
                "a request left before its turn outside the server's runtime; its turn stays counted"
            );
        }
    }
}

async fn give_back(turn: Turn) {
    let change = Adjustment::GiveBack {
        units: 1,
        receipt: Some(&turn.receipt),
    };
    let now = turn.clock.now_millis();
    let request = AdjustRequest::new(&turn.key, &turn.limits, now, change);
    match adjust_within(&*turn.store, turn.timeout, request).await {
        Ok(_) => tracing::debug!(
            target: "ratelimit",
            route = %turn.route,
            "a request left before its turn; its turn was given back"
        ),
        Err(error) => tracing::warn!(
            target: "ratelimit",
            route = %turn.route,
            %error,
            "a request left before its turn, which could not be given back"
        ),
    }
}
