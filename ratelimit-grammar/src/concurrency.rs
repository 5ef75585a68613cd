//! Concurrency limits: `concurrency = 5` (at most five requests of one identity in flight)
//! and `lease = "10s"` (how long a request's hold outlives an instance that died holding it).

use crate::{limit::MAX_SLIDING_LOG_LIMIT, parse_window, Key};

/// The most requests a concurrency limit may let run at once: each holds one sorted-set
/// member, as a sliding log's request does, so the same bound.
pub const MAX_CONCURRENCY: u32 = MAX_SLIDING_LOG_LIMIT;

/// The lease when `lease` is not written: 10 seconds. A lease is renewed while its request
/// runs, so the lease bounds only how long the holds of an instance that died (`kill -9`,
/// a lost host) keep counting.
pub const DEFAULT_LEASE_MILLIS: u64 = 10_000;

/// The shortest lease: one second (a lease is renewed every third of it).
pub const MIN_LEASE_MILLIS: u64 = 1_000;

/// The longest lease: one hour.
pub const MAX_LEASE_MILLIS: u64 = 3_600_000;

/// The keys a `concurrency` declaration takes no value of: a concurrency limit counts
/// requests in flight, with no window, algorithm, cost or lockout.
pub const NOT_WITH_CONCURRENCY: [Key; 7] = [
    Key::Limit,
    Key::Window,
    Key::Algorithm,
    Key::Count,
    Key::Block,
    Key::Cost,
    Key::Budget,
];

/// Whether `n` can be a concurrency limit.
///
/// # Errors
///
/// The message for zero or more than [`MAX_CONCURRENCY`].
pub fn check_concurrency(n: u64) -> Result<u32, String> {
    match u32::try_from(n) {
        Ok(0) => Err("`concurrency = 0` lets no request run; a concurrency limit must be at least 1 (for a route that needs no limit, write `exempt = \"<reason>\"`)".to_owned()),
        Ok(n) if n <= MAX_CONCURRENCY => Ok(n),
        _ => Err(format!("`concurrency = {n}` is too high; the highest is {MAX_CONCURRENCY} (each request in flight holds one Redis sorted-set member)")),
    }
}

/// Parses `lease = "<text>"` (`"10s"`): its length in milliseconds.
///
/// # Errors
///
/// [`parse_window`]'s messages, naming the lease, and a lease under one second or over an
/// hour.
pub fn parse_lease(text: &str) -> Result<u64, String> {
    let millis = parse_window(text).map_err(|message| {
        message
            .replacen("window `", "lease `", 1)
            .replace("a window must", "a lease must")
    })?;
    if !(MIN_LEASE_MILLIS..=MAX_LEASE_MILLIS).contains(&millis) {
        return Err(format!("lease `{text}` is out of bounds: a lease is at least `1s` (it is renewed every third of it while the request runs) and at most `1h` (it bounds how long the requests of an instance that died keep holding their places)"));
    }
    Ok(millis)
}

/// `key` written beside `concurrency`.
pub fn not_with_concurrency(key: Key) -> String {
    format!(
        "`{}` does not go with `concurrency`: a concurrency limit counts the requests in flight, with no window, algorithm, cost or lockout; write a rate limit in a `#[rate_limit(...)]` of its own on the same handler, and both are checked in one call",
        key.name()
    )
}

/// `lease` written without `concurrency`.
pub fn lease_without_concurrency() -> &'static str {
    "`lease` is how long a concurrency limit's hold outlives an instance that died holding it; it goes with `concurrency = N` only"
}

/// A second `concurrency` in one stack.
pub fn concurrency_twice() -> &'static str {
    "a route's stack holds one `concurrency` limit; keep the stricter one"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_messages() {
        assert_eq!(check_concurrency(5), Ok(5));
        assert!(check_concurrency(0).unwrap_err().contains("at least 1"));
        assert!(check_concurrency(1001).unwrap_err().contains("1000"));
        assert_eq!(parse_lease("30s"), Ok(30_000));
        assert!(parse_lease("500ms").unwrap_err().contains("at least `1s`"));
        assert!(parse_lease("2h").unwrap_err().contains("at most `1h`"));
        assert!(parse_lease("10").unwrap_err().starts_with("lease `10`"));
    }
}
