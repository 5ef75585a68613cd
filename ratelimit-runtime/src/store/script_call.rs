//! Running a check script over a Redis connection, standalone or Cluster alike.
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
    cluster_async::ClusterConnection,
    cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr},
    ErrorKind, RedisError, ServerErrorKind, Value,
};

use super::{
    script::{decode, ScriptCall},
    CheckRequest, Decision, StoreError, StoreErrorKind,
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
        return Ok(Decision {
            allowed: true,
            limits: Vec::new(),
        });
    }
    let call = ScriptCall::new(&request);
    let attempt = async {
        match conn.run(&call).await {
            // The connection manager has started reconnecting; one more try on the new
            // connection, still inside the timeout. (A reply lost with the old connection
            // may already have counted the request: the error is on the strict side.) Not
            // after the client's own response timeout: the call is most likely still queued
            // on a busy server, and a second one would count the request twice (found by
            // review, with a limiter timeout longer than a cluster connection's).
            Err(err) if is_connection_loss(&err) && !err.is_timeout() => conn.run(&call).await,
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

/// A connection a check's script runs over.
pub(crate) trait ScriptConnection: ConnectionLike + Send {
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

/// In a Cluster this store follows redirects itself (its client is built without retries):
/// after an `ASK` (the key's slot is migrating and the key has moved) it sends `ASKING` and
/// the call in one pipeline to the node named, after a `MOVED` the call to the node named
/// (the client reads the slot map again meanwhile). redis-rs follows an `ASK` by sending
/// `ASKING` as a request of its own on that node's connection, which every check to the node
/// shares, so concurrent checks spent one another's `ASKING`, were sent back with `MOVED`,
/// and checks of a migrating slot timed out (found by review). `ASKING` goes only where an
/// `ASK` pointed: sent with every call, it let a node importing the slot decide a key it
/// does not hold when redis-rs sent a check there because the slot's master was
/// unreachable (found by review).
impl ScriptConnection for ClusterConnection {
    async fn run<'a>(&'a mut self, call: &'a ScriptCall<'a>) -> Result<Value, RedisError> {
        let mut node = SingleNodeRoutingInfo::SpecificNode(Route::with_key(
            call.first_key(),
            SlotAddr::Master,
        ));
        let mut asking = false;
        // At most a `MOVED` (a slot map behind a finished reshard) and an `ASK` in a row.
        let mut hops = 0;
        loop {
            let reply = match to_node(self, call.evalsha(), &node, asking).await {
                Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    to_node(self, call.eval(), &node, asking).await
                }
                other => other,
            };
            let redirect = reply.as_ref().err().and_then(redirect);
            match redirect {
                Some((ask, host, port)) if hops < 2 => {
                    node = SingleNodeRoutingInfo::ByAddress { host, port };
                    asking = ask;
                    hops += 1;
                }
                _ => return reply,
            }
        }
    }
}

/// `command` in a pipeline to `node`, after `ASKING` when `asking`; an error reply is an
/// error.
async fn to_node(
    conn: &mut ClusterConnection,
    command: redis::Cmd,
    node: &SingleNodeRoutingInfo,
    asking: bool,
) -> Result<Value, RedisError> {
    let mut pipeline = redis::pipe();
    if asking {
        pipeline.cmd("ASKING");
    }
    pipeline.add_command(command);
    let offset = usize::from(asking);
    match conn
        .route_pipeline(pipeline, offset, 1, node.clone())
        .await?
        .pop()
    {
        Some(Value::ServerError(err)) => Err(err.into()),
        Some(reply) => Ok(reply),
        None => Err(RedisError::from((
            ErrorKind::Parse,
            "no reply to the script call",
        ))),
    }
}

/// Whether `err` is an `ASK` (true) or a `MOVED` (false), and the node it names.
fn redirect(err: &RedisError) -> Option<(bool, String, u16)> {
    let ask = match err.kind() {
        ErrorKind::Server(ServerErrorKind::Ask) => true,
        ErrorKind::Server(ServerErrorKind::Moved) => false,
        _ => return None,
    };
    // `host:port`; an IPv6 host is written without brackets.
    let (node, _slot) = err.redirect_node()?;
    let (host, port) = node.rsplit_once(':')?;
    Some((ask, host.to_owned(), port.parse().ok()?))
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
