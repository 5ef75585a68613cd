use std::{fmt, time::Duration};

/// Why the store could not decide. Never a limit decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// No answer within the configured timeout. Redis may be slow, paused, or down: while
    /// the standalone store cannot connect it keeps trying in the background and each check
    /// waits for the connection up to its timeout, so a Redis that is down or unreachable
    /// shows as timeouts.
    Timeout,
    /// The connection broke, or could not be used, while a call was on it.
    Connection,
    /// Redis answered with an error (script error, cluster error, ...).
    Redis,
    /// The answer did not have the expected shape, or the request could not be put to the
    /// store (an injected time past [`MAX_INJECTED_MILLIS`](super::MAX_INJECTED_MILLIS)).
    Protocol,
}

/// A store failure, with enough context for a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    /// Redis answered `READONLY`: the connection reaches a replica (a primary demoted behind
    /// a failover proxy or a DNS name), where a new connection may reach the primary.
    read_only: bool,
}

impl StoreError {
    /// A new error of `kind`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            message: message.into(),
            read_only: false,
        }
    }

    /// Redis's `READONLY` error: the connection reaches a replica.
    pub(crate) fn read_only(message: impl Into<String>) -> Self {
        StoreError {
            read_only: true,
            ..StoreError::new(StoreErrorKind::Redis, message)
        }
    }

    /// Whether this is Redis's `READONLY` error.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// A timeout after `after`.
    pub fn timeout(after: Duration) -> Self {
        StoreError::new(
            StoreErrorKind::Timeout,
            format!("no answer within {}ms", after.as_millis()),
        )
    }

    /// What went wrong.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            StoreErrorKind::Timeout => "timeout",
            StoreErrorKind::Connection => "connection",
            StoreErrorKind::Redis => "redis error",
            StoreErrorKind::Protocol => "unexpected reply",
        };
        write!(f, "rate-limit store {kind}: {}", self.message)
    }
}

impl std::error::Error for StoreError {}
