use super::table::Write;

/// What one limit decided in the peek phase, and what it writes if the request is counted.
///
/// Times are in milliseconds; the values match the check script's reply exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Peek {
    pub(super) allowed: bool,
    pub(super) remaining: u64,
    pub(super) retry_after: u64,
    pub(super) reset_after: u64,
    /// The commit-phase write; `None` when this limit rejected.
    pub(super) write: Option<Write>,
}

impl Peek {
    pub(super) fn allowed(remaining: u64, reset_after: u64, write: Write) -> Self {
        Peek {
            allowed: true,
            remaining,
            retry_after: 0,
            reset_after,
            write: Some(write),
        }
    }

    pub(super) fn rejected(retry_after: u64, reset_after: u64) -> Self {
        Peek {
            allowed: false,
            remaining: 0,
            retry_after,
            reset_after,
            write: None,
        }
    }
}
