//! Sliding-window counter, as `scripts/sliding_window.lua` (see there for the formulas).
//!
//! Allowed when `prev * (w - e) <= (max - cur - cost) * w`, i.e. `estimate + cost <= max`,
//! in exact integer arithmetic.

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
    let stored = table.get(stem, now);
    let counter = |start: u64| i128::from(stored.map_or(0, |value| value.window(start)));
    let cur = counter(start);
    let prev = start.checked_sub(window).map_or(0, counter);
    let (w, e, m) = (i128::from(window), i128::from(now - start), i128::from(max));
    let c = i128::from(cost);
    let room = m - cur - c;
    if room >= 0 && prev * (w - e) <= room * w {
        let remaining = room - ceil_div(prev * (w - e), w);
        let ttl = (2 * w - e) as u64;
        // This window's counter is read again as the previous one: the field before it
        // stays.
        let write = Write::Increment {
            key: stem.to_owned(),
            window: start,
            ttl,
            oldest: start.saturating_sub(window),
            by: cost,
        };
        return Peek::allowed(max, remaining as u64, ttl, write);
    }
    let retry_after = if room >= 0 {
        (w - e) - (room * w).div_euclid(prev)
    } else {
        (w - e) + w - ((m - c) * w).div_euclid(cur)
    };
    let reset_after = if cur > 0 { 2 * w - e } else { w - e };
    Peek::rejected(retry_after as u64, reset_after as u64)
}

fn ceil_div(a: i128, b: i128) -> i128 {
    -((-a).div_euclid(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(table: &mut Table, n: usize, max: u64, now: u64) -> usize {
        let mut allowed = 0;
        for _ in 0..n {
            let p = peek(table, "k", (max, 1), 1_000, now);
            if let Some(write) = p.write {
                table.apply(vec![(write, Default::default())], now);
                allowed += 1;
            }
        }
        allowed
    }

    #[test]
    fn the_previous_window_still_counts_by_its_overlap() {
        let mut table = Table::new(10);
        assert_eq!(spend(&mut table, 20, 10, 1_999), 10);
        // 1 ms later the previous window weighs 999/1000 of 10 = 9.99: nothing fits.
        let p = peek(&table, "k", (10, 1), 1_000, 2_000);
        assert!(!p.allowed);
        // Allowed again when 10 * (1000 - e) <= 9 * 1000, i.e. e >= 100.
        assert_eq!(p.retry_after, 100);
        assert!(!peek(&table, "k", (10, 1), 1_000, 2_099).allowed);
        // At the midpoint 5 of the previous 10 still count: exactly 5 more fit.
        assert_eq!(spend(&mut table, 20, 10, 2_500), 5);
    }

    #[test]
    fn a_full_current_window_waits_for_the_next_one() {
        let mut table = Table::new(10);
        assert_eq!(spend(&mut table, 4, 4, 1_000), 4);
        let p = peek(&table, "k", (4, 1), 1_000, 1_000);
        // Next window at +1000, then 4 * (1000 - e) <= 3 * 1000 from e = 250.
        assert_eq!((p.retry_after, p.reset_after), (1_250, 2_000));
        assert!(peek(&table, "k", (4, 1), 1_000, 2_250).allowed);
        assert!(!peek(&table, "k", (4, 1), 1_000, 2_249).allowed);
    }
}
