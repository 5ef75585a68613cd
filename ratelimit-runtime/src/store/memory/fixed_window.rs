//! Fixed window, as `scripts/fixed_window.lua`: one counter per window.

use super::{
    peek::Peek,
    table::{StoredValue, Table, Write},
};

pub(super) fn peek(table: &Table, stem: &str, max: u64, window: u64, now: u64) -> Peek {
    let start = now - now % window;
    let key = format!("{stem}:{start}");
    let count = match table.get(&key, now) {
        Some(StoredValue::Counter(n)) => *n,
        _ => 0,
    };
    let left = window - (now - start);
    if count < max {
        Peek::allowed(max - count - 1, left, Write::Increment { key, ttl: left })
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
            let p = peek(&table, "k", 2, 1_000, 1_999);
            assert!(p.allowed);
            table.apply(vec![p.write.unwrap()], 1_999);
        }
        let p = peek(&table, "k", 2, 1_000, 1_999);
        assert_eq!((p.allowed, p.retry_after, p.reset_after), (false, 1, 1));
        let p = peek(&table, "k", 2, 1_000, 2_000);
        assert_eq!((p.allowed, p.remaining, p.reset_after), (true, 1, 1_000));
    }
}
