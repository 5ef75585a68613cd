//! The running setup: Redis, one server per target, wrk, and the counters read around each
//! measurement.

use std::{thread, time::Duration};

use crate::{
    http_probe::HttpProbe,
    plan::{Cell, Target},
    process_cpu::cpu_time,
    redis_stats::{Counters, RedisStats},
    servers::Servers,
    wrk::{Wrk, WrkResult},
};

/// What one wrk run cost, server and Redis side.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub round: usize,
    pub cell: Cell,
    pub target: Target,
    pub wrk: WrkResult,
    pub redis: Counters,
    pub server_cpu: Duration,
    pub redis_cpu: Duration,
}

/// How long to wait after wrk exits before reading counters: requests that were in flight
/// when wrk closed its connections finish their Redis calls.
const SETTLE: Duration = Duration::from_millis(200);

pub struct Rig {
    pub servers: Servers,
    pub redis_pid: u32,
    pub stats: RedisStats,
    pub wrk: Wrk,
}

impl Rig {
    pub fn url(&self, target: Target, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.servers.port(target))
    }

    pub fn probe(&self, target: Target) -> Result<HttpProbe, String> {
        HttpProbe::connect(self.servers.port(target))
    }

    pub fn measure(
        &mut self,
        round: usize,
        cell: Cell,
        target: Target,
        duration: Duration,
    ) -> Result<Sample, String> {
        let server_pid = self.servers.pid(target);
        let url = self.url(target, &target.path(cell.scenario.budget()));
        let counters = self.stats.counters()?;
        let server_cpu = cpu_time(server_pid)?;
        let redis_cpu = cpu_time(self.redis_pid)?;
        let wrk = self
            .wrk
            .run(&url, cell.scenario.clients(), cell.connections, duration)?;
        thread::sleep(SETTLE);
        Ok(Sample {
            round,
            cell,
            target,
            wrk,
            redis: self.stats.counters()?.since(counters),
            server_cpu: cpu_time(server_pid)?.saturating_sub(server_cpu),
            redis_cpu: cpu_time(self.redis_pid)?.saturating_sub(redis_cpu),
        })
    }
}
