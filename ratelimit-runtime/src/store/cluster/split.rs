//! A check whose limits count different identities (per IP and per username): on a Cluster
//! their keys live in different slots, so each identity's limits are one call.

use std::time::Duration;

use super::RedisClusterStore;
use crate::{
    policy::{Count, Limit},
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
    if request.limits.iter().any(Limit::is_app_ban) {
        return Box::pin(check_app_banned(store, request, timeout)).await;
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

/// A check whose stack starts with the limiter's ban, whose keys live under a tag of their
/// own: the ban is asked first (one call; a ban that holds refuses at once, no limit read),
/// then the route's limits as any check; when they refuse (but for a ban of the route's
/// that holds), one more call counts the refusal toward the ban (`br`), which may start it. A failed count leaves the refusal as it was,
/// with a warning.
async fn check_app_banned(
    store: &RedisClusterStore,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    let started = std::time::Instant::now();
    let app: Vec<Limit> = request
        .limits
        .iter()
        .copied()
        .filter(Limit::is_app_ban)
        .collect();
    let others: Vec<Limit> = request
        .limits
        .iter()
        .copied()
        .filter(|l| !l.is_app_ban())
        .collect();
    let groups = request.key.groups(&app);
    let Some((ban_key, _)) = groups.first() else {
        return Err(StoreError::new(
            StoreErrorKind::Protocol,
            "a ban without a key",
        ));
    };
    let ask = |limits| CheckRequest {
        key: ban_key,
        limits,
        now_millis: request.now_millis,
    };
    let asked = store.check_one(ask(&app), timeout).await?;
    let index_of = |j: usize| request.limits.iter().position(|l| *l == app[j]);
    if !asked.allowed {
        let wait = asked.retry_after().as_millis() as u64;
        let first = asked
            .limits
            .iter()
            .position(|s| !s.allowed && s.remaining == 1)
            .and_then(index_of);
        return Ok(ban::banned(request.limits, wait, first));
    }
    let mut app_states = asked.limits;
    let rest = CheckRequest {
        key: request.key,
        limits: &others,
        now_millis: request.now_millis,
    };
    let left = timeout.saturating_sub(started.elapsed());
    let mut decided = if request.key.spans_identities(&others) {
        Box::pin(check(store, rest, left)).await?
    } else {
        store.check_one(rest, left).await?
    };
    let counting: Vec<(usize, Limit)> = app
        .iter()
        .enumerate()
        .filter(|(_, b)| b.count() != Count::Failures)
        .map(|(j, b)| (j, b.counting_refusal()))
        .collect();
    // A request the route's own ban refused (one that holds, not one this refusal started)
    // counts toward no other ban, as in one call.
    let banned = decided
        .limits
        .iter()
        .any(|s| s.limit.is_ban() && !s.allowed && s.remaining == 0);
    if !decided.allowed && !banned && !counting.is_empty() {
        let limits: Vec<Limit> = counting.iter().map(|(_, b)| *b).collect();
        let left = timeout.saturating_sub(started.elapsed());
        match store.check_one(ask(&limits), left).await {
            Ok(counted) => {
                for ((j, _), state) in counting.iter().zip(&counted.limits) {
                    app_states[*j] = if !state.allowed && state.remaining == 1 {
                        let block = state.retry_after.as_millis() as u64;
                        ban::started(app[*j], block, &mut decided.limits)
                    } else {
                        ban::open(app[*j], state.remaining)
                    };
                }
            }
            Err(error) => tracing::warn!(
                target: "ratelimit",
                %error,
                "a refusal could not be counted toward the limiter's ban on a Cluster; it counts nothing"
            ),
        }
    }
    let receipt = decided.receipt.take();
    app_states.append(&mut decided.limits);
    let limits = in_order(request.limits, app_states)
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
