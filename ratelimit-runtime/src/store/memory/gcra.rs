//! GCRA, as `scripts/gcra.lua`: one theoretical arrival time in microseconds.
//!
//! Emission interval `T = max(1, floor(w * 1000 / max))` µs and tolerance `tau = T * max`,
//! so a burst from idle allows exactly `max` requests.

use super::{
    peek::Peek,
    table::{StoredValue, Table, Write},
};
use crate::policy::gcra_interval_micros;

pub(super) fn peek(
    table: &Table,
    stem: &str,
    (max, cost): (u64, u64),
    window: u64,
    now: u64,
) -> Peek {
    let interval = gcra_interval_micros(max, window);
    let tolerance = interval * max;
    let now_us = now * 1000;
    let tat = match table.get(stem, now) {
        Some(StoredValue::Tat(tat)) => (*tat).max(now_us),
        _ => now_us,
    };
    let new_tat = tat + cost * interval;
    if new_tat - now_us <= tolerance {
        let remaining = (tolerance - (new_tat - now_us)) / interval;
        let ttl = (new_tat - now_us).div_ceil(1000);
        let write = Write::SetTat {
            key: stem.to_owned(),
            tat: new_tat,
            ttl: ttl.max(1),
        };
        Peek::allowed(max, remaining, ttl, write)
    } else {
        Peek::rejected(
            (new_tat - tolerance - now_us).div_ceil(1000),
            (tat - now_us).div_ceil(1000),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_max_then_one_per_interval() {
        let mut table = Table::new(10);
        for left in (0..3).rev() {
            let p = peek(&table, "k", (3, 1), 1_000, 5_000);
            assert_eq!((p.allowed, p.remaining), (true, left));
            table.apply(vec![(p.write.unwrap(), Default::default())], 5_000);
        }
        let p = peek(&table, "k", (3, 1), 1_000, 5_000);
        // T = 333_333 µs: the next cell is free at 5_000 ms + 333.333 ms, rounded up.
        assert_eq!(
            (p.allowed, p.retry_after, p.reset_after),
            (false, 334, 1_000)
        );
        assert!(!peek(&table, "k", (3, 1), 1_000, 5_333).allowed);
        assert!(peek(&table, "k", (3, 1), 1_000, 5_334).allowed);
    }
}
