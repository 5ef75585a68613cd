//! Sliding log, as `scripts/sliding_log.lua`: one timestamp per allowed request, window
//! `(now - w, now]`.

use super::{
    peek::Peek,
    table::{StoredValue, Table, Write},
};

pub(super) fn peek(
    table: &mut Table,
    stem: &str,
    (max, cost): (u64, u64),
    window: u64,
    now: u64,
) -> Peek {
    let write = Write::Append {
        key: stem.to_owned(),
        at: now,
        ttl: window,
        count: cost,
    };
    // Entries at or before `now - w` have left; before `w` has passed since 0, none has.
    let Some(log) = table.pruned_log(stem, now, now.checked_sub(window)) else {
        return Peek::allowed(max, max - cost, window, write);
    };
    let count = log.len() as u64;
    if count + cost <= max {
        // Saturating, as in the fixed window: a wrong bound is a request too many, which the
        // conformance suite counts, not a debug-only overflow.
        return Peek::allowed(max, max.saturating_sub(count + cost), window, write);
    }
    let oldest_to_leave = log[(count + cost - max - 1) as usize];
    let newest = log.back().copied().unwrap_or(now);
    Peek::rejected(oldest_to_leave + window - now, newest + window - now)
}

/// The peek at `at`, a time that may lie ahead of the store's (a reservation, as
/// `scripts/parts/sliding_log_ahead.lua`): an entry logged at `at` counts in every window
/// that ends from `at` to `at + window`, so the entries in `(at - window, at + window)`
/// count, a later reservation's too: the request fits then at `at` and at every time after
/// it. Nothing is pruned: an entry older than `at - window` may still count at the store's
/// time.
pub(super) fn peek_ahead(
    table: &Table,
    stem: &str,
    (max, cost): (u64, u64),
    window: u64,
    at: u64,
) -> Peek {
    let write = Write::Append {
        key: stem.to_owned(),
        at,
        ttl: window,
        count: cost,
    };
    let log = match table.get(stem, at) {
        Some(StoredValue::Log(log)) => log,
        _ => return Peek::allowed(max, max - cost, window, write),
    };
    let from = log.partition_point(|&t| at.checked_sub(window).is_some_and(|old| t <= old));
    let to = log.partition_point(|&t| t < at + window);
    let count = to.saturating_sub(from) as u64;
    if count + cost <= max {
        return Peek::allowed(max, max.saturating_sub(count + cost), window, write);
    }
    let oldest_to_leave = log[from + (count + cost - max - 1) as usize];
    let newest = log[to - 1];
    Peek::rejected(oldest_to_leave + window - at, newest + window - at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_at_time_zero_count_until_w() {
        let mut table = Table::new(10);
        let mut allowed = Vec::new();
        for now in [0, 0, 0, 999, 1_000] {
            let p = peek(&mut table, "k", (2, 1), 1_000, now);
            allowed.push(p.allowed);
            if let Some(write) = p.write.filter(|_| p.allowed) {
                table.apply(vec![(write, Default::default())], now);
            }
        }
        assert_eq!(allowed, [true, true, false, false, true]);
    }

    #[test]
    fn an_entry_leaves_the_window_exactly_w_later() {
        let mut table = Table::new(10);
        for now in [1_000, 1_400] {
            let p = peek(&mut table, "k", (2, 1), 1_000, now);
            table.apply(vec![(p.write.unwrap(), Default::default())], now);
        }
        let p = peek(&mut table, "k", (2, 1), 1_000, 1_999);
        assert_eq!((p.allowed, p.retry_after, p.reset_after), (false, 1, 401));
        assert!(
            peek(&mut table, "k", (2, 1), 1_000, 2_000).allowed,
            "(now - w, now] excludes 1000"
        );
    }
}
