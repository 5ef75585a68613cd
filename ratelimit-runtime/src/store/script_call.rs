//! Running a check script over a Redis connection, standalone or routed to a Cluster's
//! master alike.
//!
//! `EVALSHA` with the locally computed digest; on `NOSCRIPT` (after a restart, a failover or
//! `SCRIPT FLUSH`) the same call again as `EVAL` with the source, which also caches the
//! script on that node. Never `SCRIPT LOAD`: in a Cluster it lands on one arbitrary node.
//!
//! The whole call, fallback and one retry after a dropped connection included, runs under
//! one timeout; errors become [`StoreError`]s, never decisions.

use std::{future::Future, time::Duration};

use redis::{
    aio::{ConnectionLike, ConnectionManager},
    ErrorKind, RedisError, ServerErrorKind, Value,
};

use super::{
    script::{decode, decode_batch, decode_given, decode_reserved, BatchOutcome, ScriptCall},
    timer, AdjustRequest, Adjustment, CheckRequest, Decision, Receipt, StoreError, StoreErrorKind,
};

/// Decides `request` on `conn` within `timeout`.
pub(crate) async fn check<C: ScriptConnection>(
    mut conn: C,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    if let Some(error) = request.time_out_of_range() {
        return Err(error);
    }
    if request.limits.is_empty() {
        return Ok(Decision::new(Vec::new()));
    }
    let call = ScriptCall::new(&request);
    // A reply lost with the old connection may already have counted the request: a second
    // try errs on the strict side.
    match timer::within(timeout, run_once_more(&mut conn, &call)).await {
        Err(_) => Err(StoreError::timeout(timeout)),
        Ok(Err(err)) => Err(store_error(&err)),
        Ok(Ok(reply)) => decode(&request, call.member(), reply),
    }
}

/// Decides `request` on `conn` within `timeout`, letting it wait up to `wait` for its turn
/// (`scripts/reserve.lua`); limits a reservation cannot take (a block, a concurrency
/// limit) are checked as they are.
pub(crate) async fn reserve<C: ScriptConnection>(
    mut conn: C,
    request: CheckRequest<'_>,
    wait: Duration,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    if !super::check::reservable(request.limits) {
        return check(conn, request, timeout).await;
    }
    if let Some(error) = request.time_out_of_range() {
        return Err(error);
    }
    let call = ScriptCall::reserve(&request, wait);
    // As a check: a second try after a lost connection errs on the strict side.
    match timer::within(timeout, run_once_more(&mut conn, &call)).await {
        Err(_) => Err(StoreError::timeout(timeout)),
        Ok(Err(err)) => Err(store_error(&err)),
        Ok(Ok(reply)) => decode_reserved(&request, call.member(), reply),
    }
}

/// Decides `units` concurrent checks of `request` (limits without a block, counting every
/// request) on `conn` in one call within `timeout`, tried once more after a lost connection
/// as a check alone is: the `units` checks are each retried as `units` single checks would
/// be, and a reply lost with the old connection errs on the strict side by the same units.
pub(crate) async fn check_batch<C: ScriptConnection>(
    mut conn: C,
    request: CheckRequest<'_>,
    units: u32,
    timeout: Duration,
) -> Result<BatchOutcome, StoreError> {
    if let Some(error) = request.time_out_of_range() {
        return Err(error);
    }
    let call = ScriptCall::batch(&request, units);
    match timer::within(timeout, run_once_more(&mut conn, &call)).await {
        Err(_) => Err(StoreError::timeout(timeout)),
        Ok(Err(err)) => Err(store_error(&err)),
        Ok(Ok(reply)) => decode_batch(reply, request.limits, call.member()),
    }
}

/// What `request`'s check would answer on `conn` now, counting nothing, within `timeout`.
pub(crate) async fn peek<C: ScriptConnection>(
    mut conn: C,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError> {
    if let Some(error) = request.time_out_of_range() {
        return Err(error);
    }
    if request.limits.is_empty() {
        return Ok(Decision::new(Vec::new()));
    }
    let call = ScriptCall::peek(&request);
    // Counts nothing: a second try changes nothing.
    match timer::within(timeout, run_once_more(&mut conn, &call)).await {
        Err(_) => Err(StoreError::timeout(timeout)),
        Ok(Err(err)) => Err(store_error(&err)),
        Ok(Ok(reply)) => decode(&request, "", reply),
    }
}

/// Carries out `request` on `conn` within `timeout`: the units given back (keys deleted, for
/// a reset). A give-back is never tried twice: one whose reply was lost may have been carried
/// out, and a second would give back twice. A reset is tried once more after a lost
/// connection, as a check is: deleting the keys again deletes nothing more.
pub(crate) async fn adjust<C: ScriptConnection>(
    mut conn: C,
    request: AdjustRequest<'_>,
    timeout: Duration,
) -> Result<u64, StoreError> {
    if let Some(error) = request.time_out_of_range() {
        return Err(error);
    }
    if request.limits.is_empty() {
        return Ok(0);
    }
    let call = match request.change {
        Adjustment::GiveBack { units: 0, .. } => return Ok(0),
        Adjustment::GiveBack { units, receipt } => ScriptCall::give_back(
            request.key,
            request.limits,
            request.now_millis,
            units,
            Receipt::for_units(receipt),
        ),
        Adjustment::Reset => ScriptCall::reset(request.key, request.limits, request.now_millis),
        Adjustment::Charge { units: 0 } => return Ok(0),
        Adjustment::Charge { units } => {
            ScriptCall::charge(request.key, request.limits, request.now_millis, units)
        }
        Adjustment::Release { receipt } | Adjustment::Renew { receipt } => {
            if !request
                .limits
                .iter()
                .any(crate::policy::Limit::is_concurrency)
            {
                return Ok(0);
            }
            let renew = matches!(request.change, Adjustment::Renew { .. });
            ScriptCall::lease(
                request.key,
                request.limits,
                request.now_millis,
                receipt,
                renew,
            )
        }
    };
    let attempt = async {
        match request.change {
            Adjustment::Reset => run_once_more(&mut conn, &call).await,
            // Releasing or renewing twice does what once does: the member is removed, or
            // scored now.
            Adjustment::Release { .. } | Adjustment::Renew { .. } => {
                run_once_more(&mut conn, &call).await
            }
            Adjustment::GiveBack { .. } | Adjustment::Charge { .. } => conn.run(&call).await,
        }
    };
    match timer::within(timeout, attempt).await {
        Err(_) => Err(StoreError::timeout(timeout)),
        Ok(Err(err)) => Err(store_error(&err)),
        Ok(Ok(reply)) => decode_given(reply),
    }
}

/// `call` on `conn`, and once more after the connection was lost (a restart, a connection
/// Redis closed): the connection has started reconnecting, so the second try goes over the
/// new one, inside the caller's timeout. Not after the client's own response timeout: the
/// call is then most likely still queued on a busy server. For calls that may run twice.
async fn run_once_more<C: ScriptConnection>(
    conn: &mut C,
    call: &ScriptCall<'_>,
) -> Result<Value, RedisError> {
    match conn.run(call).await {
        Err(err) if is_connection_loss(&err) && !err.is_timeout() => conn.run(call).await,
        other => other,
    }
}

/// `call` as `EVALSHA`, then as `EVAL` after `NOSCRIPT`.
pub(crate) async fn invoke<C: ConnectionLike + Send>(
    conn: &mut C,
    call: &ScriptCall<'_>,
) -> Result<Value, RedisError> {
    match call.evalsha().query_async(conn).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            call.eval().query_async(conn).await
        }
        other => other,
    }
}

/// A connection a check's script runs over.
pub(crate) trait ScriptConnection: Send {
    /// The script's reply to `call`: `EVALSHA`, then `EVAL` after `NOSCRIPT`.
    fn run<'a>(
        &'a mut self,
        call: &'a ScriptCall<'a>,
    ) -> impl Future<Output = Result<Value, RedisError>> + Send + 'a;
}

impl ScriptConnection for ConnectionManager {
    fn run<'a>(
        &'a mut self,
        call: &'a ScriptCall<'a>,
    ) -> impl Future<Output = Result<Value, RedisError>> + Send + 'a {
        invoke(self, call)
    }
}

/// The error of a command that got no answer within `timeout` (an I/O time-out, so it
/// reads as one wherever errors are sorted: [`store_error`], `RedisError::is_timeout`).
pub(crate) fn no_answer_within(timeout: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {timeout:?}"),
    ))
}

/// Whether the connection was lost (or could not be made), as opposed to an answer.
pub(crate) fn is_connection_loss(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal()
}

/// Maps a client error onto the store's error kinds.
pub(crate) fn store_error(err: &RedisError) -> StoreError {
    if err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
        return StoreError::read_only(err.to_string());
    }
    let kind = if err.is_timeout() {
        StoreErrorKind::Timeout
    } else if is_connection_loss(err) {
        StoreErrorKind::Connection
    } else {
        match err.kind() {
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreErrorKind::Protocol,
            ErrorKind::ClusterConnectionNotFound | ErrorKind::Io => StoreErrorKind::Connection,
            _ => StoreErrorKind::Redis,
        }
    };
    StoreError::new(kind, err.to_string())
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn client_errors_map_to_store_error_kinds() {
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(store_error(&refused).kind(), StoreErrorKind::Connection);
        let timed_out = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(store_error(&timed_out).kind(), StoreErrorKind::Timeout);
        let script = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "ERR user_script:1",
        ));
        assert_eq!(store_error(&script).kind(), StoreErrorKind::Redis);
        let shape = RedisError::from((ErrorKind::UnexpectedReturnType, "not an array"));
        assert_eq!(store_error(&shape).kind(), StoreErrorKind::Protocol);
    }
}
