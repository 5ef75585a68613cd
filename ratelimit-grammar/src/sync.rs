//! Deciding from local shares: `sync = "100ms"` (each instance takes a share of the budget
//! from the store in one call and decides from it locally, calling again when the share is
//! spent or `sync` has passed).

use crate::{parse_window, Algorithm, Key};

/// The shortest interval: ten milliseconds (a shorter one saves few calls over a check per
/// request).
pub const MIN_SYNC_MILLIS: u64 = 10;

/// The longest interval: ten seconds (a share outlives its interval by nothing, and the
/// store's view of a client lags the instances' by up to an interval).
pub const MAX_SYNC_MILLIS: u64 = 10_000;

/// The fewest requests a share may hold: a limit grants at least this many per interval
/// (`limit × sync ÷ window`), else deciding locally saves too few calls to be worth its
/// overshoot.
pub const MIN_SHARE: u64 = 10;

/// The keys a route that syncs takes no value of: a lockout starts on one refusal, and a
/// ban counts refusals, in the store; a limit that counts failures only is counted after
/// its request ran; a concurrency limit's place and a request's turn are the store's to
/// give; and a shared budget is a second limit of the stack.
pub const NOT_WITH_SYNC: [Key; 6] = [
    Key::Block,
    Key::Concurrency,
    Key::Wait,
    Key::Ban,
    Key::Budget,
    Key::Lease,
];

/// Parses `sync = "<text>"` (`"100ms"`): the interval in milliseconds.
///
/// ```
/// use ratelimit_grammar::parse_sync;
///
/// assert_eq!(parse_sync("100ms"), Ok(100));
/// assert!(parse_sync("5ms").unwrap_err().contains("from `10ms` to `10s`"));
/// ```
///
/// # Errors
///
/// [`parse_window`]'s messages, naming the interval, and one outside
/// [`MIN_SYNC_MILLIS`]..=[`MAX_SYNC_MILLIS`].
pub fn parse_sync(text: &str) -> Result<u64, String> {
    let millis = parse_window(text).map_err(|message| {
        message
            .replacen("window `", "sync `", 1)
            .replace("a window must", "a sync interval must")
    })?;
    if !(MIN_SYNC_MILLIS..=MAX_SYNC_MILLIS).contains(&millis) {
        return Err(format!(
            "sync `{text}` is out of range: an instance reconciles its share with the store every interval, from `10ms` to `10s`"
        ));
    }
    Ok(millis)
}

/// The units of one share of a limit of `max` per `window_millis` synced every
/// `sync_millis`: what the limit grants in one interval, `max × sync ÷ window` (rounded
/// down).
pub const fn share_of(max: u32, window_millis: u64, sync_millis: u64) -> u64 {
    (max as u64).saturating_mul(sync_millis) / window_millis
}

/// Whether a limit of `max` per `window_millis` by `algorithm` can be decided from shares
/// taken every `sync_millis`: not a sliding log (it logs each request), an interval at most
/// a tenth of the window (a share is then at most a tenth of the limit), and a share of at
/// least [`MIN_SHARE`].
///
/// ```
/// use ratelimit_grammar::{check_sync, Algorithm};
///
/// assert!(check_sync(100_000, 60_000, 100, Algorithm::SlidingWindow).is_ok());
/// let error = check_sync(1_000, 60_000, 100, Algorithm::FixedWindow).unwrap_err();
/// assert!(error.contains("at least 6000"), "{error}");
/// ```
///
/// # Errors
///
/// The message naming the bound the limit misses.
pub fn check_sync(
    max: u32,
    window_millis: u64,
    sync_millis: u64,
    algorithm: Algorithm,
) -> Result<(), String> {
    if algorithm == Algorithm::SlidingLog {
        return Err("`sync` does not go with `algorithm = \"sliding_log\"`: a sliding log keeps one entry per request, which a share would log in a block; take `sliding_window` for a large limit on a hot key".to_owned());
    }
    if sync_millis.saturating_mul(10) > window_millis {
        return Err(format!(
            "`sync` of {sync_millis}ms is longer than a tenth of the {window_millis}ms window: a share would hold more than a tenth of the limit; sync at most every {}ms",
            window_millis / 10
        ));
    }
    if share_of(max, window_millis, sync_millis) < MIN_SHARE {
        let least = (MIN_SHARE * window_millis).div_ceil(sync_millis);
        return Err(format!(
            "`sync` needs a limit of at least {MIN_SHARE} requests per interval, a share of {MIN_SHARE}: {max} per {window_millis}ms is {} per {sync_millis}ms; declare a limit of at least {least} per this window, or a longer `sync`",
            share_of(max, window_millis, sync_millis)
        ));
    }
    Ok(())
}

/// `key` written on a route that syncs.
pub fn not_with_sync(key: Key) -> String {
    let why = match key {
        Key::Block => "a lockout starts on one refusal in the store, which an instance deciding from its share does not see",
        Key::Count => "a limit that counts failures only counts a request after it ran, and a share is counted before",
        Key::Concurrency | Key::Lease => "a place in flight is the store's to give per request; keep the concurrency limit on a route of its own",
        Key::Wait => "a turn is the store's to give per request",
        Key::Ban => "a ban counts refusals in the store, and a share refuses locally",
        Key::Budget => "a shared budget is a second limit of the stack, and `sync` decides one limit",
        _ => "`sync` decides one limit per stack from a share",
    };
    format!("`sync` does not go with `{}`: {why}", key.name())
}

/// The message for a stack of more than one limit that syncs.
pub const fn sync_stacked() -> &'static str {
    "`sync` decides one limit from a local share: a route or tier that syncs has one limit; keep stacked limits on a route checked in the store"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_messages() {
        assert_eq!(parse_sync("1s"), Ok(1_000));
        assert!(parse_sync("11s").unwrap_err().contains("out of range"));
        assert!(parse_sync("100").unwrap_err().starts_with("sync `100`"));
        assert_eq!(share_of(100_000, 60_000, 100), 166);
        assert!(check_sync(6_000, 60_000, 100, Algorithm::Gcra).is_ok());
        assert!(check_sync(5_999, 60_000, 100, Algorithm::Gcra)
            .unwrap_err()
            .contains("at least 6000 per this window"));
        assert!(check_sync(100_000, 500, 100, Algorithm::FixedWindow)
            .unwrap_err()
            .contains("a tenth"));
        assert!(check_sync(1_000, 60_000, 10, Algorithm::SlidingLog)
            .unwrap_err()
            .contains("sliding_log"));
        assert!(not_with_sync(Key::Block).starts_with("`sync` does not go with `block`"));
    }
}
