//! Windows and limits, and the bounds every limit keeps.

use std::time::Duration;

use crate::{algorithm::Algorithm, suggest};

/// The longest window a limit may have: 31 days. Longer budgets are quotas, which belong in
/// a billing system rather than in a request-path limiter.
pub const MAX_WINDOW_MILLIS: u64 = 31 * 24 * 60 * 60 * 1000;

/// The highest limit a sliding log may have: its memory and Redis work grow with the limit
/// (one sorted-set member per request in the window).
pub const MAX_SLIDING_LOG_LIMIT: u32 = 1000;

/// The sliding-window script weighs counts in integers of limit × window (ms); Lua's
/// doubles hold them exactly only below 2^53, so a sliding window's limit × window must stay
/// below this.
pub const MAX_EXACT_SLIDING_PRODUCT: u128 = 1 << 53;

/// The most limits one route may stack (all are checked in one script call).
pub const MAX_STACKED: usize = 8;

/// Windows as the attribute's messages show them.
const WINDOW_EXAMPLES: &str = "`500ms`, `30s`, `5m`, `1h`, `1d`, `1h30m`";

/// Spelled-out units humantime accepts, for "did you mean" on a misspelled unit; the
/// one-letter units are too close to everything to suggest.
const WINDOW_UNIT_WORDS: &[&str] = &[
    "millis", "msec", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes",
    "hour", "hours", "day", "days", "week", "weeks",
];

/// Why a window length cannot be a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowProblem {
    /// Zero.
    Zero,
    /// More than [`MAX_WINDOW_MILLIS`].
    TooLong,
}

impl WindowProblem {
    /// What is wrong, in one line (for `const` panics of the runtime's constructors).
    pub const fn summary(self) -> &'static str {
        match self {
            WindowProblem::Zero => "a rate-limit window must be at least 1ms",
            WindowProblem::TooLong => "a rate-limit window must be at most 31 days",
        }
    }
}

/// Whether `millis` can be a window's length.
///
/// # Errors
///
/// Zero, or longer than [`MAX_WINDOW_MILLIS`].
pub const fn check_window(millis: u64) -> Result<(), WindowProblem> {
    if millis == 0 {
        Err(WindowProblem::Zero)
    } else if millis > MAX_WINDOW_MILLIS {
        Err(WindowProblem::TooLong)
    } else {
        Ok(())
    }
}

/// Parses `window = "<text>"` (`"5m"`, `"1h30m"`, `"500ms"`): its length in milliseconds.
///
/// # Errors
///
/// The message for a text that is no window: no unit, an unknown or upper-case unit, a
/// month or year, zero, not a whole number of milliseconds, longer than 31 days.
pub fn parse_window(text: &str) -> Result<u64, String> {
    if let Some(unit) = calendar_unit(text) {
        return Err(format!("window `{text}` counts in `{unit}`, which the parser takes as months or years of 30.44 or 365.25 days; `m` is minutes: write e.g. `5m`, `1h` or `30d`"));
    }
    let duration: Duration =
        humantime::parse_duration(text.trim()).map_err(|error| window_parse_error(text, error))?;
    if duration.is_zero() {
        return Err(format!(
            "window `{text}` is zero; a window must be at least `1ms`"
        ));
    }
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!("window `{text}` is not a whole number of milliseconds; windows are counted in milliseconds, e.g. {WINDOW_EXAMPLES}"));
    }
    match u64::try_from(duration.as_millis()) {
        Ok(millis) if check_window(millis).is_ok() => Ok(millis),
        _ => Err(format!("window `{text}` is longer than the maximum of 31 days; budgets that long are quotas, which belong in a billing or quota system")),
    }
}

/// Parses `block = "<text>"` (`"15m"`), how long a client stays refused once a limit refuses
/// it: a duration as [`parse_window`] reads one, within the same bounds.
///
/// # Errors
///
/// [`parse_window`]'s messages, naming the block.
pub fn parse_block(text: &str) -> Result<u64, String> {
    parse_window(text).map_err(|message| message.replacen("window `", "block `", 1))
}

/// A month or year unit in a duration string (`1M`, `2 months`, `1y`): humantime takes `M`
/// for months, so a capitalised minute would silently become a month.
fn calendar_unit(text: &str) -> Option<&str> {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .find(|unit| matches!(*unit, "M" | "month" | "months" | "y" | "year" | "years"))
}

/// "did you mean" for a unit: its lower case where that is a unit (`H` → `h`; units are case
/// sensitive), else a spelled-out unit close to a spelled-out misspelling. A unit of one or
/// two letters is close to too many to guess from (`e` of `1e3ms` is no `sec`).
fn unit_suggestion(unit: &str) -> String {
    const SHORT_UNITS: &[&str] = &["ns", "us", "ms", "s", "m", "h", "hr", "d", "w"];
    let lower = unit.to_ascii_lowercase();
    if lower != unit && SHORT_UNITS.contains(&lower.as_str()) {
        return format!("; did you mean `{lower}`? (units are lower case)");
    }
    if unit.chars().count() < 3 {
        return String::new();
    }
    suggest::did_you_mean(unit, WINDOW_UNIT_WORDS)
}

fn window_parse_error(text: &str, error: humantime::DurationError) -> String {
    use humantime::DurationError;
    match error {
        DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => format!(
            "window `{text}` has no unit; write e.g. `{value}s`, `{value}m` or `{value}h`"
        ),
        DurationError::UnknownUnit { unit, .. } if unit.starts_with("mo") => format!(
            "window `{text}` counts in months, which are not a window unit (the longest window is 31 days); write e.g. `30d`, or `5m` for minutes"
        ),
        DurationError::UnknownUnit { unit, .. } => format!(
            "unknown unit `{unit}` in window `{text}`; expected `ms`, `s`, `m`, `h` or `d`, as in {WINDOW_EXAMPLES}{}",
            unit_suggestion(&unit)
        ),
        DurationError::NumberOverflow => format!(
            "window `{text}` is longer than the maximum of 31 days"
        ),
        _ => format!(
            "cannot read window `{text}` as a duration; expected a number and a unit, as in {WINDOW_EXAMPLES}"
        ),
    }
}

/// Why a request's cost cannot be counted by its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostProblem {
    /// A request that counts nothing.
    Zero,
    /// A cost larger than the limit: a request that could never pass.
    OverLimit,
}

/// Whether a request of `cost` units can be counted by a limit of `max` units.
///
/// # Errors
///
/// The [`CostProblem`] that stands in the way.
pub const fn check_cost(cost: u32, max: u32) -> Result<(), CostProblem> {
    if cost == 0 {
        Err(CostProblem::Zero)
    } else if cost > max {
        Err(CostProblem::OverLimit)
    } else {
        Ok(())
    }
}

impl CostProblem {
    /// What is wrong, in one line (for `const` panics of the runtime's constructors).
    pub const fn summary(self) -> &'static str {
        match self {
            CostProblem::Zero => "a cost must be at least one unit",
            CostProblem::OverLimit => {
                "a cost must not be larger than its limit: such a request could never pass"
            }
        }
    }

    /// The attribute's message for `cost = <cost>` under `limit = <max>`.
    pub fn message(self, cost: u32, max: u32) -> String {
        match self {
            CostProblem::Zero => "`cost = 0` counts nothing; a request costs at least 1 unit (for a route that needs no limit, write `exempt = \"<reason>\"`)".to_owned(),
            CostProblem::OverLimit => format!("`cost = {cost}` is larger than `limit = {max}`: a request of {cost} units could never pass a budget of {max}; raise the limit or lower the cost"),
        }
    }
}

/// Why a limit of some requests per window cannot be counted by its algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitProblem {
    /// No request allowed at all.
    Zero,
    /// A sliding log above [`MAX_SLIDING_LOG_LIMIT`].
    SlidingLogTooHigh,
    /// A sliding window whose limit × window (ms) reaches [`MAX_EXACT_SLIDING_PRODUCT`].
    SlidingWindowInexact,
    /// A GCRA limit of more than one request per microsecond.
    GcraTooFast,
    /// A GCRA limit whose rate would change by more than 1 % with requests spaced a whole
    /// number of microseconds apart.
    GcraRateChanged {
        /// The spacing the GCRA would use, in microseconds.
        interval_us: u64,
    },
}

/// Whether `max` requests per `window_millis` can be counted by `algorithm`.
///
/// # Errors
///
/// The [`LimitProblem`] that stands in the way.
pub const fn check_limit(
    max: u32,
    window_millis: u64,
    algorithm: Algorithm,
) -> Result<(), LimitProblem> {
    if max == 0 {
        return Err(LimitProblem::Zero);
    }
    match algorithm {
        Algorithm::SlidingLog if max > MAX_SLIDING_LOG_LIMIT => {
            Err(LimitProblem::SlidingLogTooHigh)
        }
        Algorithm::SlidingWindow
            if (max as u128) * (window_millis as u128) >= MAX_EXACT_SLIDING_PRODUCT =>
        {
            Err(LimitProblem::SlidingWindowInexact)
        }
        Algorithm::Gcra => {
            // The GCRA spaces requests a whole number of microseconds apart (floor(window /
            // limit)): where that would change the rate by more than 1 %, or to nothing,
            // the limit is refused rather than silently kept at another rate.
            let window_us = (window_millis as u128) * 1000;
            let interval = window_us / (max as u128);
            if interval == 0 {
                Err(LimitProblem::GcraTooFast)
            } else if window_us * 100 > interval * (max as u128) * 101 {
                Err(LimitProblem::GcraRateChanged {
                    interval_us: interval as u64,
                })
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

impl LimitProblem {
    /// What is wrong, in one line (for `const` panics of the runtime's constructors).
    pub const fn summary(self) -> &'static str {
        match self {
            LimitProblem::Zero => "a rate limit must allow at least one request",
            LimitProblem::SlidingLogTooHigh => {
                "a sliding log allows at most 1000 requests per window; use sliding_window or gcra"
            }
            LimitProblem::SlidingWindowInexact => {
                "a sliding window counts exactly only while limit x window (ms) < 2^53; use a shorter window or gcra"
            }
            LimitProblem::GcraTooFast | LimitProblem::GcraRateChanged { .. } => {
                "a GCRA limit must keep its rate within 1 % when requests are spaced a whole number of microseconds apart; use a limit that divides the window in microseconds, a lower limit or a longer window"
            }
        }
    }

    /// The attribute's message for `limit = <max>` over `window = "<window_text>"`.
    pub fn message(self, max: u32, window_millis: u64, window_text: &str) -> String {
        match self {
            LimitProblem::Zero => "`limit = 0` allows no request at all; a limit must be at least 1 (for a route that needs no limit, write `exempt = \"<reason>\"`)".to_owned(),
            LimitProblem::SlidingLogTooHigh => format!("`limit = {max}` is too high for `algorithm = \"sliding_log\"`, which allows at most {MAX_SLIDING_LOG_LIMIT}: a sliding log keeps one Redis sorted-set entry per request in the window, so its memory and Redis work grow with the limit; for high limits use `algorithm = \"sliding_window\"` or `algorithm = \"gcra\"`"),
            LimitProblem::SlidingWindowInexact => format!("`limit = {max}` over `window = \"{window_text}\"` is more than a sliding window counts exactly (the limit times the window in milliseconds must stay below 2^53); use a shorter window, a lower limit, or `algorithm = \"gcra\"`"),
            LimitProblem::GcraTooFast => format!("`limit = {max}` over `window = \"{window_text}\"` is more than one request per microsecond, which `algorithm = \"gcra\"` cannot space (it spaces requests a whole number of microseconds apart); use a lower limit or a longer window"),
            LimitProblem::GcraRateChanged { interval_us } => {
                let exact = (window_millis as f64 * 1000.0) / f64::from(max);
                format!("`limit = {max}` over `window = \"{window_text}\"` spaces requests {exact:.2} µs apart, but `algorithm = \"gcra\"` spaces them a whole number of microseconds apart ({interval_us} µs here), which would change the rate by more than 1 %; use a limit that divides the window in microseconds, a lower limit or a longer window")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_holds_at_itself_and_fails_one_past_it() {
        assert_eq!(check_window(1), Ok(()));
        assert_eq!(check_window(0), Err(WindowProblem::Zero));
        assert_eq!(check_window(MAX_WINDOW_MILLIS), Ok(()));
        assert_eq!(
            check_window(MAX_WINDOW_MILLIS + 1),
            Err(WindowProblem::TooLong)
        );
        let log = |max| check_limit(max, 60_000, Algorithm::SlidingLog);
        assert_eq!(log(MAX_SLIDING_LOG_LIMIT), Ok(()));
        assert_eq!(
            log(MAX_SLIDING_LOG_LIMIT + 1),
            Err(LimitProblem::SlidingLogTooHigh)
        );
        // 2^53 = 2^21 requests × 2^32 ms: at the product it is refused, one below it is not.
        let sliding = |window| check_limit(1 << 21, window, Algorithm::SlidingWindow);
        assert_eq!(sliding((1 << 32) - 1), Ok(()));
        assert_eq!(sliding(1 << 32), Err(LimitProblem::SlidingWindowInexact));
        assert_eq!(check_limit(1000, 1, Algorithm::Gcra), Ok(()));
        assert_eq!(
            check_limit(1001, 1, Algorithm::Gcra),
            Err(LimitProblem::GcraTooFast)
        );
        // 3 per ms: 333 µs apart, 0.1 % off; 600 per ms: 1 µs apart, 40 % off.
        assert_eq!(check_limit(3, 1, Algorithm::Gcra), Ok(()));
        assert_eq!(
            check_limit(600, 1, Algorithm::Gcra),
            Err(LimitProblem::GcraRateChanged { interval_us: 1 })
        );
        assert_eq!(
            check_limit(0, 1, Algorithm::FixedWindow),
            Err(LimitProblem::Zero)
        );
        assert_eq!(check_cost(10, 10), Ok(()));
        assert_eq!(check_cost(11, 10), Err(CostProblem::OverLimit));
        assert_eq!(check_cost(0, 10), Err(CostProblem::Zero));
    }

    #[test]
    fn windows_parse_with_their_messages() {
        assert_eq!(parse_window("5m"), Ok(300_000));
        assert_eq!(parse_window("1h30m"), Ok(5_400_000));
        assert_eq!(parse_window("31d"), Ok(MAX_WINDOW_MILLIS));
        // humantime's other forms, as the guide lists them.
        for (text, millis) in [
            ("1h 30m", 5_400_000),
            ("1w", 604_800_000),
            ("5min", 300_000),
            ("2 days", 172_800_000),
            ("1.5s", 1_500),
            ("1000us", 1),
        ] {
            assert_eq!(parse_window(text), Ok(millis), "{text}");
        }
        assert!(parse_window("32d")
            .unwrap_err()
            .contains("maximum of 31 days"));
        assert!(parse_window("0s").unwrap_err().contains("is zero"));
        assert!(parse_window("1H")
            .unwrap_err()
            .contains("did you mean `h`?"));
        assert!(parse_window("1M").unwrap_err().contains("months or years"));
        assert!(parse_window("300").unwrap_err().contains("has no unit"));
        assert!(parse_window("1500us")
            .unwrap_err()
            .contains("whole number of milliseconds"));
    }
}
