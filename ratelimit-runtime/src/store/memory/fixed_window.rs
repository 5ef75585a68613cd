//! Fixed window, as `scripts/fixed_window.lua`: one counter per window, a field of the
//! entry at the limit's key.

use super::{
    peek::Peek,
    table::{Table, Write},
};

pub(super) fn peek(
    table: &Table,
    stem: &str,
    (max, cost): (u64, u64),
    window: u64,
    now: u64,
) -> Peek {
    let start = now - now % window;
    let count = table.get(stem, now).map_or(0, |value| value.window(start));
    let left = window - (now - start);
    if count + cost <= max {
        let write = Write::Increment {
            key: stem.to_owned(),
            window: start,
            ttl: left,
            oldest: start,
            by: cost,
        };
        // Saturating, so that a wrong bound above shows as a request too many (which the
        // conformance suite counts), not as an overflow panic only debug builds have.
        Peek::allowed(max, max.saturating_sub(count + cost), left, write)
    } else {
        Peek::rejected(left, left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_restarts_with_each_window() {
        let mut table = Table::new(10);
        for _ in 0..2 {
            let p = peek(&table, "k", (2, 1), 1_000, 1_999);
            assert!(p.allowed);
            table.apply(vec![(p.write.unwrap(), Default::default())], 1_999);
        }
        let p = peek(&table, "k", (2, 1), 1_000, 1_999);
        assert_eq!((p.allowed, p.retry_after, p.reset_after), (false, 1, 1));
        let p = peek(&table, "k", (2, 1), 1_000, 2_000);
        assert_eq!((p.allowed, p.remaining, p.reset_after), (true, 1, 1_000));
    }
}
