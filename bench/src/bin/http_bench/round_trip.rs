//! One bare Redis round trip as the driver sees it: the median of sequential `PING`s over
//! the stats connection (the driver is pinned to the load CPUs, beside Redis).

use std::time::{Duration, Instant};

use crate::redis_stats::RedisStats;

pub fn median_ping(stats: &mut RedisStats, samples: usize) -> Result<Duration, String> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        stats.ping()?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}
