//! The `#[rate_limit]` policy grammar, stated once: the attribute's keys, windows, limits and
//! their bounds, algorithms, what a limit counts, identity parts, fail modes, whether answers
//! carry the rate-limit headers, tier names, and the safe methods. The attribute
//! (ratelimit-macros) parses with it and adds spans and suggestions; the runtime's
//! constructors check with it; a reader of policies at run time gets the same rules and the
//! same messages.
//!
//! Users depend on `ratelimit-runtime`, which re-exports what they name.
//!
//! ```
//! use ratelimit_grammar::{check_limit, parse_window, Algorithm, LimitProblem};
//!
//! assert_eq!(parse_window("5m"), Ok(300_000));
//! assert_eq!(
//!     check_limit(1001, 60_000, Algorithm::SlidingLog),
//!     Err(LimitProblem::SlidingLogTooHigh)
//! );
//! ```

mod algorithm;
mod ban;
mod budget;
mod concurrency;
mod count;
mod declaration;
mod fail_mode;
mod identity;
mod key;
mod limit;
pub mod messages;
mod route_headers;
pub mod suggest;
mod sync;
mod tier;
mod wait;

pub use algorithm::Algorithm;
pub use ban::{not_with_ban, parse_ban, BanSpec, MAX_BAN_TIMES, NOT_WITH_BAN};
pub use budget::{check_budget_name, MAX_BUDGET_NAME_LEN};
pub use concurrency::{
    check_concurrency, concurrency_twice, lease_without_concurrency, not_with_concurrency,
    parse_lease, DEFAULT_LEASE_MILLIS, MAX_CONCURRENCY, MAX_LEASE_MILLIS, MIN_LEASE_MILLIS,
    NOT_WITH_CONCURRENCY,
};
pub use count::Count;
pub use declaration::{parse_declaration, parse_stack, Declaration};
pub use fail_mode::{FailMode, SAFE_METHODS};
pub use identity::{is_header_name, parse_identity, ParsedPart, IDENTITY_PARTS};
pub use key::Key;
pub use limit::{
    check_cost, check_limit, check_window, parse_block, parse_window, CostProblem, LimitProblem,
    WindowProblem, MAX_EXACT_SLIDING_PRODUCT, MAX_SLIDING_LOG_LIMIT, MAX_STACKED,
    MAX_WINDOW_MILLIS,
};
pub use route_headers::RouteHeaders;
pub use sync::{
    check_sync, not_with_sync, parse_sync, share_of, sync_stacked, MAX_SYNC_MILLIS, MIN_SHARE,
    MIN_SYNC_MILLIS, NOT_WITH_SYNC,
};
pub use tier::{check_tier, is_tier_name, MAX_TIER_LEN};
pub use wait::{not_with_wait, parse_wait, MAX_WAIT_MILLIS, NOT_WITH_WAIT};
