//! One bare Redis round trip: the median of sequential `PING`s, from the driver (pinned to
//! the load CPUs, beside Redis) and from a thread pinned to the servers' CPUs, which pays the
//! wake-ups across CPUs that a server's check pays.

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::{prerequisites, redis_stats::RedisStats};

/// Medians of bare `PING`s.
#[derive(Debug, Clone, Copy)]
pub struct RoundTrips {
    /// From the driver, on the load CPUs beside Redis.
    pub beside_redis: Duration,
    /// From a thread on the servers' CPUs.
    pub from_servers: Duration,
}

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

/// The same, over a connection of its own from a thread pinned to `cpus`.
pub fn median_ping_from(cpus: &str, url: &str, samples: usize) -> Result<Duration, String> {
    let cpus = cpus.to_owned();
    let url = url.to_owned();
    thread::spawn(move || {
        prerequisites::pin_this_thread(&cpus)?;
        let mut stats = RedisStats::connect(&url)?;
        median_ping(&mut stats, samples)
    })
    .join()
    .map_err(|_| "the round-trip thread panicked".to_owned())?
}
