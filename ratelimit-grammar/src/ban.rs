//! Bans: `ban = "20 in 10m for 1h"` (a client refused 20 times within 10 minutes is refused
//! for an hour, on every route the ban covers, by one key check).

use crate::{parse_block, parse_window, Key};

/// A ban as written: after `times` refusals within `within_millis`, every request of the
/// client is refused for `for_millis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BanSpec {
    /// How many refusals start the ban (1 or more).
    pub times: u32,
    /// The window the refusals are counted in, in milliseconds.
    pub within_millis: u64,
    /// How long the ban lasts, in milliseconds.
    pub for_millis: u64,
}

/// The most refusals a ban may count before it starts.
pub const MAX_BAN_TIMES: u32 = 1_000_000;

/// The keys a route with a ban takes no value of: a route that waits is served late rather
/// than refused, and a shadow route never refuses, so neither gives a ban anything to
/// count.
pub const NOT_WITH_BAN: [Key; 2] = [Key::Wait, Key::Shadow];

const SHAPE: &str =
    "write `ban = \"<refusals> in <window> for <duration>\"`, e.g. `ban = \"20 in 10m for 1h\"`";

/// Parses `ban = "<text>"` (`"20 in 10m for 1h"`).
///
/// ```
/// use ratelimit_grammar::{parse_ban, BanSpec};
///
/// assert_eq!(
///     parse_ban("20 in 10m for 1h"),
///     Ok(BanSpec { times: 20, within_millis: 600_000, for_millis: 3_600_000 })
/// );
/// assert!(parse_ban("20 per 10m for 1h").unwrap_err().contains("e.g. `ban = \"20 in 10m for 1h\"`"));
/// ```
///
/// # Errors
///
/// A message naming what is wrong: the shape, the count (1 to [`MAX_BAN_TIMES`]), the
/// window or the duration ([`parse_window`]'s and [`parse_block`]'s messages).
pub fn parse_ban(text: &str) -> Result<BanSpec, String> {
    let shape = || format!("ban `{text}` is not a ban: {SHAPE}");
    let (times, rest) = text.trim().split_once(" in ").ok_or_else(shape)?;
    let (within, duration) = rest.split_once(" for ").ok_or_else(shape)?;
    let times = match times.trim().parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_BAN_TIMES)).contains(&n) => n as u32,
        Ok(_) => {
            return Err(format!(
                "ban `{text}`: the refusals that start a ban must be from 1 to {MAX_BAN_TIMES}"
            ))
        }
        Err(_) => {
            return Err(format!(
                "ban `{text}`: `{}` is no whole number of refusals; {SHAPE}",
                times.trim()
            ))
        }
    };
    let within_millis = parse_window(within.trim()).map_err(|message| {
        format!(
            "ban `{text}`: {}",
            message.replace("a window must", "the window a ban counts refusals in must")
        )
    })?;
    let for_millis = parse_block(duration.trim()).map_err(|message| {
        if message.contains("longer than the maximum") {
            return format!("ban `{text}`: a ban lasts at most 31 days");
        }
        format!(
            "ban `{text}`: {}",
            message
                .replacen("block `", "duration `", 1)
                .replace("a window must", "a ban's duration must")
        )
    })?;
    Ok(BanSpec {
        times,
        within_millis,
        for_millis,
    })
}

/// `key` written on a route with a ban.
pub fn not_with_ban(key: Key) -> String {
    let why = match key {
        Key::Wait => "a route that waits serves a request late rather than refusing it, so it has no refusals to count",
        _ => "a shadow route never refuses, so it has no refusals to count",
    };
    format!("`ban` does not go with `{}`: {why}", key.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_bounds_and_messages() {
        assert_eq!(
            parse_ban(" 3 in 1s for 500ms "),
            Ok(BanSpec {
                times: 3,
                within_millis: 1_000,
                for_millis: 500
            })
        );
        assert!(parse_ban("20 in 10m").unwrap_err().contains("is not a ban"));
        assert!(parse_ban("0 in 10m for 1h")
            .unwrap_err()
            .contains("from 1 to"));
        assert!(parse_ban("x in 10m for 1h")
            .unwrap_err()
            .contains("`x` is no whole number"));
        assert!(parse_ban("2 in 10q for 1h")
            .unwrap_err()
            .starts_with("ban `2 in 10q for 1h`: unknown unit `q` in window `10q`"));
        assert!(parse_ban("2 in 10m for 40d")
            .unwrap_err()
            .contains("at most 31 days"));
        assert!(not_with_ban(Key::Wait).starts_with("`ban` does not go with `wait`"));
    }
}
