//! The per-worker limiter and the per-request state: what the App-level middleware, the
//! route guards and the request path share. The request path itself (`impl Limiter`) is in
//! `enforce.rs`; the builder and the App-level middleware in `rate_limiter.rs`.

use std::{
    cell::{Cell, OnceCell, RefCell},
    net::IpAddr,
    rc::Rc,
    sync::Arc,
    time::Duration,
};

use actix_web::dev::ServiceRequest;

use super::{
    attempt::{AttemptOutcome, Unlimited},
    declared_routes::DeclaredRoutes,
    flood_shield::FloodShield,
    header_families::HeaderFamilies,
    local_fallback::LocalFallback,
};
use crate::{
    clock::Clock,
    identity::{IdentitySources, Submitted},
    key::{KeySecret, RouteKey},
    policy::Limit,
    store::{Decision, Store, StoreError},
};

/// Everything a request needs from the limiter; one per worker.
pub(crate) struct Limiter {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Clock,
    pub(crate) sources: IdentitySources,
    pub(crate) prefix: String,
    /// The secret personal values in keys are hashed under, when one was given.
    pub(crate) secret: Option<KeySecret>,
    /// The limiter's own cap on a store call, when set.
    pub(crate) timeout: Option<Duration>,
    pub(crate) headers: HeaderFamilies,
    /// Shared by every worker.
    pub(crate) shield: Arc<FloodShield>,
    /// The local shares of routes that sync; shared by every worker.
    pub(crate) shares: Arc<super::shares::Shares>,
    /// Where routes that fail `local` are limited while the store fails; shared by every
    /// worker.
    pub(crate) fallback: Arc<LocalFallback>,
    pub(crate) unavailable_retry_secs: u64,
    /// Whether a status is a success, which gives back what a limit counting failures only
    /// reserved (unless the handler marked its attempt).
    pub(crate) success: fn(actix_web::http::StatusCode) -> bool,
    /// The App's declared routes, read off its route introspection on the first request.
    pub(crate) declared: OnceCell<DeclaredRoutes>,
    /// The overrides in force, when the limiter reads any.
    pub(crate) overrides: Option<Arc<crate::overrides::Shared>>,
    /// The App's shadow switch ([`RateLimiter::shadow`](super::RateLimiter::shadow)).
    pub(crate) shadow: bool,
    /// The app's answer to refusals, in place of the defaults
    /// ([`RateLimiter::reject_with`](super::RateLimiter::reject_with)).
    pub(crate) reject_with: Option<super::rejection::RejectWith>,
    /// How many requests wait for their turn in this worker, and how many may.
    pub(crate) waiting: Rc<Cell<usize>>,
    pub(crate) max_waiting: usize,
    /// Whether the store keeps bans ([`Store::bans`]): routes are checked without theirs
    /// when it does not.
    pub(crate) bans: bool,
    /// The ban on every limited route ([`RateLimiter::ban`](super::RateLimiter::ban)).
    pub(crate) ban: Option<LimiterBan>,
    /// The app's cost functions by route label
    /// ([`RateLimiter::cost_of`](super::RateLimiter::cost_of)).
    pub(crate) costs: std::collections::HashMap<
        String,
        super::rollout_state::CostFn,
        foldhash::fast::RandomState,
    >,
}

/// The limiter's ban, as a worker keeps it.
pub(crate) struct LimiterBan {
    pub(crate) ban: crate::policy::Ban,
    /// The identity it counts by (the client address unless the ban names one).
    pub(crate) identity: crate::policy::Identity,
    /// What its keys start with: `rl:{ban`.
    pub(crate) stem: String,
}

/// What the request path leaves, with the request's handle, for the handler's
/// [`Budget`](super::Budget).
pub(crate) struct BudgetState {
    pub(crate) limiter: Rc<Limiter>,
    pub(crate) key: RouteKey,
    pub(crate) limits: &'static [Limit],
    /// What the app's cost function weighed the request at, when the route has one.
    pub(crate) cost: Option<u32>,
    /// The store's decision; `None` when the store failed and the route let the request
    /// through.
    pub(crate) decision: Option<Decision>,
    /// Whether the handler reset or gave back this budget itself.
    pub(crate) adjusted: Cell<bool>,
    /// How the handler marked its attempt, if it did.
    pub(crate) outcome: Cell<Option<AttemptOutcome>>,
    /// The request's concurrency places, until its answer takes them
    /// ([`Lease`](super::lease::Lease)).
    pub(crate) lease: Cell<Option<super::lease::Lease>>,
}

/// What the limiter left a request for its handler's [`Budget`](super::Budget): a budget, or
/// the reason it has none.
#[derive(Clone)]
pub(crate) enum Granted {
    Limited(Rc<BudgetState>),
    Unlimited(Unlimited),
}

/// Internal handle in request extensions: the worker's limiter, for the route guards;
/// whether a limiter has counted the request (a declared route's guard or entry, or a
/// `RateLimiter` applying the default policy or counting after the fact); and the username
/// the body submitted, when it was read before anything in front of the route could consume
/// the body. The App-level middleware keeps a copy, so it can tell that a request predicted
/// to reach a declared route was counted there even when the request comes back as an
/// error, without the request. With `RateLimiter`s nested (App and scope) the handles form
/// a chain, and a request counted by one counts for all.
#[derive(Clone)]
pub(crate) struct LimiterHandle(Rc<Passage>);

struct Passage {
    limiter: Rc<Limiter>,
    /// Counted by any limiter.
    counted: Cell<bool>,
    /// Counted by a declared route's own limiter (its guard, or its entry).
    guarded: Cell<bool>,
    submitted: RefCell<Option<Submitted>>,
    /// How the store failed this request: a second check of the request (the default
    /// policy and a declaration both apply to its path) answers with it instead of waiting
    /// for the store again.
    store_error: RefCell<Option<StoreError>>,
    /// The client address this limiter resolved before calling in, for its route guard
    /// (the headers as they reached the App; resolved once).
    client: Cell<Option<Option<IpAddr>>>,
    /// How long the request has waited for the store so far, once it has: a second call
    /// waits only for what is left of the timeout.
    store_waited: Cell<Option<Duration>>,
    /// The budget of the last check this limiter made of the request, or why it made none
    /// though it passed the request on (the allow list, an exempt route), for the handler's
    /// `Budget` (kept here rather than as an extension of its own: one insert less on
    /// every request).
    budget: RefCell<Option<Granted>>,
    /// The handle of a `RateLimiter` further out (one on the App, another on a scope).
    outer: Option<LimiterHandle>,
}

impl Passage {
    /// This passage and those of the limiters further out.
    fn chain(&self) -> impl Iterator<Item = &Passage> {
        std::iter::successors(Some(self), |passage| {
            passage.outer.as_ref().map(|outer| &*outer.0)
        })
    }
}

impl LimiterHandle {
    pub(crate) fn new(limiter: &Rc<Limiter>, outer: Option<LimiterHandle>) -> Self {
        LimiterHandle(Rc::new(Passage {
            limiter: Rc::clone(limiter),
            counted: Cell::new(false),
            guarded: Cell::new(false),
            submitted: RefCell::default(),
            store_error: RefCell::default(),
            store_waited: Cell::new(None),
            client: Cell::new(None),
            budget: RefCell::new(None),
            outer,
        }))
    }

    /// Reads the username `req`'s body submits (the body is put back) and keeps it for
    /// whichever of the route's limiters counts the request; once per request.
    pub(crate) async fn read_username(&self, req: &mut ServiceRequest, route: &str) {
        if self.0.submitted.borrow().is_none() {
            let reader = self.0.limiter.sources.username_reader(route);
            let submitted = reader.read(req).await;
            *self.0.submitted.borrow_mut() = Some(submitted);
        }
    }

    /// The username read by [`LimiterHandle::read_username`], for the limiter that counts
    /// the request.
    pub(crate) fn take_username(&self) -> Option<Submitted> {
        self.0.submitted.borrow_mut().take()
    }

    /// The client address resolved for this request, if it was.
    pub(crate) fn client(&self) -> Option<Option<IpAddr>> {
        self.0.client.get()
    }

    /// Resolves the client address of `req` (once per request and limiter).
    pub(crate) fn resolve_client(&self, req: &ServiceRequest) -> Option<IpAddr> {
        if let Some(client) = self.0.client.get() {
            return client;
        }
        let client = self.0.limiter.sources.trusted_proxies.resolve_request(req);
        self.0.client.set(Some(client));
        client
    }

    /// How the store failed this request, if it did (for any limiter of the chain).
    pub(crate) fn store_error(&self) -> Option<StoreError> {
        self.0
            .chain()
            .find_map(|passage| passage.store_error.borrow().clone())
    }

    /// How long the request has waited for the store (any limiter of the chain), if it
    /// has called it.
    pub(crate) fn store_waited(&self) -> Option<Duration> {
        self.0
            .chain()
            .find_map(|passage| passage.store_waited.get())
    }

    /// Adds `waited` to the request's wait for the store.
    pub(crate) fn add_store_wait(&self, waited: Duration) {
        let total = self.store_waited().unwrap_or_default() + waited;
        self.0.store_waited.set(Some(total));
    }

    /// Keeps `budget`, the request's latest check (or why no limit counts it), for the
    /// handler.
    pub(crate) fn set_budget(&self, budget: Granted) {
        *self.0.budget.borrow_mut() = Some(budget);
    }

    /// The budget of the request's latest check: the innermost limiter's that checked it
    /// or passed it unlimited (a route's guard runs inside the limiters around it, so its
    /// check is the latest).
    pub(crate) fn budget(&self) -> Option<Granted> {
        self.0
            .chain()
            .find_map(|passage| passage.budget.borrow().clone())
    }

    pub(crate) fn record_store_error(&self, error: &StoreError) {
        *self.0.store_error.borrow_mut() = Some(error.clone());
    }

    pub(crate) fn limiter(&self) -> &Rc<Limiter> {
        &self.0.limiter
    }

    /// Whether a limiter of the chain has counted the request.
    pub(crate) fn counted(&self) -> bool {
        self.0.chain().any(|passage| passage.counted.get())
    }

    /// Records that a `RateLimiter` counts the request (its default policy, or after the
    /// fact): no other `RateLimiter` of the chain may. A declared route's own limiter still
    /// counts it (where the default policy and a declaration both apply).
    pub(crate) fn mark_counted(&self) {
        self.0.chain().for_each(|passage| passage.counted.set(true));
    }

    /// Whether a declared route's own limiter (its guard or entry) has counted the request.
    pub(crate) fn guarded(&self) -> bool {
        self.0.chain().any(|passage| passage.guarded.get())
    }

    /// Records that a declared route's own limiter counts the request: nothing else may.
    pub(crate) fn mark_guarded(&self) {
        self.0.chain().for_each(|passage| {
            passage.guarded.set(true);
            passage.counted.set(true);
        });
    }
}
