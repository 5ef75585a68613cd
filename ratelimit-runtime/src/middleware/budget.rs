//! A client's budget on a route, from code: the [`Budget`] extractor a handler takes (and
//! [`Unlimited`], why a request has none), the [`AttemptOutcome`] a handler marks its answer
//! with, and `RateLimiter::reset` / `RateLimiter::give_back` for any route and identity.

use std::{fmt, future::Future, pin::Pin, time::Duration};

use actix_web::{
    dev::Payload, error::ErrorInternalServerError, FromRequest, HttpMessage, HttpRequest,
};

pub use super::attempt::{AttemptOutcome, Unlimited};
use super::limiter::{BudgetState, Granted, Limiter, LimiterHandle};
use crate::{
    key::RouteKey,
    policy::{Count, Limit},
    store::{adjust_within, AdjustRequest, Adjustment, Decision, Receipt, StoreError},
};

/// The budget of the client of this request on its route: the route's decision (limit,
/// remaining, reset) and [`reset`](Self::reset) / [`give_back`](Self::give_back) for this
/// client on this route, one store call each, no key built by hand.
///
/// On a route whose limits count different identities (per IP and per username),
/// `reset` and `give_back` change every limit of the route for this request's client, its
/// address's budget too: to clear one identity's limits only (a name's failed sign-ins, not
/// the address's), use [`RateLimiter::reset`](crate::RateLimiter::reset) with that identity.
///
/// A handler under a [`RateLimiter`](crate::RateLimiter) takes it as an argument, on any
/// route. On a request no limit counts (the client is on the allow list, or the route is
/// exempt, by its declaration or by an override) it does nothing and says why:
/// [`unlimited`](Self::unlimited) is `Some`, the figures are `None`, `reset` and `give_back`
/// change nothing and succeed (`give_back` gives back 0). Extracting it fails with a 500 that
/// says why only where no limiter looked at the request before its handler: in an App no
/// `RateLimiter` wraps (a misconfiguration), or in a resource that shadows a declared route
/// (counted after its handler); take `Option<Budget>` where a handler may be served so.
///
/// ```
/// use actix_web::{post, web, HttpResponse};
/// use ratelimit_runtime::{rate_limit, Budget};
///
/// #[derive(serde::Deserialize)]
/// struct Code {
///     code: String,
/// }
///
/// #[rate_limit(limit = 5, window = "10m", identity = "user_id", fail = "closed")]
/// #[post("/verify")]
/// async fn verify(body: web::Json<Code>, budget: Budget) -> HttpResponse {
///     if body.code == "123456" {
///         // A right code clears this user's failed attempts on this route.
///         let _ = budget.reset().await;
///         HttpResponse::Ok().finish()
///     } else {
///         HttpResponse::Forbidden().body(format!("{:?} attempts left", budget.remaining()))
///     }
/// }
/// ```
///
/// On a route that counts failures only (`count = "failures"`),
/// [`mark_failure`](Self::mark_failure) and [`mark_success`](Self::mark_success) say how the
/// attempt went when the answer's status does not: see [`AttemptOutcome`].
#[derive(Clone)]
pub struct Budget(Granted);

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Granted::Limited(state) => f
                .debug_struct("Budget")
                .field("limits", &state.limits)
                .field("decision", &state.decision)
                .finish_non_exhaustive(),
            Granted::Unlimited(why) => f.debug_struct("Budget").field("unlimited", why).finish(),
        }
    }
}

impl FromRequest for Budget {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let budget = match req.extensions().get::<LimiterHandle>() {
            Some(handle) => handle.budget().map(Budget).ok_or_else(|| {
                ErrorInternalServerError(
                    "`Budget` was extracted on a request its `RateLimiter` checked no limit for before the handler: another resource on a declared route's path served it, and it is counted after the handler (see the error the limiter logged); take `Option<Budget>` there",
                )
            }),
            None => Err(ErrorInternalServerError(
                "`Budget` was extracted on a request no `RateLimiter` saw: wrap the App with `RateLimiter::new(store)`, or take `Option<Budget>` where a handler may be served without one",
            )),
        };
        std::future::ready(budget)
    }
}

impl Budget {
    fn state(&self) -> Option<&BudgetState> {
        match &self.0 {
            Granted::Limited(state) => Some(state),
            Granted::Unlimited(_) => None,
        }
    }

    /// Why no limit counts this request (the client is on the allow list, or the route is
    /// exempt), if none does: then this budget does nothing.
    pub fn unlimited(&self) -> Option<Unlimited> {
        match &self.0 {
            Granted::Limited(_) => None,
            Granted::Unlimited(why) => Some(*why),
        }
    }

    /// The store's decision on this request: one state per stacked limit. `None` when the
    /// store failed and the route let the request through, or when no limit counts the
    /// request ([`unlimited`](Self::unlimited)).
    pub fn decision(&self) -> Option<&Decision> {
        self.state()?.decision.as_ref()
    }

    /// The limit the headers report (the one with the fewest requests left), its max.
    pub fn limit(&self) -> Option<u32> {
        self.binding().map(|(_, state)| state.limit.max())
    }

    /// Units left after this one in that limit (requests, unless the limit has a
    /// [cost](crate::policy::Limit::cost)).
    pub fn remaining(&self) -> Option<u32> {
        self.binding().map(|(_, state)| state.remaining)
    }

    /// How long until that limit's budget is whole again.
    pub fn reset_after(&self) -> Option<Duration> {
        self.binding().map(|(_, state)| state.reset_after)
    }

    fn binding(&self) -> Option<(usize, &crate::store::LimitState)> {
        self.decision().and_then(Decision::binding)
    }

    /// Marks this request's attempt a success, whatever the answer's status (a `303 See
    /// Other` to the account page after a right password): on a route that counts failures
    /// only, its unit goes back. A mark on the response ([`AttemptOutcome`] in its
    /// extensions) wins over this one.
    pub fn mark_success(&self) {
        if let Some(state) = self.state() {
            state.outcome.set(Some(AttemptOutcome::Success));
        }
    }

    /// Marks this request's attempt a failure, whatever the answer's status (a `200` with
    /// `{"ok": false}` after a wrong password): on a route that counts failures only, its
    /// unit stays spent. A mark on the response ([`AttemptOutcome`] in its extensions) wins
    /// over this one.
    pub fn mark_failure(&self) {
        if let Some(state) = self.state() {
            state.outcome.set(Some(AttemptOutcome::Failure));
        }
    }

    /// Clears this client's budget on this route: every limit's count and lockout. This
    /// instance stops refusing it at once; the others within a second (their flood shields
    /// ask the store again at least that often). A handler that resets or gives back takes
    /// over from `count = "failures"`: its request's own unit is not given back as well. On
    /// a request no limit counts ([`unlimited`](Self::unlimited)), nothing to clear: `Ok`.
    ///
    /// # Errors
    ///
    /// The store's, when it failed or did not answer within the timeout.
    pub async fn reset(&self) -> Result<(), StoreError> {
        let Some(state) = self.state() else {
            return Ok(());
        };
        state.adjusted.set(true);
        let change = Adjustment::Reset;
        state
            .limiter
            .adjust(&state.key, state.limits, change)
            .await
            .map(|_| ())
    }

    /// Gives `units` back to every limit of this route for this client (never past a whole
    /// budget): the units given back, over all limits. On a request no limit counts
    /// ([`unlimited`](Self::unlimited)), none: `Ok(0)`.
    ///
    /// # Errors
    ///
    /// The store's, when it failed or did not answer within the timeout.
    pub async fn give_back(&self, units: u32) -> Result<u64, StoreError> {
        let Some(state) = self.state() else {
            return Ok(0);
        };
        state.adjusted.set(true);
        let change = Adjustment::GiveBack {
            units,
            receipt: None,
        };
        state.limiter.adjust(&state.key, state.limits, change).await
    }

    /// Counts `units` more in every limit of this route for this client, after the fact:
    /// what the request turned out to cost once the handler knew (rows returned, bytes
    /// sent), in one more store call. Never refused, since the work is done: the budget may
    /// go below nothing, at most one whole budget below (a limit's count up to twice its
    /// limit), and the next requests are refused until it is back, as the limit's own rule
    /// says. The units counted, over all limits. On a request no limit counts
    /// ([`unlimited`](Self::unlimited)), none: `Ok(0)`. Give the units the check did not
    /// count already: a route that charges by result declares the least a request costs
    /// (`cost`, or 1) and charges the rest.
    ///
    /// ```
    /// use actix_web::{get, HttpResponse};
    /// use ratelimit_runtime::{rate_limit, Budget};
    ///
    /// /// 1,000 rows an hour per client: the check counts the first row, the handler the rest.
    /// #[rate_limit(limit = 1000, window = "1h", identity = "ip")]
    /// #[get("/rows")]
    /// async fn rows(budget: Budget) -> HttpResponse {
    ///     let rows: Vec<u32> = (0..250).collect();
    ///     let _ = budget.charge(rows.len() as u32 - 1).await;
    ///     HttpResponse::Ok().json(rows)
    /// }
    /// # let _ = actix_web::App::new().service(rows);
    /// ```
    ///
    /// # Errors
    ///
    /// The store's, when it failed or did not answer within the timeout. The error cannot say
    /// whether the store ran the call: one refused or never sent counts nothing, but one that
    /// timed out or lost its connection while the store ran it may have counted the units, so
    /// a retry after an error may count them twice.
    pub async fn charge(&self, units: u32) -> Result<u64, StoreError> {
        let Some(state) = self.state() else {
            return Ok(0);
        };
        let change = Adjustment::Charge { units };
        state.limiter.adjust(&state.key, state.limits, change).await
    }
}

impl Limiter {
    /// One store call that changes the budget at `key` for `limits`, bounded as a check is;
    /// this process's flood shield forgets the key.
    pub(crate) fn adjust<'a>(
        &'a self,
        key: &'a RouteKey,
        limits: &'a [Limit],
        change: Adjustment<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<u64, StoreError>> + 'a>> {
        Box::pin(self.adjust_within(key, limits, change, self.timeout))
    }

    /// [`adjust`](Self::adjust) bounded by `timeout` (`None`: the store's own, else the
    /// default).
    async fn adjust_within(
        &self,
        key: &RouteKey,
        limits: &[Limit],
        change: Adjustment<'_>,
        timeout: Option<Duration>,
    ) -> Result<u64, StoreError> {
        // A concurrency limit's places are its requests' own: units given back or charged
        // do not touch them (a reset clears them with the rest).
        let rated: Vec<Limit>;
        let limits = match change {
            Adjustment::GiveBack { .. } | Adjustment::Charge { .. }
                if limits.iter().any(Limit::is_concurrency) =>
            {
                rated = limits
                    .iter()
                    .filter(|l| !l.is_concurrency())
                    .copied()
                    .collect();
                if rated.is_empty() {
                    return Ok(0);
                }
                &rated[..]
            }
            _ => limits,
        };
        let request = AdjustRequest::new(key, limits, self.clock.now_millis(), change);
        let changed = adjust_within(&*self.store, timeout, request).await;
        for base in key.bases() {
            self.shield.forget(base);
        }
        changed
    }

    /// After the handler answered `succeeded`: a request that reserved units in limits that
    /// count failures only gives them back when it succeeded, where its check counted them,
    /// within what the request's checks left of its wait for the store (`handle`): a
    /// request waits for the store at most the timeout in all. A failure to give back (a
    /// store that did not answer in that time) leaves the units spent (the strict side),
    /// logged. Whether they went back.
    pub(crate) async fn settle(
        &self,
        key: &RouteKey,
        limits: &[Limit],
        receipt: Option<&Receipt>,
        succeeded: bool,
        route: &str,
        handle: &LimiterHandle,
    ) -> bool {
        if !succeeded {
            return false;
        }
        let failures_only: Vec<Limit> = limits
            .iter()
            .filter(|limit| limit.count() == Count::Failures)
            .copied()
            .collect();
        if failures_only.is_empty() {
            return false;
        }
        let left = self
            .store_budget()
            .saturating_sub(handle.store_waited().unwrap_or_default());
        // With a receipt the store gives back one check's worth, each limit's cost. Without
        // one (a check split across Cluster slots, a store that gives none) it takes units as
        // given: each limit gets its own cost back, one call per distinct cost.
        let groups: Vec<(u32, Vec<Limit>)> = if Receipt::for_units(receipt).is_some() {
            vec![(1, failures_only)]
        } else {
            let mut costs: Vec<u32> = failures_only.iter().map(Limit::cost).collect();
            costs.sort_unstable();
            costs.dedup();
            costs
                .into_iter()
                .map(|cost| {
                    let limits = failures_only
                        .iter()
                        .filter(|limit| limit.cost() == cost)
                        .copied()
                        .collect();
                    (cost, limits)
                })
                .collect()
        };
        let calls = groups.iter().map(|(units, limits)| {
            let change = Adjustment::GiveBack {
                units: *units,
                receipt,
            };
            self.adjust_within(key, limits, change, Some(left))
        });
        let given = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .try_fold(0, |sum, given| given.map(|units| sum + units));
        match given {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(
                    target: "ratelimit",
                    route,
                    %error,
                    "a success on a route that counts failures only could not give its unit back; it stays spent"
                );
                false
            }
        }
    }
}
