//! What every store answers for a check whose stack starts with bans, as
//! `scripts/check.lua` does: shared by the stores that decide bans outside that script.

use std::time::Duration;

use super::{Decision, LimitState};
use crate::policy::Limit;

/// The bans at the front of `limits` (a check's stack carries them first), and the rest.
pub(crate) fn split_bans(limits: &[Limit]) -> (&[Limit], &[Limit]) {
    let bans = limits.iter().take_while(|limit| limit.is_ban()).count();
    limits.split_at(bans)
}

/// The decision on a request the ban at `held` refuses, no limit read: every limit of
/// `limits` refused for `banned_ms`, the other bans letting it through (a request a ban
/// refuses counts toward no other), the ban at `started` (when this request started it)
/// with remaining 1.
pub(crate) fn banned(
    limits: &[Limit],
    banned_ms: u64,
    held: usize,
    started: Option<usize>,
) -> Decision {
    let wait = Duration::from_millis(banned_ms);
    Decision::new(
        limits
            .iter()
            .enumerate()
            .map(|(i, limit)| {
                if limit.is_ban() && i != held {
                    return open(*limit, 0);
                }
                let remaining = u32::from(started == Some(i));
                LimitState::new(*limit, false, remaining, wait, wait)
            })
            .collect(),
    )
}

/// The state of a ban that no refusal started: it let the request through, `remaining`
/// refusals (or failures) before it starts.
pub(crate) fn open(ban: Limit, remaining: u32) -> LimitState {
    LimitState::new(ban, true, remaining, Duration::ZERO, Duration::ZERO)
}

/// A ban of `block_ms` that this refusal started: the ban's state, and every refused state
/// of `states` waiting at least as long.
pub(crate) fn started(ban: Limit, block_ms: u64, states: &mut [LimitState]) -> LimitState {
    let wait = Duration::from_millis(block_ms);
    for state in states.iter_mut().filter(|s| !s.allowed) {
        if state.retry_after < wait {
            state.retry_after = wait;
            state.reset_after = wait;
        }
    }
    LimitState::new(ban, false, 1, wait, wait)
}
