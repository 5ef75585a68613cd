//! A check whose limits count different identities (per IP and per username): on a Cluster
//! their keys live in different slots, so each identity's limits are one call.

use std::time::Duration;

use super::RedisClusterStore;
use crate::{
    policy::Limit,
    store::{
        ban, decision::in_order, AdjustRequest, Adjustment, CheckRequest, Decision, LimitState,
        Receipt, StoreError, StoreErrorKind,
    },
};

/// One check whose limits count different identities, on a Redis Cluster where their keys
/// live in different slots: one call per identity, all at once (one round trip); when one
/// refuses, what the others counted is given back where they counted it (one more round
/// trip), so a limit is never charged for a request another refused. The decision's receipt
/// is good for its concurrency places only: a later give-back of units takes from what
/// counts then. A failed call fails the check
/// (what the others counted is given back too) unless another part refused: a refusal
/// stands. The give-back runs within what is left of `timeout`; cut short, the unit stays
/// counted (the strict side).
pub(super) async fn check(
    store: &RedisClusterStore,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    if request.limits.first().is_some_and(Limit::is_ban) {
        return Box::pin(check_banned(store, request, timeout)).await;
    }
    let started = std::time::Instant::now();
    let groups = request.key.groups(request.limits);
    let checked = futures_util::future::join_all(groups.iter().map(|(key, limits)| {
        let part = CheckRequest {
            key,
            limits,
            now_millis: request.now_millis,
        };
        store.check_one(part, timeout)
    }))
    .await;
    let all_allowed = checked
        .iter()
        .all(|c| c.as_ref().is_ok_and(|decision| decision.allowed));
    if !all_allowed {
        let left = timeout.saturating_sub(started.elapsed());
        let give_backs = groups
            .iter()
            .zip(&checked)
            .filter_map(|((key, limits), c)| {
                let receipt = c.as_ref().ok().filter(|d| d.allowed)?.receipt.as_ref()?;
                let change = Adjustment::GiveBack {
                    units: 1,
                    receipt: Some(receipt),
                };
                Some(store.adjust_one(
                    AdjustRequest::new(key, limits, request.now_millis, change),
                    left,
                ))
            });
        for given in futures_util::future::join_all(give_backs).await {
            if let Err(error) = given {
                tracing::warn!(
                    target: "ratelimit",
                    %error,
                    "a check split across Cluster slots could not give back what one part counted for a request another part refused; it stays counted"
                );
            }
        }
    }
    // A refusal by one part stands even when another part failed: the request is refused,
    // not handed to the route's failure policy (which might let it through). The failed
    // part's limits report nothing spent.
    let refused = checked
        .iter()
        .any(|c| c.as_ref().is_ok_and(|decision| !decision.allowed));
    let mut states = Vec::with_capacity(request.limits.len());
    // The concurrency places' receipt (their part's member), for giving them back; a
    // stack holds one concurrency limit, so one part has them.
    let mut places = None;
    for ((_, limits), c) in groups.iter().zip(checked) {
        match c {
            Ok(decision) => {
                if limits.iter().any(|limit| limit.is_concurrency()) {
                    places = decision.receipt.map(Receipt::places_only);
                }
                states.extend(decision.limits);
            }
            Err(_) if refused => states.extend(limits.iter().map(|limit| {
                LimitState::new(*limit, true, limit.max(), Duration::ZERO, Duration::ZERO)
            })),
            Err(error) => return Err(error),
        }
    }
    let limits = in_order(request.limits, states)
        .ok_or_else(|| StoreError::new(StoreErrorKind::Protocol, "a limit without a state"))?;
    let decision = Decision::new(limits);
    Ok(match places.filter(|_| decision.allowed) {
        Some(receipt) => decision.with_receipt(receipt),
        None => decision,
    })
}

/// How much sooner than the check's timeout the count of a refusal toward the bans gives up.
const COUNT_MARGIN: Duration = Duration::from_millis(2);

/// A check whose stack starts with bans, its keys in several slots: the bans are asked
/// first, one call per slot at once (a ban that holds refuses at once, no limit read; a ban
/// counting a refusal decided elsewhere, `br`, counts it then); then the route's limits, as
/// any check; when they refuse, one more call per slot counts the refusal toward the bans
/// (`br`), which may start them. A request a ban refuses counts toward no other ban, as in
/// one call. A failed count leaves the refusal as it was, with a warning.
async fn check_banned(
    store: &RedisClusterStore,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    let started = std::time::Instant::now();
    let (bans, rest) = ban::split_bans(request.limits);
    let ask = |limits: &[Limit], left: Duration| {
        let groups = request.key.groups(limits);
        async move {
            let calls = groups.iter().map(|(key, limits)| {
                let part = CheckRequest {
                    key,
                    limits,
                    now_millis: request.now_millis,
                };
                store.check_one(part, left)
            });
            let answers = futures_util::future::join_all(calls).await;
            groups
                .into_iter()
                .map(|(_, limits)| limits)
                .zip(answers)
                .collect::<Vec<_>>()
        }
    };
    let mut ban_states = Vec::with_capacity(bans.len());
    if rest.is_empty() {
        // Only bans, each counting a refusal decided elsewhere (a failure): every slot's
        // answer counts, a failed one with a warning.
        for (limits, counted) in ask(bans, timeout).await {
            match counted {
                Ok(counted) => ban_states.extend(counted.limits),
                Err(error) => {
                    tracing::warn!(
                        target: "ratelimit",
                        %error,
                        "a refusal could not be counted toward a ban in one Cluster slot; it counts nothing there"
                    );
                    ban_states.extend(limits.iter().map(|ban| ban::open(*ban, 0)));
                }
            }
        }
        let limits = in_order(request.limits, ban_states)
            .ok_or_else(|| StoreError::new(StoreErrorKind::Protocol, "a limit without a state"))?;
        return Ok(Decision::new(limits));
    }
    for (limits, asked) in ask(bans, timeout).await {
        let asked = asked?;
        if let Some((j, state)) = asked.limits.iter().enumerate().find(|(_, s)| !s.allowed) {
            let held = request
                .limits
                .iter()
                .position(|l| *l == limits[j])
                .unwrap_or(0);
            let wait = state.retry_after.as_millis() as u64;
            let started = (state.remaining == 1).then_some(held);
            return Ok(ban::banned(request.limits, wait, held, started));
        }
        ban_states.extend(asked.limits);
    }
    let left = timeout.saturating_sub(started.elapsed());
    let rest_request = CheckRequest {
        key: request.key,
        limits: rest,
        now_millis: request.now_millis,
    };
    let mut decided = if request.key.spans_identities(rest) {
        Box::pin(check(store, rest_request, left)).await?
    } else {
        store.check_one(rest_request, left).await?
    };
    if !decided.allowed {
        let counting: Vec<Limit> = bans.iter().map(|b| b.counting_a_refusal()).collect();
        // Within what is left, less a margin: the caller's own timer started a little before
        // this check did, and a count cut short must leave the refusal standing, not turn it
        // into a store error.
        let left = timeout
            .saturating_sub(started.elapsed())
            .saturating_sub(COUNT_MARGIN);
        for (limits, counted) in ask(&counting, left).await {
            let counted = match counted {
                Ok(counted) => counted,
                Err(error) => {
                    tracing::warn!(
                        target: "ratelimit",
                        %error,
                        "a refusal could not be counted toward a ban in another Cluster slot; it counts nothing"
                    );
                    continue;
                }
            };
            for (limit, state) in limits.iter().zip(&counted.limits) {
                let checked = limit.as_checked();
                let Some(slot) = ban_states.iter_mut().find(|s| s.limit == checked) else {
                    continue;
                };
                if !state.allowed && state.remaining == 1 {
                    let block = state.retry_after.as_millis() as u64;
                    *slot = ban::started(checked, block, &mut decided.limits);
                } else if state.allowed {
                    *slot = ban::open(checked, state.remaining);
                }
            }
        }
    }
    let receipt = decided.receipt.take();
    ban_states.append(&mut decided.limits);
    let limits = in_order(request.limits, ban_states)
        .ok_or_else(|| StoreError::new(StoreErrorKind::Protocol, "a limit without a state"))?;
    let decision = Decision::new(limits);
    Ok(match receipt.filter(|_| decision.allowed) {
        Some(receipt) => decision.with_receipt(receipt),
        None => decision,
    })
}

/// An adjustment of a request whose limits count different identities, one call per identity's
/// slot: the units given back (keys deleted) over all.
pub(super) async fn adjust(
    store: &RedisClusterStore,
    request: AdjustRequest<'_>,
    timeout: Duration,
) -> Result<u64, StoreError> {
    let groups = request.key.groups(request.limits);
    let changed = futures_util::future::join_all(groups.iter().map(|(key, limits)| {
        store.adjust_one(
            AdjustRequest::new(key, limits, request.now_millis, request.change),
            timeout,
        )
    }))
    .await;
    changed.into_iter().sum()
}
