use super::table::{Rank, Write};

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
    /// How much of the budget the client has spent once counted: what its entry would give
    /// back if evicted.
    pub(super) rank: Rank,
}

impl Peek {
    /// Allowed with `remaining` of `max` left once counted.
    pub(super) fn allowed(max: u64, remaining: u64, reset_after: u64, write: Write) -> Self {
        let spent = max.saturating_sub(remaining);
        let rank = Rank {
            requests: u32::try_from(spent).unwrap_or(u32::MAX),
            share: (spent * 1_000 / max.max(1)).min(1_000) as u16,
        };
        Peek {
            allowed: true,
            remaining,
            retry_after: 0,
            reset_after,
            write: Some(write),
            rank,
        }
    }

    pub(super) fn rejected(retry_after: u64, reset_after: u64) -> Self {
        Peek {
            allowed: false,
            remaining: 0,
            retry_after,
            reset_after,
            write: None,
            rank: Rank::default(),
        }
    }
}
