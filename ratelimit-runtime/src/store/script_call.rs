//! Running a check script over a Redis connection, standalone or Cluster alike.
//!
//! `EVALSHA` with the locally computed digest; on `NOSCRIPT` (after a restart, a failover or
//! `SCRIPT FLUSH`) the same call again as `EVAL` with the source, which also caches the
//! script on that node. Never `SCRIPT LOAD`: in a Cluster it lands on one arbitrary node.
//!
//! The whole call, fallback and one retry after a dropped connection included, runs under
//! one timeout; errors become [`StoreError`]s, never decisions.

use std::time::Duration;

use redis::{aio::ConnectionLike, ErrorKind, RedisError, ServerErrorKind, Value};

use super::{
    script::{decode, ScriptCall},
    CheckRequest, Decision, StoreError, StoreErrorKind,
};

/// Decides `request` on `conn` within `timeout`.
pub(crate) async fn check<C>(
    mut conn: C,
    request: CheckRequest<'_>,
    timeout: Duration,
) -> Result<Decision, StoreError>
where
    C: ConnectionLike + Send,
{
    if let Some(error) = request.time_out_of_range() {
        return Err(error);
    }
    if request.limits.is_empty() {
        return Ok(Decision {
            allowed: true,
            limits: Vec::new(),
        });
    }
    let call = ScriptCall::new(&request);
    let attempt = async {
        match invoke(&mut conn, &call).await {
            // The connection manager has started reconnecting; one more try on the new
            // connection, still inside the timeout. (A reply lost with the old connection
            // may already have counted the request: the error is on the strict side.)
            Err(err) if is_connection_loss(&err) => invoke(&mut conn, &call).await,
            other => other,
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Err(StoreError::timeout(timeout)),
        Ok(Err(err)) => Err(store_error(&err)),
        Ok(Ok(reply)) => decode(&request, reply),
    }
}

async fn invoke<C: ConnectionLike + Send>(
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

fn is_connection_loss(err: &RedisError) -> bool {
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
