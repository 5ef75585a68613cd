//! Lockouts and give-backs, as `scripts/parts/block_*.lua` and `scripts/give_back.lua`.

use super::table::{Rank, StoredValue, Table, Write};
use crate::policy::{gcra_interval_micros, Algorithm};

/// How long the lockout at `key` still holds at `now`, in ms (0: none).
pub(super) fn blocked_for(table: &Table, key: &str, now: u64) -> u64 {
    match table.get(key, now) {
        Some(StoredValue::Lockout(ends)) => ends.saturating_sub(now),
        _ => 0,
    }
}

/// The rank of what a flood of new clients must evict last: a lockout (evicting it would end
/// it early) and a concurrency limit's places (evicting them would let more requests run).
pub(super) const HELD: Rank = Rank {
    requests: u32::MAX,
    share: u16::MAX,
};

/// The write that locks a client out for `block` ms from `now`: ranked above any count.
pub(super) fn lockout(key: String, now: u64, block: u64) -> (Write, Rank) {
    let write = Write::Lockout {
        key,
        ends: now + block,
        ttl: block,
    };
    (write, HELD)
}

/// Gives `units` back to the entry at `key` of a limit of `max` per `window` ms counted by
/// `algorithm_code` (`fw`, `sw`, `sl`, `gc`): where a check at `counted_at` counted them,
/// else from what counts at `now`. Answers the units given back.
pub(super) fn give_back(
    table: &mut Table,
    key: &str,
    (code, max, window): (&str, u64, u64),
    units: u64,
    counted_at: Option<u64>,
    now: u64,
) -> u64 {
    if code == "sl" {
        // Pruned as the script's ZREMRANGEBYSCORE prunes: what left the window goes.
        let Some(log) = table.pruned_log(key, now, now.checked_sub(window)) else {
            return 0;
        };
        return match counted_at {
            // The receipt's members: `units` entries logged at that time (a check of cost c
            // logged c), as many as are left.
            Some(at) => {
                let logged = log.iter().filter(|t| **t == at).count() as u64;
                let take = units.min(logged);
                for _ in 0..take {
                    if let Some(i) = table
                        .pruned_log(key, now, now.checked_sub(window))
                        .and_then(|log| log.iter().position(|t| *t == at))
                    {
                        let _ = log_remove(table, key, now, i);
                    }
                }
                take
            }
            None => {
                let take = units.min(log.len() as u64);
                if let Some(StoredValue::Log(log)) = table.live_mut(key, now).map(|e| &mut e.value)
                {
                    let keep = log.len() - take as usize;
                    log.truncate(keep);
                }
                take
            }
        };
    }
    let Some(entry) = table.live_mut(key, now) else {
        return 0;
    };
    match (&mut entry.value, code) {
        (StoredValue::Windows(windows), "fw" | "sw") => {
            let at = counted_at.unwrap_or(now);
            let start = at - at % window;
            // A window that counts no more (before this one, or for a sliding window before
            // the previous one) takes nothing back, as in the script.
            let current = now - now % window;
            let oldest = if code == "sw" {
                current.saturating_sub(window)
            } else {
                current
            };
            if start < oldest {
                return 0;
            }
            let mut starts = vec![start];
            if code == "sw" && counted_at.is_none() {
                starts.extend(start.checked_sub(window));
            }
            let mut left = units;
            for start in starts {
                if let Some((_, count)) = windows.iter_mut().find(|(s, _)| *s == start) {
                    let take = left.min(*count);
                    *count -= take;
                    left -= take;
                }
            }
            units - left
        }
        (StoredValue::Tat(tat), "gc") => {
            let interval = (window * 1000 / max).max(1);
            let now_us = now * 1000;
            let spent = tat.saturating_sub(now_us).div_ceil(interval);
            let take = units.min(spent);
            *tat = tat.saturating_sub(take * interval);
            if *tat <= now_us {
                table.remove(key);
            }
            take
        }
        _ => 0,
    }
}

/// Counts `units` now at `key`, a limit of `max` per `window` ms counted by `algorithm`,
/// never refused, as `scripts/give_back.lua` charges: at most one whole budget below nothing
/// (a count up to `2 × max`, GCRA's arrival time up to two windows ahead). The units
/// counted, and how many live entries were evicted to make room.
pub(super) fn charge(
    table: &mut Table,
    key: &str,
    (algorithm, max, window): (Algorithm, u64, u64),
    units: u64,
    now: u64,
) -> (u64, usize) {
    let (write, take, spent) = match algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow => {
            let start = now - now % window;
            let count = table.get(key, now).map_or(0, |value| value.window(start));
            let take = units.min((2 * max).saturating_sub(count));
            let (ttl, oldest) = if algorithm == Algorithm::SlidingWindow {
                (2 * window - (now - start), start.saturating_sub(window))
            } else {
                (window - (now - start), start)
            };
            let write = Write::Increment {
                key: key.to_owned(),
                window: start,
                ttl,
                oldest,
                by: take,
            };
            (write, take, count + take)
        }
        Algorithm::SlidingLog => {
            let count = table
                .pruned_log(key, now, now.checked_sub(window))
                .map_or(0, |log| log.len() as u64);
            let take = units.min((2 * max).saturating_sub(count));
            let write = Write::Append {
                key: key.to_owned(),
                at: now,
                ttl: window,
                count: take,
            };
            (write, take, count + take)
        }
        _ => {
            let interval = gcra_interval_micros(max, window);
            let tolerance = interval * max;
            let now_us = now * 1000;
            let tat = match table.get(key, now) {
                Some(StoredValue::Tat(tat)) => (*tat).max(now_us),
                _ => now_us,
            };
            let room = (now_us + 2 * tolerance).saturating_sub(tat) / interval;
            let take = units.min(room);
            let new_tat = tat + take * interval;
            let write = Write::SetTat {
                key: key.to_owned(),
                tat: new_tat,
                ttl: (new_tat - now_us).div_ceil(1000).max(1),
            };
            (write, take, (new_tat - now_us).div_ceil(interval))
        }
    };
    if take == 0 {
        return (0, 0);
    }
    // Ranked as a check that spent as much: a budget in debt is evicted last.
    let rank = Rank {
        requests: u32::try_from(spent).unwrap_or(u32::MAX),
        share: (spent * 1_000 / max.max(1)).min(1_000) as u16,
    };
    let evicted = table.apply(vec![(write, rank)], now);
    (take, evicted)
}

/// Removes the `index`-th entry of the log at `key`.
/// Gives back the place of a concurrency limit (a log over its lease `window` ms at `key`)
/// that counts from `at`, as `scripts/give_back.lua`'s release removes its member: 1 when
/// it was there, 0 once it expired. Places counting from one time are alike (they end
/// together), so any of them stands for the member.
pub(super) fn release(table: &mut Table, key: &str, window: u64, at: u64, now: u64) -> u64 {
    let found = table
        .pruned_log(key, now, now.checked_sub(window))
        .and_then(|log| log.iter().position(|t| *t == at));
    match found {
        Some(index) => u64::from(log_remove(table, key, now, index).is_some()),
        None => 0,
    }
}

/// Holds the place of a concurrency limit that counts from `at` for another lease of
/// `window` ms from `now`, as the script's renewal re-scores its member: when the lease
/// now ends, or `None` when the place was gone (it is not taken again).
pub(super) fn renew(table: &mut Table, key: &str, window: u64, at: u64, now: u64) -> Option<u64> {
    if release(table, key, window, at, now) == 0 {
        return None;
    }
    let write = Write::Append {
        key: key.to_owned(),
        at: now,
        ttl: window,
        count: 1,
    };
    // The place was held, so the entry is there to be written: nothing is evicted for it.
    table.apply(vec![(write, HELD)], now);
    Some(now + window)
}

fn log_remove(table: &mut Table, key: &str, now: u64, index: usize) -> Option<u64> {
    match table.live_mut(key, now).map(|e| &mut e.value) {
        Some(StoredValue::Log(log)) => log.remove(index),
        _ => None,
    }
}
