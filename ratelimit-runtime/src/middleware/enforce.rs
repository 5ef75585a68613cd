//! One request on a limited route: identity → key → one store call (or the flood shield) →
//! handler, 429, or 503.

use std::{
    future::Future,
    net::IpAddr,
    rc::Rc,
    sync::{Arc, LazyLock},
    time::{Duration, Instant},
};

use actix_web::{
    body::{BodySize, BoxBody, EitherBody, MessageBody},
    dev::{Service, ServiceRequest, ServiceResponse},
    http::{header::HeaderMap, StatusCode},
    Error, HttpMessage, HttpRequest, HttpResponse,
};

use super::{
    answer,
    attempt::AttemptOutcome,
    flood_shield::{Blocked, Shielded},
    headers,
    lease::{Lease, LeaseBody, Places, CONCURRENCY_RETRY},
    limiter::{BudgetState, Granted, Limiter, LimiterHandle},
    overridden::Resolved,
    route_info::RouteInfo,
    shares::Entry,
    telemetry::{self, Client, Outcome, StoreFailure},
    waiting::{self, Turn, Waiting},
};
use crate::{
    identity::{reads_body, ClientIdentity, Submitted, Unreadable, UsernameReader},
    key::RouteKey,
    overrides::Tier,
    policy::{Count, FailMode, Identity, IdentityPart, Limit, RoutePolicy},
    store::{
        AdjustRequest, Adjustment, CheckRequest, Decision, LimitState, Receipt, StoreError,
        StoreErrorKind,
    },
};

/// The state a shielded rejection reports in its headers: the remembered limit is exhausted
/// until its retry time.
fn shielded_state(policy: &RoutePolicy, blocked: Blocked, now: u64) -> Option<LimitState> {
    let limit = *policy.limits().get(blocked.limit_index)?;
    Some(LimitState {
        limit,
        allowed: false,
        remaining: 0,
        retry_after: Duration::from_millis(blocked.until.saturating_sub(now)),
        reset_after: Duration::from_millis(blocked.reset_at.saturating_sub(now)),
    })
}

impl Limiter {
    /// The client's `pk` on `limit`'s key ([`HeaderFamilies::partition_key`]): none unless
    /// the limiter sends one and has a key secret to hash it under, nor on a route that
    /// hides its limits.
    ///
    /// [`HeaderFamilies::partition_key`]: crate::HeaderFamilies::partition_key
    fn partition_key(
        &self,
        route: &RouteInfo,
        key: &RouteKey,
        limit: &Limit,
    ) -> Option<crate::key::PartitionKey> {
        if !(self.headers.partition_key && self.headers.ietf_draft) || route.policy.hides_headers()
        {
            return None;
        }
        let secret = self.secret.as_ref()?;
        Some(secret.partition_key(key.base_of(limit)))
    }

    /// Sets a limited response's rate-limit headers for `binding` on `key`, with the client's
    /// `pk` when the limiter sends one.
    fn insert_headers(
        &self,
        headers: &mut HeaderMap,
        route: &RouteInfo,
        key: &RouteKey,
        binding: (usize, &LimitState),
    ) {
        let partition = self.partition_key(route, key, &binding.1.limit);
        headers::insert(headers, self.headers, route, binding, partition.as_ref());
    }

    /// Whether `policy` only counts and logs here, never refuses: a shadow limit, or the
    /// App's shadow switch where the route does not say `enforce = true` (or a route saying
    /// `enforce = false`).
    pub(crate) fn shadowed(&self, policy: &crate::policy::RoutePolicy) -> bool {
        policy.shadowed(self.shadow)
    }

    /// Milliseconds on the clock that times the flood shield: the injected clock in tests,
    /// else a monotonic one (since the process first asked). The shield is this process's
    /// own and only ever compares its own readings, so a step of the system clock (an NTP
    /// correction, a VM resumed) must not hold a key refused past its retry time.
    pub(crate) fn local_now(&self) -> u64 {
        local_now(&self.clock)
    }

    /// The decision of this process while the store fails (`fail = "local"`), at its share of
    /// each limit. A request answered already counts in the route's rated limits only, as
    /// [`check`](Self::check) counts it: it takes no concurrency place here either.
    async fn decide_locally(
        &self,
        route: &RouteInfo,
        key: &RouteKey,
        cost: Option<u32>,
        counting: Counting,
        error: &StoreError,
    ) -> Decision {
        let all = route.policy.limits();
        let limits = match &route.rated {
            Some([rated, _]) if counting != Counting::Live => rated,
            _ => all,
        };
        if limits.is_empty() {
            return with_places_free(all, Decision::new(Vec::new()));
        }
        let weighed = cost.map(|cost| super::cost::costed(limits, cost));
        let limits = weighed.as_deref().unwrap_or(limits);
        let now = self.clock.now_millis();
        let (label, policy) = (&route.label, &route.metrics.policy);
        let decision = self
            .fallback
            .decide(label, policy, key, limits, now, error)
            .await;
        if limits.len() == all.len() {
            decision
        } else {
            with_places_free(all, decision)
        }
    }

    /// Where this limiter's requests hold their concurrency places.
    fn places(&self) -> Places {
        Places {
            store: Arc::clone(&self.store),
            fallback: Arc::clone(&self.fallback),
            clock: self.clock.clone(),
            timeout: self.timeout,
        }
    }

    /// The span of one decision on `route` (see [`telemetry::decision_span`]).
    fn decision_span(&self, route: &RouteInfo, counting: Counting) -> tracing::Span {
        telemetry::decision_span(
            &route.metrics,
            &route.method,
            &route.pattern,
            self.store.kind(),
            counting.as_str(),
        )
    }

    /// Limits one request before its handler: the handler's answer (with the rate-limit
    /// headers), or the limiter's own (429, or 503 for a route that fails closed).
    ///
    /// Every request's guard boxes this future, so it and the futures it awaits are kept
    /// under 1 KB, past which glibc's `malloc` takes its slow path for large blocks: they
    /// are blocks holding their arguments once, and the paths few requests take are boxed.
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` holds each argument twice in its future; this block, once"
    )]
    pub(crate) fn enforce<'a, S, B>(
        &'a self,
        mut req: ServiceRequest,
        route: &'a RouteInfo,
        service: &'a S,
        handle: &'a LimiterHandle,
    ) -> impl Future<Output = Result<ServiceResponse<EitherBody<B>>, Error>> + 'a
    where
        S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'a,
        B: MessageBody + 'static,
    {
        async move {
            let overridden;
            let route = match self.resolve(&req, route, handle) {
                Resolved::AsIs => route,
                Resolved::Route(built) => {
                    overridden = built;
                    &*overridden
                }
                Resolved::Pass(why) => {
                    // No limit counts the request; a handler's `Budget` says why.
                    handle.set_budget(Granted::Unlimited(why));
                    return service
                        .call(req)
                        .await
                        .map(ServiceResponse::map_into_left_body);
                }
                Resolved::Deny(response) => {
                    return Ok(req.into_response(response).map_into_right_body())
                }
            };
            let submitted = handle.take_username();
            let cost = self.request_cost(&req, route);
            let (decision, key, local) = match self
                .decide(&mut req, route, submitted, handle, Counting::Live, cost)
                .await
            {
                Decided::OverLimit(response) | Decided::Refuse(response) => {
                    return Ok(req.into_response(response).map_into_right_body())
                }
                Decided::Proceed {
                    decision,
                    key,
                    local,
                } => (decision, key, local),
            };
            let budget = Holding(Rc::new(BudgetState {
                limiter: Rc::clone(handle.limiter()),
                key,
                limits: route.policy.limits(),
                cost,
                decision,
                adjusted: std::cell::Cell::new(false),
                outcome: std::cell::Cell::new(None),
                lease: std::cell::Cell::new(None),
            }));
            // The places a concurrency limit gave this request, held until its response
            // body has been sent or its client went away (dropping this future drops them).
            // Kept in the budget's state, not in this future: a route without a concurrency
            // limit adds nothing to its request's future.
            if route.holds_places() {
                if let Some(decision) = budget.decision.as_ref().filter(|d| d.allowed) {
                    budget.lease.set(Lease::taken(
                        || self.places(),
                        &budget.key,
                        budget.limits,
                        decision.receipt.as_ref(),
                        local,
                        &route.metrics,
                        &route.label,
                    ));
                }
            }
            handle.set_budget(Granted::Limited(Rc::clone(&budget.0)));
            let mut answer = service.call(req).await;
            // Units reserved in limits that count failures only go back after a success (not
            // after a panic, which drops this future: a crash counts as a failure). Not for a
            // decision made in this process while the store failed, nor after the handler reset or
            // gave back the budget itself (it would be given back twice).
            let adjusted = budget.adjusted.get();
            let mut gave_back = false;
            // Only a limit that counts failures only has anything to give back. The give-back
            // is boxed, as are the other paths few requests take (a username read, the local
            // fallback): each request's future stays small.
            let counts_failures = route
                .policy
                .limits()
                .iter()
                .any(|limit| limit.count() == Count::Failures);
            if let Some(decision) = budget
                .decision
                .as_ref()
                .filter(|d| d.allowed && !local && counts_failures)
            {
                let succeeded = self.succeeded(&answer, budget.outcome.get());
                if !adjusted {
                    // What the check counted: the weighed cost, when the app weighs the route.
                    let weighed = budget
                        .cost
                        .map(|cost| super::cost::costed(budget.limits, cost));
                    gave_back = Box::pin(self.settle(
                        &budget.key,
                        weighed.as_deref().unwrap_or(budget.limits),
                        decision.receipt.as_ref(),
                        succeeded,
                        &route.label,
                        handle,
                    ))
                    .await;
                }
                // A failure counts toward the route's bans once it is one (unless the
                // handler took its budget over, resetting or giving back).
                if !succeeded && !adjusted {
                    Box::pin(self.ban_failure(&budget.key, route, handle)).await;
                }
            }
            let lease = budget.lease.take();
            let inner_answered = route.is_default_policy() && handle.guarded();
            let settled = (gave_back, lease.is_some(), inner_answered);
            self.add_headers(&mut answer, route, &budget, settled);
            match answer {
                Ok(response) => Ok(match lease {
                    None => response.map_into_left_body(),
                    Some(lease) => Box::pin(held_by(response, lease)).await,
                }),
                // The places go back as the lease is dropped.
                Err(error) => Err(error),
            }
        }
    }

    /// Takes one of the worker's places for a waiting request into `place`, when one is
    /// free.
    fn enter_waiting(&self, place: &mut Option<Waiting>) -> bool {
        *place = Waiting::enter(&self.waiting, self.max_waiting);
        place.is_some()
    }

    /// Sleeps `delay`, the turn `checked` gave the request, holding the worker's place for
    /// a waiting request; dropped before then (its client went away), gives the turn back
    /// to `limits` (as checked) by its receipt. Answers `checked`, kept meanwhile: awaited
    /// boxed, so that a check's future holds nothing more for it.
    async fn wait_turn(
        &self,
        route: &RouteInfo,
        key: &RouteKey,
        limits: &[Limit],
        delay: Duration,
        place: Waiting,
        checked: Result<Decision, StoreError>,
    ) -> Result<Decision, StoreError> {
        let receipt = checked.as_ref().ok().and_then(|d| d.receipt.clone());
        match receipt {
            Some(receipt) => {
                let turn = Turn {
                    store: Arc::clone(&self.store),
                    timeout: self.timeout,
                    clock: self.clock.clone(),
                    key: key.clone(),
                    limits: limits.to_vec(),
                    receipt,
                    route: route.label.to_string(),
                };
                waiting::wait_for(delay, Some(place), turn).await;
            }
            // A decision gives a delay on its receipt only.
            None => drop(place),
        }
        checked
    }

    /// Adds to `answer` the rate-limit headers of `budget`'s decision: what is left after the
    /// request (`gave_back`: a success gave its unit back to the limits that count failures
    /// only; `placed`: the request's concurrency places are back when its answer ends). None
    /// on a shadow route, nor where a declaration's own limiter answered inside
    /// (`inner_answered`): that limiter's figures (or its 429 or 503) stand.
    fn add_headers<B>(
        &self,
        answer: &mut Result<ServiceResponse<B>, Error>,
        route: &RouteInfo,
        budget: &BudgetState,
        (gave_back, placed, inner_answered): (bool, bool, bool),
    ) {
        let settled = gave_back
            .then(|| budget.decision.as_ref().map(failures_given_back))
            .flatten();
        let decision = settled.as_ref().or(budget.decision.as_ref());
        let back;
        let decision = match decision {
            Some(decision) if placed => {
                back = places_back(decision);
                Some(&back)
            }
            decision => decision,
        };
        // A shadow limit is invisible to clients: no headers that would make them back off.
        let binding = if self.shadowed(&route.policy) || inner_answered {
            None
        } else {
            decision.and_then(Decision::binding)
        };
        let Some(binding) = binding else {
            return;
        };
        match answer {
            Ok(response) => {
                self.insert_headers(response.headers_mut(), route, &budget.key, binding);
            }
            // An error (a scope's auth layer, the handler) answers with the headers too.
            // Added as a response mapper, so the error keeps its own type for middleware
            // further out that downcasts it (a wrapper type would hide it).
            Err(error) => {
                let mut limit_headers = HeaderMap::new();
                self.insert_headers(&mut limit_headers, route, &budget.key, binding);
                error.add_response_mapper(move |mut response| {
                    for (name, value) in &limit_headers {
                        response.headers_mut().insert(name.clone(), value.clone());
                    }
                    response
                });
            }
        }
    }

    /// Whether the handler's `answer` is a success, for limits that count failures only: as
    /// the handler marked it (on the response, else on its `Budget`: `marked`), else by its
    /// status (an error's, for an error). The mark wins: a sign-in's status does not always
    /// tell (a `303` to the account page after a right password, a `200` with an error in
    /// the body after a wrong one).
    fn succeeded<B>(
        &self,
        answer: &Result<ServiceResponse<B>, Error>,
        marked: Option<AttemptOutcome>,
    ) -> bool {
        let (status, on_response) = match answer {
            Ok(response) => (
                response.status(),
                response
                    .response()
                    .extensions()
                    .get::<AttemptOutcome>()
                    .copied(),
            ),
            Err(error) => (error.as_response_error().status_code(), None),
        };
        match on_response.or(marked) {
            Some(AttemptOutcome::Success) => true,
            Some(AttemptOutcome::Failure) => false,
            None => (self.success)(status),
        }
    }

    /// Counts, after the fact, a request that something else answered before its route's
    /// guard saw it (the route's own middleware, a scope's, or another resource on the
    /// path): the answer to send on. A refusal, as an answer or as an error, becomes the
    /// route's 429 when the client is over the limit; a success is counted and kept (it
    /// may have done what the client asked, and a 429 would invite a retry). A refusal
    /// counts by `client`, the address resolved before the request was passed on (an error
    /// carries no request, and a refused key may be made up), and the submitted username.
    pub(crate) async fn count_answered<B>(
        &self,
        answer: Result<ServiceResponse<B>, Error>,
        route: &RouteInfo,
        client: Option<IpAddr>,
        handle: &LimiterHandle,
    ) -> Result<ServiceResponse<EitherBody<B>>, Error> {
        let tier = match &answer {
            Ok(response) if self.overrides.is_some() || !route.policy.tiers().is_empty() => {
                response.request().extensions().get::<Tier>().cloned()
            }
            _ => None,
        };
        let overridden;
        let route = match self.resolve_answered(route, client, tier.as_ref()) {
            Resolved::AsIs => route,
            Resolved::Route(built) => {
                overridden = built;
                &*overridden
            }
            Resolved::Pass(_) => return answer.map(ServiceResponse::map_into_left_body),
            // A denied client gets the deny list's 403 in place of a refusal; what something
            // else already served stays served.
            Resolved::Deny(denied) => {
                return match answer {
                    Ok(response) if is_refusal(response.status()) => {
                        let request = response.request().clone();
                        Ok(ServiceResponse::new(request, denied).map_into_right_body())
                    }
                    Ok(response) => Ok(response.map_into_left_body()),
                    Err(error) => Err(answer::RefusedOverLimit::new(error, denied).into()),
                }
            }
        };
        match answer {
            // Counted like an error: the key, user id or header it refused may be made up,
            // and each guessed API key refused with a 401 would otherwise get a budget of
            // its own.
            Ok(response) if is_refusal(response.status()) => {
                match self.charge_refusal(client, route, handle).await {
                    Some(mut too_many) => {
                        answer::keep_outer_headers(too_many.headers_mut(), response.headers());
                        let request = response.request().clone();
                        Ok(ServiceResponse::new(request, too_many).map_into_right_body())
                    }
                    None => Ok(response.map_into_left_body()),
                }
            }
            Ok(response) => {
                self.charge_success(response.request().clone(), route, handle)
                    .await;
                Ok(response.map_into_left_body())
            }
            Err(error) => match self.charge_refusal(client, route, handle).await {
                Some(too_many) => Err(answer::RefusedOverLimit::new(error, too_many).into()),
                None => Err(error),
            },
        }
    }

    /// Counts a request that something else served before its route's guard saw it (another
    /// resource on the path): kept whatever the count says (it may have done what the client
    /// asked, and a 429 would invite a retry); a store error keeps it too. The body is gone
    /// by now: a username counts as the one `handle` read before the body was passed on,
    /// else as unreadable.
    async fn charge_success(
        &self,
        request: HttpRequest,
        route: &RouteInfo,
        handle: &LimiterHandle,
    ) {
        let mut counted = ServiceRequest::from_request(request);
        let submitted = handle
            .take_username()
            .unwrap_or(Submitted::Unreadable(Unreadable::NoBody));
        let decided = self
            .decide(
                &mut counted,
                route,
                Some(submitted),
                handle,
                Counting::Served,
                None,
            )
            .await;
        // A success: limits that count failures only give the unit back at once.
        if let Decided::Proceed {
            decision: Some(decision),
            key,
            local: false,
        } = decided
        {
            if decision.allowed {
                let receipt = decision.receipt.as_ref();
                self.settle(
                    &key,
                    route.policy.limits(),
                    receipt,
                    true,
                    &route.label,
                    handle,
                )
                .await;
            }
        }
    }

    /// Counts a request that the middleware in front of its route refused, with an answer or
    /// an error, by the client address resolved before and the username `handle` read from
    /// its body (else as unreadable; `IdentitySources::refused`): a part the client or an
    /// auth layer supplies (API key, user id, header) may be what was refused. The 429 (or
    /// the app's answer in its place) to send instead when the client is over the limit;
    /// `None` to send the refusal on.
    async fn charge_refusal(
        &self,
        client: Option<IpAddr>,
        route: &RouteInfo,
        handle: &LimiterHandle,
    ) -> Option<HttpResponse> {
        let submitted = handle
            .take_username()
            .unwrap_or(Submitted::Unreadable(Unreadable::NoBody));
        let identities: Vec<(Identity, ClientIdentity)> = route
            .identities
            .iter()
            .map(|identity| {
                let refused = self.sources.refused(client, *identity, submitted.clone());
                (*identity, refused)
            })
            .collect();
        match self
            .decide_for(&identities, route, handle, Counting::Refused, None)
            .await
        {
            Decided::OverLimit(response) => Some(response),
            Decided::Refuse(_) | Decided::Proceed { .. } => None,
        }
    }

    /// How long one request may wait for the store in all: the limiter's timeout when set,
    /// else the store's own, else the default.
    pub(crate) fn store_budget(&self) -> Duration {
        self.timeout
            .or_else(|| self.store.timeout())
            .unwrap_or(crate::store::DEFAULT_TIMEOUT)
    }

    /// The timer a store call of this request runs under (`None`: the store's own), and the
    /// whole budget of the request's store calls. One source of truth for the timeout: the
    /// limiter's when set (given to the store, which would otherwise stop at its own, shorter
    /// or longer), else the store's own (the Redis stores bound every call), else the
    /// default; a second call of the request gets what the first left of it.
    #[inline]
    fn store_timer(&self, handle: &LimiterHandle) -> (Option<Duration>, Duration) {
        let own_timer = self.timeout.or_else(|| {
            self.store
                .timeout()
                .is_none()
                .then_some(crate::store::DEFAULT_TIMEOUT)
        });
        let budget = self.store_budget();
        let timer = match handle.store_waited() {
            // The first call of the request.
            None => own_timer,
            Some(waited) => Some(budget.saturating_sub(waited)),
        };
        (timer, budget)
    }

    /// The stack `route` is checked with when a ban covers it (its own, the limiter's), when
    /// the store keeps bans.
    pub(crate) fn ban_stack(&self, route: &RouteInfo) -> Option<Rc<[Limit]>> {
        if !self.bans {
            return None;
        }
        route.ban_stack(self.ban.as_ref().map(|ban| ban.ban))
    }

    /// The stack a request `counting` as it does is checked with when a ban covers its
    /// route: a request its route's guard decides, on a route that refuses (no `wait`, not
    /// in shadow). `None` at once where no ban is declared.
    #[inline]
    fn banning(&self, route: &RouteInfo, counting: Counting) -> Option<Rc<[Limit]>> {
        if self.ban.is_none() && route.policy.ban().is_none() {
            return None;
        }
        let refuses = counting == Counting::Live
            && !self.shadowed(&route.policy)
            && route.policy.wait().is_none();
        self.ban_stack(route).filter(|_| refuses)
    }

    /// Whether a request `counting` as it does on `route` is decided from a local share: a
    /// request its route's guard decides, on a route that syncs and refuses (not in shadow).
    #[inline]
    fn syncs(&self, route: &RouteInfo, counting: Counting) -> bool {
        route.policy.sync().is_some() && counting == Counting::Live && !self.shadowed(&route.policy)
    }

    /// [`check`](Self::check) of a route that syncs, for a request the share in hand could not
    /// decide (`share`, from [`share_for`](Self::share_for); `None`: checked as on any route):
    /// decided after one store call (one per key at a time: the others wait for its answer,
    /// and decide from the new share it took); the unspent rest of the last share goes back
    /// in a call of its own, off the request path. The call
    /// runs in a task of its own, so that a request that gives up (its timeout, its client
    /// gone) leaves the share it took to the others; a call that failed answers the requests
    /// that find it for an interval. Bounded as a check is, the wait for the turn included; a
    /// store that takes no shares checks the request.
    async fn check_synced(
        &self,
        key: &RouteKey,
        route: &RouteInfo,
        handle: &LimiterHandle,
        span: &tracing::Span,
        cost: Option<u32>,
        share: Option<(Arc<Entry>, Limit, u32)>,
    ) -> Result<Decision, StoreError> {
        let Some((entry, limit, units)) = share else {
            return self
                .check(key, route, handle, span, cost, Counting::Live)
                .await;
        };
        let limit = &limit;
        let sync = route.policy.sync().unwrap_or_default();
        let (timer, budget) = self.store_timer(handle);
        let whole = ratelimit_grammar::share_of(
            limit.max(),
            limit.window().as_millis(),
            sync.as_millis() as u64,
        );
        let whole = u32::try_from(whole).unwrap_or(u32::MAX);
        let taken = async {
            let turn = Arc::clone(&entry.turn).lock_owned().await;
            // Another request may have taken a share while this one waited for its turn.
            let now = self.local_now();
            if let Some(decision) = entry.decide(limit, units, now) {
                return Ok(Some(decision));
            }
            entry.failure(now)?;
            let next = entry.next(limit, units, whole);
            if let Some((unit, rest, receipt)) = next.give_back {
                self.give_back_share(key, unit, rest, receipt);
            }
            let (store, owned, taker) = (Arc::clone(&self.store), key.clone(), Arc::clone(&entry));
            let (clock, unit) = (self.clock.clone(), limit.with_cost(1));
            let interval = sync.as_millis() as u64;
            let task = tokio::spawn(async move {
                let _turn = turn;
                let limits = [unit];
                let request = CheckRequest {
                    key: &owned,
                    limits: &limits,
                    now_millis: clock.now_millis(),
                };
                let Some(taking) = store.take_share(request, next.ask) else {
                    return Ok(false);
                };
                let taken = taking.await;
                let now = local_now(&clock);
                match taken {
                    Ok(share) => {
                        taker.took(unit, share, now, now.saturating_add(interval));
                        Ok(true)
                    }
                    Err(error) => {
                        taker.failed(error.clone(), now.saturating_add(interval));
                        Err(error)
                    }
                }
            });
            match task.await {
                // Decided after this call: the store's.
                Ok(Ok(true)) => {
                    Ok(entry
                        .decide(limit, units, self.local_now())
                        .map(|mut decision| {
                            decision.from_share = false;
                            decision
                        }))
                }
                Ok(Ok(false)) => Ok(None),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(StoreError::new(
                    StoreErrorKind::Protocol,
                    "the call taking a share ended without an answer",
                )),
            }
        };
        // Bounded in all, the wait for the turn too (the store bounds only its own call).
        let timer = timer.or(Some(budget));
        match self.timed(handle, route, span, timer, budget, taken).await {
            Ok(Some(decision)) => Ok(decision),
            // A store that takes no shares; or one that granted fewer units than the
            // request costs and said nothing of when to retry (a store of the app's own).
            Ok(None) => {
                self.check(key, route, handle, span, cost, Counting::Live)
                    .await
            }
            Err(error) => Err(error),
        }
    }

    /// The share a request of `cost` on a route that syncs spends from: the key's entry, the
    /// route's one limit at the request's cost, and its units; `None` for a request checked
    /// as on any other route (a cost past what one call counts).
    fn share_for(
        &self,
        key: &RouteKey,
        route: &RouteInfo,
        cost: Option<u32>,
    ) -> Option<(Arc<Entry>, Limit, u32)> {
        let declared = route.policy.limits();
        let limit = match cost {
            Some(cost) => super::cost::costing(declared.first()?, cost),
            None => *declared.first()?,
        };
        // One limit (the attribute says so), and a request the batch script can count.
        let units = limit.cost();
        if declared.len() != 1 || !(1..=MAX_SHARE_UNITS).contains(&units) {
            return None;
        }
        Some((self.shares.entry(key.base_of(&limit)), limit, units))
    }

    /// Gives the unspent `rest` of a share of `unit` (the limit at a cost of one) back where
    /// `receipt` says it was counted, in a task of its own bounded by the store's timeout: a
    /// request never waits for it, and a failure leaves the units counted (fewer admitted,
    /// never more).
    fn give_back_share(&self, key: &RouteKey, unit: Limit, rest: u32, receipt: Option<Receipt>) {
        let (store, key, now_millis) = (
            Arc::clone(&self.store),
            key.clone(),
            self.clock.now_millis(),
        );
        let timeout = self.timeout;
        tokio::spawn(async move {
            let limits = [unit];
            let change = Adjustment::GiveBack {
                units: rest,
                receipt: receipt.as_ref(),
            };
            let request = AdjustRequest::new(&key, &limits, now_millis, change);
            if let Err(error) = crate::store::adjust_within(store.as_ref(), timeout, request).await
            {
                tracing::debug!(target: "ratelimit", %error, "the unspent rest of a share could not be given back; it stays counted until its window ends");
            }
        });
    }

    /// [`check`](Self::check) of a route a ban covers: `stack` (the bans first) in one store
    /// call, bounded as a check is; the decision on the route's limits, the bans taken off
    /// (a ban that holds or starts refuses every limit with its wait), counted and logged.
    async fn check_banning(
        &self,
        key: &RouteKey,
        route: &RouteInfo,
        handle: &LimiterHandle,
        span: &tracing::Span,
        cost: Option<u32>,
        stack: Rc<[Limit]>,
    ) -> Result<Decision, StoreError> {
        let weighed = cost.map(|cost| super::cost::costed(&stack, cost));
        let limits = weighed.as_deref().unwrap_or(&stack);
        let request = CheckRequest {
            key,
            limits,
            now_millis: self.clock.now_millis(),
        };
        let (timer, budget) = self.store_timer(handle);
        let check = match (self.timeout, timer) {
            (Some(_), Some(timeout)) => self.store.check_within(request, timeout),
            _ => self.store.check(request),
        };
        let checked = self.timed(handle, route, span, timer, budget, check).await;
        let decision = checked.and_then(|decision| well_formed(decision, limits.len()))?;
        Ok(self.without_bans(key, route, span, decision))
    }

    /// `call` bounded by `timer` (a timeout answers that `budget` was spent), its wait
    /// added to the request's and recorded as the route's store latency: a store call off
    /// the hot path (which keeps its own, for its future's layout).
    async fn timed<T>(
        &self,
        handle: &LimiterHandle,
        route: &RouteInfo,
        span: &tracing::Span,
        timer: Option<Duration>,
        budget: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let done = match timer {
            Some(timeout) => crate::store::within(timeout, call)
                .await
                .unwrap_or_else(|_| Err(StoreError::timeout(budget))),
            None => call.await,
        };
        let waited = started.elapsed();
        handle.add_store_wait(waited);
        telemetry::store_latency(&route.metrics, span, waited);
        done
    }

    /// `decision` on a stack with its bans first, the bans taken off: each ban that refused
    /// (held, or started with this request) counted and logged, and remembered by the flood
    /// shield under its key (the route's, or the client's own for the limiter's ban), which
    /// then answers the client there.
    fn without_bans(
        &self,
        key: &RouteKey,
        route: &RouteInfo,
        span: &tracing::Span,
        mut decision: Decision,
    ) -> Decision {
        let bans = decision
            .limits
            .iter()
            .take_while(|state| state.limit.is_ban())
            .count();
        let receipt = decision.receipt.take();
        let rest = decision.limits.split_off(bans);
        let now = self.local_now();
        let mut banned = false;
        for ban in decision.limits.iter().filter(|state| !state.allowed) {
            banned = true;
            let fingerprint =
                crate::key::identity_fingerprint(key.base_of(&ban.limit), self.secret.as_ref());
            telemetry::banned(&route.metrics, span, &fingerprint, ban);
            let ends = now.saturating_add(ban.retry_after.as_millis() as u64);
            let blocked = Blocked {
                until: ends,
                reset_at: ends,
                limit_index: 0,
            };
            self.shield.block(key.base_of(&ban.limit), blocked, now);
        }
        let mut decision = Decision::new(rest);
        decision.banned = banned;
        match receipt.filter(|_| decision.allowed) {
            Some(receipt) => decision.with_receipt(receipt),
            None => decision,
        }
    }

    /// Counts a failure of a request on a route that counts failures only toward the bans
    /// that cover it, once its handler ran: one store call, within what is left of the
    /// request's store budget. A ban that starts then is counted and logged as a refusal's.
    async fn ban_failure(&self, key: &RouteKey, route: &RouteInfo, handle: &LimiterHandle) {
        let Some(stack) = self.banning(route, Counting::Live) else {
            return;
        };
        let bans: Vec<Limit> = stack
            .iter()
            .take_while(|limit| limit.is_ban())
            .filter(|limit| limit.count() == Count::Failures)
            .map(|limit| limit.counting_a_refusal())
            .collect();
        if bans.is_empty() {
            return;
        }
        let request = CheckRequest {
            key,
            limits: &bans,
            now_millis: self.clock.now_millis(),
        };
        let left = self
            .store_budget()
            .saturating_sub(handle.store_waited().unwrap_or_default());
        let counted = crate::store::within(left, self.store.check_within(request, left)).await;
        match counted {
            Ok(Ok(decision)) => {
                let span = tracing::Span::none();
                let now = self.local_now();
                for ban in decision
                    .limits
                    .iter()
                    .filter(|s| !s.allowed && s.remaining == 1)
                {
                    let ban = LimitState {
                        limit: ban.limit.as_checked(),
                        ..*ban
                    };
                    let base = key.base_of(&ban.limit);
                    let fingerprint = crate::key::identity_fingerprint(base, self.secret.as_ref());
                    telemetry::banned(&route.metrics, &span, &fingerprint, &ban);
                    // The flood shield answers the banned client from now on, as after a
                    // refusal that starts a ban.
                    let ends = now.saturating_add(ban.retry_after.as_millis() as u64);
                    let blocked = Blocked {
                        until: ends,
                        reset_at: ends,
                        limit_index: 0,
                    };
                    self.shield.block(base, blocked, now);
                }
            }
            Ok(Err(error)) => tracing::warn!(
                target: "ratelimit",
                route = %route.label,
                %error,
                "a failure could not be counted toward the route's ban; it counts nothing"
            ),
            Err(_) => tracing::warn!(
                target: "ratelimit",
                route = %route.label,
                "a failure could not be counted toward the route's ban within the timeout; it counts nothing"
            ),
        }
    }

    /// One store call for `key`, bounded by the timeout. A request checked twice (the
    /// default policy and a declaration both apply to it) waits for the store at most the
    /// timeout in all: the second call gets what the first left of it (time spent between
    /// the two, in middleware, does not count).
    ///
    /// A request answered already (counted after the fact, or refused for its unreadable
    /// username) runs no more: it takes no concurrency place, and a full one does not turn
    /// its answer into a 429.
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` holds each argument twice in its future; this block, once"
    )]
    fn check<'a>(
        &'a self,
        key: &'a RouteKey,
        route: &'a RouteInfo,
        handle: &'a LimiterHandle,
        span: &'a tracing::Span,
        cost: Option<u32>,
        counting: Counting,
    ) -> impl Future<Output = Result<Decision, StoreError>> + 'a {
        async move {
            let started = Instant::now();
            let shadowed = self.shadowed(&route.policy);
            let limits = match (&route.rated, &route.unblocked) {
                // Chosen from what the route keeps ready, so that nothing more lives in
                // this future than before concurrency limits existed.
                (Some([rated, _]), _) if counting != Counting::Live && !shadowed => rated,
                (Some([_, rated]), _) if counting != Counting::Live => rated,
                (_, Some(unblocked)) if shadowed => unblocked,
                _ => route.policy.limits(),
            };
            if limits.is_empty() {
                let none = Decision::new(Vec::new());
                return Ok(with_places_free(route.policy.limits(), none));
            }
            let weighed = cost.map(|cost| super::cost::costed(limits, cost));
            let limits = weighed.as_deref().unwrap_or(limits);
            let request = CheckRequest {
                key,
                limits,
                now_millis: self.clock.now_millis(),
            };
            // A request the route lets wait for its turn asks for one while its worker has
            // a place for one more waiting request (held by this check until the request
            // has waited); else it is checked as it is.
            let wait = route
                .policy
                .wait()
                .filter(|_| counting == Counting::Live && !shadowed && cost.is_none());
            let mut place = None;
            let (timer, budget) = self.store_timer(handle);
            let check = match (self.timeout, timer, wait) {
                (given, timer, Some(wait)) if self.enter_waiting(&mut place) => {
                    match (given, timer) {
                        (Some(_), Some(timeout)) => {
                            self.store.reserve_within(request, wait, timeout)
                        }
                        _ => self.store.reserve(request, wait),
                    }
                }
                (Some(_), Some(timeout), _) => self.store.check_within(request, timeout),
                _ => self.store.check(request),
            };
            let checked = match timer {
                Some(timeout) => crate::store::within(timeout, check)
                    .await
                    .unwrap_or_else(|_| Err(StoreError::timeout(budget))),
                None => check.await,
            };
            let waited = started.elapsed();
            handle.add_store_wait(waited);
            telemetry::store_latency(&route.metrics, span, waited);
            let mut checked = checked.and_then(|decision| well_formed(decision, limits.len()));
            if let Some(place) = place {
                // A turn at most the route's wait away (a store of the app's own answering
                // more is held to it).
                let turn = match &checked {
                    Ok(decision) if decision.allowed => decision
                        .delay()
                        .min(route.policy.wait().unwrap_or_default()),
                    _ => Duration::ZERO,
                };
                if !turn.is_zero() {
                    // The decision's span then lasts the wait too, which it records.
                    span.record("wait_ms", turn.as_millis() as u64);
                    checked =
                        Box::pin(self.wait_turn(route, key, limits, turn, place, checked)).await;
                }
            }
            if limits.len() == route.policy.limits().len() {
                return checked;
            }
            checked.map(|decision| with_places_free(route.policy.limits(), decision))
        }
    }

    /// identity → key → the flood shield, else one store call → the verdict. `submitted`:
    /// the username the body submitted, when it was read already.
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` holds each argument twice in its future; this block, once"
    )]
    fn decide<'a>(
        &'a self,
        req: &'a mut ServiceRequest,
        route: &'a RouteInfo,
        submitted: Option<Submitted>,
        handle: &'a LimiterHandle,
        counting: Counting,
        cost: Option<u32>,
    ) -> impl Future<Output = Decided> + 'a {
        async move {
            let reader = self.sources.username_reader(&route.label);
            let submitted = match submitted {
                None if route.policy.reads_username() => {
                    if let Some(refused) = self
                        .shielded_before_reading(req, route, handle, counting, reader)
                        .await
                    {
                        return refused;
                    }
                    Some(Box::pin(reader.read(req)).await)
                }
                submitted => submitted,
            };
            if let Some(Submitted::Unreadable(Unreadable::Array)) = &submitted {
                reader.met_array(&route.label);
            }
            // Why the request is refused without a readable username, when its route says so.
            let refuses = reader.refuses_unreadable() && counting == Counting::Live;
            let refused = match &submitted {
                Some(Submitted::Unreadable(why)) if refuses => Some(*why),
                _ => None,
            };
            // One identity per distinct identity the route's limits count by (usually one).
            let mut identities = Vec::with_capacity(route.identities.len());
            let mut submitted = Some(submitted);
            for (i, identity) in route.identities.iter().enumerate() {
                // The last identity takes the submitted username; the others a copy.
                let submitted = if i + 1 == route.identities.len() {
                    submitted.take().flatten()
                } else {
                    submitted.clone().flatten()
                };
                let extracted = self
                    .sources
                    .extract_with(req, *identity, handle.client(), submitted, reader)
                    .await;
                identities.push((*identity, extracted));
            }
            // The limiter's ban counts by an identity of its own, which the route's limits
            // may not count by.
            if let Some(ban) = self.ban.as_ref().filter(|_| counting == Counting::Live) {
                if !identities.iter().any(|(i, _)| *i == ban.identity) {
                    let extracted =
                        self.sources
                            .extract_without_body(req, ban.identity, handle.client());
                    identities.push((ban.identity, extracted));
                }
            }
            // A name that is nothing once canonical (spaces, invisible characters only) is no
            // name: its identity fell back to the unreadable budget.
            let refused = refused.or_else(|| {
                let blank = identities
                    .iter()
                    .any(|(_, client)| client.fell_back_from == Some(IdentityPart::Username));
                (refuses && blank).then_some(Unreadable::Empty)
            });
            let Some(why) = refused else {
                return self
                    .decide_for(&identities, route, handle, counting, cost)
                    .await;
            };
            // Counted as any refused request is (the route's budget for unreadable requests of
            // this address, and its limits that count no username): a 429 once that is spent,
            // a 503 when the store failed and the route fails closed (as for every request
            // there), else the 400 (413) saying why, so that refused requests are never free.
            match self
                .decide_for(&identities, route, handle, Counting::Unreadable, cost)
                .await
            {
                refused @ (Decided::OverLimit(_) | Decided::Refuse(_)) => refused,
                other => {
                    tracing::debug!(
                        target: "ratelimit",
                        route = %route.label,
                        reason = why.reason(),
                        "refused: no readable username"
                    );
                    let mut response = answer::unreadable_username(route, why);
                    // Counted, so it tells what is left, as every limited answer does.
                    if let Decided::Proceed {
                        decision: Some(decision),
                        key,
                        ..
                    } = &other
                    {
                        // Among its rate limits: a request answered already was not
                        // checked against its concurrency limits.
                        if let Some(binding) = decision
                            .binding_among(|state| !state.limit.is_concurrency())
                            .filter(|_| !self.shadowed(&route.policy))
                        {
                            self.insert_headers(response.headers_mut(), route, key, binding);
                        }
                    }
                    Decided::Refuse(response)
                }
            }
        }
    }

    /// The flood shield's 429 for a request that a limit counting no username already
    /// refuses (its client over the route's per-address limit), found before the body is
    /// read: the answer does not depend on the body, so reading, decompressing and
    /// canonicalizing it would only cost a flood its size. `None` leaves the request to
    /// [`decide_for`](Self::decide_for), which decides it as usual.
    async fn shielded_before_reading(
        &self,
        req: &mut ServiceRequest,
        route: &RouteInfo,
        handle: &LimiterHandle,
        counting: Counting,
        reader: &UsernameReader,
    ) -> Option<Decided> {
        if self.shadowed(&route.policy) || counting != Counting::Live {
            return None;
        }
        let now = self.local_now();
        for identity in route.identities.iter().filter(|i| !reads_body(**i)) {
            let client = self
                .sources
                .extract_with(req, *identity, handle.client(), None, reader)
                .await;
            let key = route.key(&self.prefix, self.secret.as_ref(), &client);
            if let Some(blocked) = self.shield.peek(key.as_str(), now) {
                let client = Client { identity: &client };
                let span = self.decision_span(route, counting);
                return Some(
                    self.shielded_answer(route, &span, &client, &key, blocked, now, counting),
                );
            }
        }
        None
    }

    /// Whether the flood shield remembers that a limit of `policy` counting no username
    /// refuses this request's client on the declared route `method pattern`: the middleware
    /// then leaves the body unread, and the route's guard answers (see
    /// [`shielded_before_reading`](Self::shielded_before_reading); should the guard find
    /// otherwise, it reads the body itself). Only the route's plain keys are looked up (not
    /// an override tier's, nor those of same-named handlers told apart): for those the body is
    /// read as usual.
    pub(crate) async fn refused_before_reading(
        &self,
        req: &mut ServiceRequest,
        policy: RoutePolicy,
        method: &str,
        pattern: &str,
        handle: &LimiterHandle,
    ) -> bool {
        if self.shadowed(&policy) {
            return false;
        }
        let now = self.local_now();
        let stem = RouteKey::route_stem(&self.prefix, method, pattern);
        let reader = self.sources.username_reader("");
        for identity in policy.identities().into_iter().filter(|i| !reads_body(*i)) {
            let client = self
                .sources
                .extract_with(req, identity, handle.client(), None, reader)
                .await;
            let key = RouteKey::from_stem(&stem, self.secret.as_ref(), client.value_parts());
            if self.shield.peek(key.as_str(), now).is_some() {
                return true;
            }
        }
        false
    }

    /// The 429 of a request the flood shield answers: `blocked` is the rejection remembered.
    #[allow(
        clippy::too_many_arguments,
        reason = "each is read here once; a struct built for one call would only rename them"
    )]
    fn shielded_answer(
        &self,
        route: &RouteInfo,
        span: &tracing::Span,
        client: &Client<'_>,
        key: &RouteKey,
        blocked: Blocked,
        now: u64,
        counting: Counting,
    ) -> Decided {
        telemetry::decided_by(span, "flood_shield");
        let policy = route.policy;
        let retry_ms = blocked.until - now;
        let applied = policy.limits().get(blocked.limit_index);
        let outcome = match counting {
            Counting::Served => Outcome::ServedOverLimit,
            Counting::Live | Counting::Refused | Counting::Unreadable => Outcome::Shielded,
        };
        telemetry::decision(&route.metrics, span, client, outcome, retry_ms, applied);
        let state = shielded_state(&policy, blocked, now);
        let binding = state.as_ref().map(|state| (blocked.limit_index, state));
        let partition = binding.and_then(|(_, state)| self.partition_key(route, key, &state.limit));
        Decided::OverLimit(self.over_limit(
            route,
            retry_ms,
            binding,
            partition.as_ref(),
            answer::violated_bits([blocked.limit_index]),
        ))
    }

    /// The verdict on one client: key → the flood shield, else one store call (none when
    /// the store already failed this request, which then waits for it once at most).
    /// `counting` says whether the request was answered before its route's guard saw it
    /// (logs and metrics report what the client got).
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` holds each argument twice in its future; this block, once"
    )]
    fn decide_for<'a>(
        &'a self,
        identities: &'a [(Identity, ClientIdentity)],
        route: &'a RouteInfo,
        handle: &'a LimiterHandle,
        counting: Counting,
        cost: Option<u32>,
    ) -> impl Future<Output = Decided> + 'a {
        async move {
            let span = self.decision_span(route, counting);
            // By reference: the policy is a value of some size, and this future is every
            // request's.
            let policy = &route.policy;
            let shadow = self.shadowed(policy);
            let (_, identity) = &identities[0];
            let mut key = route.key(&self.prefix, self.secret.as_ref(), identity);
            for (other, client) in &identities[1..] {
                key = key.with_identity(
                    *other,
                    route.key(&self.prefix, self.secret.as_ref(), client),
                );
            }
            // A shared budget counts in its own key for the client, the same on every route.
            for limit in policy.limits() {
                let Some(name) = limit.budget() else {
                    continue;
                };
                let counted_by = policy.identity_of(limit);
                if let Some((_, client)) = identities.iter().find(|(i, _)| *i == counted_by) {
                    let stem = RouteKey::budget_stem(&self.prefix, name);
                    let budget =
                        RouteKey::from_stem(&stem, self.secret.as_ref(), client.value_parts());
                    key = key.with_budget(name, budget);
                }
            }
            // The limiter's ban counts in the client's key of its own, the same on every route
            // (whose shield entry refuses a banned client whose username is unreadable too).
            let covered = matches!(counting, Counting::Live | Counting::Unreadable);
            if let Some(ban) = self.ban.as_ref().filter(|_| covered) {
                if let Some((_, client)) = identities.iter().find(|(i, _)| *i == ban.identity) {
                    let banned =
                        RouteKey::from_stem(&ban.stem, self.secret.as_ref(), client.value_parts());
                    key = key.with_limiter_ban(banned);
                }
            }
            let client = Client { identity };

            let now = self.local_now();
            // Whether this request asks the store again for a key the shield remembers
            // rejected: a pass then forgets it.
            let mut asking = false;
            if !shadow {
                let blocked = key
                    .bases()
                    .find_map(|base| match self.shield.shielded(base, now) {
                        Shielded::Blocked(blocked) => Some(blocked),
                        Shielded::Asking => {
                            asking = true;
                            None
                        }
                        Shielded::No => None,
                    });
                if let Some(blocked) = blocked {
                    return self
                        .shielded_answer(route, &span, &client, &key, blocked, now, counting);
                }
            }

            let earlier = handle.store_error();
            let repeated = earlier.is_some();
            let checked = match earlier {
                Some(earlier) => Err(earlier),
                None => {
                    // A route a ban covers is checked with its bans first; boxed, as every
                    // path few routes take, so that no request's future grows.
                    // A route that syncs is decided from this process's share.
                    let checked = match self.banning(route, counting) {
                        Some(stack) => {
                            Box::pin(self.check_banning(&key, route, handle, &span, cost, stack))
                                .await
                        }
                        None if self.syncs(route, counting) => {
                            // Most requests are decided from the share in hand, without the
                            // boxed call that takes a new one.
                            let share = self.share_for(&key, route, cost);
                            let now = self.local_now();
                            let held = share
                                .as_ref()
                                .and_then(|(entry, limit, units)| entry.decide(limit, *units, now));
                            match held {
                                Some(decision) => Ok(decision),
                                None => {
                                    Box::pin(
                                        self.check_synced(&key, route, handle, &span, cost, share),
                                    )
                                    .await
                                }
                            }
                        }
                        None => self.check(&key, route, handle, &span, cost, counting).await,
                    };
                    if let Err(error) = &checked {
                        handle.record_store_error(error);
                    }
                    checked
                }
            };

            // A decision made in this process while the store fails is not remembered by the
            // flood shield: once the store answers again, it decides again.
            let mut decided_locally = false;
            let decision = match checked {
                Ok(decision) => {
                    let by = if decision.from_share {
                        "share"
                    } else {
                        "store"
                    };
                    telemetry::decided_by(&span, by);
                    if policy.fail() == FailMode::Local {
                        self.fallback.answered(&route.label, &route.metrics.policy);
                    }
                    decision
                }
                Err(error) if policy.fail() == FailMode::Local && !shadow => {
                    // Limited in this process meanwhile, at its share of the limit; the decision
                    // then goes the way a store's does (counted after the fact too).
                    let failure = StoreFailure {
                        error: &error,
                        repeated,
                        answered: false,
                    };
                    telemetry::store_error(
                        &route.metrics,
                        &span,
                        &client,
                        Outcome::FailedLocal,
                        &failure,
                    );
                    telemetry::decided_by(&span, "local");
                    decided_locally = true;
                    Box::pin(self.decide_locally(route, &key, cost, counting, &error)).await
                }
                Err(error) => {
                    // A shadow limit never rejects, so it cannot refuse during an outage either
                    // (nor can a route the App's shadow switch holds, whatever its `fail`).
                    let fail = if shadow {
                        FailMode::Open
                    } else {
                        policy.fail()
                    };
                    let answered = matches!(counting, Counting::Served | Counting::Refused);
                    let failure = StoreFailure {
                        error: &error,
                        repeated,
                        answered,
                    };
                    // Already answered: it passed uncounted, whatever the route's policy.
                    return if answered || fail == FailMode::Open {
                        telemetry::store_error(
                            &route.metrics,
                            &span,
                            &client,
                            Outcome::FailedOpen,
                            &failure,
                        );
                        Decided::Proceed {
                            decision: None,
                            key,
                            local: false,
                        }
                    } else {
                        telemetry::store_error(
                            &route.metrics,
                            &span,
                            &client,
                            Outcome::FailedClosed,
                            &failure,
                        );
                        Decided::Refuse(self.store_unavailable(route))
                    };
                }
            };

            // A concurrency limit's wait is a second at most, unless a ban refused.
            let decision = if decision.allowed || decision.banned {
                decision
            } else {
                concurrency_retry(decision)
            };
            let retry_ms = decision.retry_after().as_millis() as u64;
            let applied = decision.binding().map(|(index, _)| &policy.limits()[index]);
            // Logged by the identity of the limit that decided (a per-username refusal on a
            // route whose first identity is the address names the username).
            let client = match applied.map(|limit| policy.identity_of(limit)) {
                Some(decider) => identities
                    .iter()
                    .find(|(identity, _)| *identity == decider)
                    .map_or(client, |(_, identity)| Client { identity }),
                None => client,
            };
            if !decision.allowed && !shadow {
                let outcome = match counting {
                    Counting::Served => Outcome::ServedOverLimit,
                    Counting::Live | Counting::Refused | Counting::Unreadable
                        if decided_locally =>
                    {
                        Outcome::LocalRejected
                    }
                    Counting::Live | Counting::Refused | Counting::Unreadable => Outcome::Rejected,
                };
                telemetry::decision(&route.metrics, &span, &client, outcome, retry_ms, applied);
                // A refusal is remembered only where every request weighs the same: under a
                // cost function a lighter request may fit where this one did not.
                // Nor a shared budget's, which other routes count too (each its own stack),
                // nor a concurrency limit's, whose places come back whenever requests end.
                // Nor where a ban counts the refusal in the store (the shield answers a
                // client the ban refuses).
                let remembered =
                    !decided_locally && cost.is_none() && self.banning(route, counting).is_none();
                // On a route that waits, until a request could wait for its turn (not at
                // all when one could wait for it now).
                let wait = policy.wait().map_or(0, |wait| wait.as_millis() as u64);
                let shielded_ms = retry_ms.saturating_sub(wait);
                if let Some((index, binding)) = decision.binding().filter(|(_, state)| {
                    remembered
                        && shielded_ms > 0
                        && state.limit.budget().is_none()
                        && !state.limit.is_concurrency()
                }) {
                    // Under the base of the limit that refused: a refusal by a per-username limit
                    // holds for that name from any address, and never for the address's others.
                    self.shield.block(
                        key.base_of(&binding.limit),
                        Blocked {
                            until: now.saturating_add(shielded_ms),
                            reset_at: now.saturating_add(binding.reset_after.as_millis() as u64),
                            limit_index: index,
                        },
                        now,
                    );
                }
                let binding = decision.binding();
                let partition =
                    binding.and_then(|(_, state)| self.partition_key(route, &key, &state.limit));
                let violated = decision
                    .limits
                    .iter()
                    .enumerate()
                    .filter(|(_, state)| !state.allowed)
                    .map(|(index, _)| index);
                return Decided::OverLimit(self.over_limit(
                    route,
                    retry_ms,
                    binding,
                    partition.as_ref(),
                    answer::violated_bits(violated),
                ));
            }
            if asking && decision.allowed && !decided_locally {
                for base in key.bases() {
                    self.shield.forget(base);
                }
            }
            let outcome = if decision.allowed {
                Outcome::Allowed
            } else {
                Outcome::ShadowRejected
            };
            telemetry::decision(&route.metrics, &span, &client, outcome, retry_ms, applied);
            Decided::Proceed {
                decision: Some(decision),
                key,
                local: decided_locally,
            }
        }
    }
}

/// The request's budget state, as its limiter holds it while the request runs: dropped
/// (answered, or the request cancelled), it gives back the concurrency places the answer did
/// not take, whoever else holds the state (a `Budget` a handler kept in a task).
struct Holding(Rc<BudgetState>);

impl std::ops::Deref for Holding {
    type Target = BudgetState;

    fn deref(&self) -> &BudgetState {
        &self.0
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        drop(self.0.lease.take());
    }
}

/// `response` with its body holding `lease` until it has been produced; a response with no
/// body to send gives the places back before it is answered. Awaited boxed: a route without
/// a concurrency limit adds nothing to its request's future.
async fn held_by<B: MessageBody + 'static>(
    response: ServiceResponse<B>,
    lease: Lease,
) -> ServiceResponse<EitherBody<B>> {
    if let BodySize::None | BodySize::Sized(0) = response.response().body().size() {
        lease.release().await;
        return response.map_into_left_body();
    }
    response
        .map_body(|_, body| BoxBody::new(LeaseBody::new(body, lease)))
        .map_into_right_body()
}

/// `decision` (of `limits` but their concurrency limits) with a free place for each
/// concurrency limit, in `limits`' order: what a request answered already is told of them.
fn with_places_free(limits: &[Limit], decision: Decision) -> Decision {
    let mut rated = decision.limits.into_iter();
    let states = limits
        .iter()
        .filter_map(|limit| {
            if limit.is_concurrency() {
                let free =
                    LimitState::new(*limit, true, limit.max(), Duration::ZERO, Duration::ZERO);
                Some(free)
            } else {
                rated.next()
            }
        })
        .collect();
    let whole = Decision::new(states);
    match decision.receipt {
        Some(receipt) => whole.with_receipt(receipt),
        None => whole,
    }
}

/// `decision` once its request's concurrency places are back, as its answer's headers tell
/// it (the places go back before the answer ends): one more left, and none held for long.
fn places_back(decision: &Decision) -> Decision {
    let mut back = decision.clone();
    for state in back.limits.iter_mut().filter(|s| s.limit.is_concurrency()) {
        state.remaining = state.remaining.saturating_add(1).min(state.limit.max());
        state.reset_after = if state.remaining == state.limit.max() {
            Duration::ZERO
        } else {
            state.reset_after.min(CONCURRENCY_RETRY)
        };
    }
    back
}

/// `decision` as a refusal by a concurrency limit tells it: its places come back as
/// requests end, so it waits and resets within [`CONCURRENCY_RETRY`] at most.
fn concurrency_retry(mut decision: Decision) -> Decision {
    for state in &mut decision.limits {
        if state.limit.is_concurrency() {
            state.retry_after = state.retry_after.min(CONCURRENCY_RETRY);
            state.reset_after = state.reset_after.min(CONCURRENCY_RETRY);
        }
    }
    decision
}

/// `decision` after its request gave its units back to the limits that count failures only:
/// its whole cost more remaining, and a budget whole again has no time left until it is
/// whole.
fn failures_given_back(decision: &Decision) -> Decision {
    let mut given = decision.clone();
    for state in &mut given.limits {
        if state.limit.count() == Count::Failures {
            state.remaining = state
                .remaining
                .saturating_add(state.limit.cost())
                .min(state.limit.max());
            if state.remaining == state.limit.max() {
                state.reset_after = Duration::ZERO;
            }
        }
    }
    given
}

/// Whether an answer refused the request rather than serving it: anything but a success
/// (a 4xx or 5xx, and a redirect, such as an auth layer's to its login page).
pub(crate) fn is_refusal(status: StatusCode) -> bool {
    !status.is_success()
}

/// When a request is counted: as its route's guard sees it, or after something else
/// answered it, so that logs and metrics report what the client got (a request served by
/// another resource is never reported as refused, nor one refused in front as rejected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counting {
    /// Before the handler: the limiter's verdict is the answer.
    Live,
    /// Refused by the middleware in front of the route: a 429 replaces the refusal when the
    /// client is over the limit, else the refusal goes on.
    Refused,
    /// Refused by the limiter itself for an unreadable username: a 429 when the client is
    /// over the limit, a 503 when the store failed and the route fails closed (as for a
    /// live request), else the 400.
    Unreadable,
    /// Served by another resource: kept whatever the count says.
    Served,
}

impl Counting {
    /// The decision span's `counting` field.
    fn as_str(self) -> &'static str {
        match self {
            Counting::Live => "live",
            Counting::Refused => "refused",
            Counting::Unreadable => "unreadable",
            Counting::Served => "served",
        }
    }
}

/// What the limiter decided about one request.
enum Decided {
    /// The client is over the limit (or locked out): the 429, or the app's answer in its
    /// place (`RateLimiter::reject_with`), whatever its status.
    OverLimit(HttpResponse),
    /// The limiter's own answer for another reason: the 503 of a route that fails closed
    /// (or the app's answer in its place), or the 400 (413) of an unreadable username.
    Refuse(HttpResponse),
    /// On to the handler.
    Proceed {
        /// The store's decision, for the headers (none when the store failed and the route
        /// fails open).
        decision: Option<Decision>,
        /// The client's key on the route.
        key: RouteKey,
        /// Decided in this process while the store failed (`fail = "local"`).
        local: bool,
    },
}

/// A store's decision as the request path reads it: one state per limit, `allowed` when
/// every one allowed. A store of the user's own that answers otherwise is an unexpected
/// reply, so the route's failure policy applies (a state too many would otherwise break the
/// request when its headers are built).
fn well_formed(decision: Decision, limits: usize) -> Result<Decision, StoreError> {
    let every_limit_allowed = decision.limits.iter().all(|state| state.allowed);
    if decision.limits.len() != limits || decision.allowed != every_limit_allowed {
        return Err(StoreError::new(
            StoreErrorKind::Protocol,
            format!(
                "the store answered {} limit states (allowed: {}) for {limits} limits; a decision needs one state per limit, in order, and `allowed` when every one allowed",
                decision.limits.len(),
                decision.allowed,
            ),
        ));
    }
    Ok(decision)
}

/// The most units one request of a route that syncs may cost: what the batch script counts
/// in one call. A costlier request is checked on its own.
const MAX_SHARE_UNITS: u32 = 100_000;

/// [`Limiter::local_now`] on `clock`, for a task that outlives its request.
fn local_now(clock: &crate::clock::Clock) -> u64 {
    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    match clock.now_millis() {
        Some(now) => now,
        None => u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}
