//! Waiting for a turn: `wait = "2s"` (a request over its rate limit waits up to that long
//! for its turn instead of being refused).

use crate::{parse_window, Key};

/// The longest wait: one minute. A waiting request holds its connection, and proxies in
/// front commonly give up on an answer after a minute.
pub const MAX_WAIT_MILLIS: u64 = 60_000;

/// The keys a route that waits takes no value of: a lockout (`block`) refuses by design, a
/// limit that counts failures only is counted after its request ran, a concurrency limit's
/// place is taken now or not at all, a shadow route never refuses, so never waits; and a
/// turn is counted in the route's own keys only: a shared budget (`budget`), counted by
/// other routes too, and weights read off each request (`cost_from`) would let a request
/// counted later than now hold back others, or others fill what its turn was computed on.
pub const NOT_WITH_WAIT: [Key; 6] = [
    Key::Block,
    Key::Count,
    Key::Concurrency,
    Key::Shadow,
    Key::Budget,
    Key::CostFrom,
];

/// Parses `wait = "<text>"` (`"2s"`): its length in milliseconds.
///
/// # Errors
///
/// [`parse_window`]'s messages, naming the wait, and a wait over [`MAX_WAIT_MILLIS`].
pub fn parse_wait(text: &str) -> Result<u64, String> {
    let millis = parse_window(text).map_err(|message| {
        message
            .replacen("window `", "wait `", 1)
            .replace("a window must", "a wait must")
    })?;
    if millis > MAX_WAIT_MILLIS {
        return Err(format!("wait `{text}` is too long: a request waits at most `1m` (it holds its connection meanwhile, and proxies in front commonly give up after a minute)"));
    }
    Ok(millis)
}

/// `key` written on a route that waits.
pub fn not_with_wait(key: Key) -> String {
    let why = match key {
        Key::Block => "a lockout refuses every request until it ends; a waiting request would only wait to be refused",
        Key::Count => "a limit that counts failures only counts a request after it ran, too late to give it a turn",
        Key::Concurrency => "a place in flight is taken when the request runs, not reserved ahead; keep the concurrency limit on a route of its own, or drop `wait`",
        Key::Budget => "a shared budget is counted by other routes too, and a turn counted ahead in it would hold their requests back; a route that waits counts in its own keys",
        Key::CostFrom => "a turn is worked out for the request's weight, and lighter requests of the same client would fill what it was worked out on; write a fixed `cost`",
        Key::Identity => "a turn counted ahead in a limit of another identity would hold back that identity's requests on other routes; a route that waits counts one identity in all its limits",
        _ => "a shadow route never refuses, so it has nothing to wait for",
    };
    format!("`wait` does not go with `{}`: {why}", key.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_messages() {
        assert_eq!(parse_wait("2s"), Ok(2_000));
        assert_eq!(parse_wait("250ms"), Ok(250));
        assert!(parse_wait("2m").unwrap_err().contains("at most `1m`"));
        assert!(parse_wait("2").unwrap_err().starts_with("wait `2`"));
        assert!(not_with_wait(Key::Block).starts_with("`wait` does not go with `block`"));
    }
}
