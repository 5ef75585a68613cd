//! Samples folded into one row per (scenario, connections, target): medians over rounds,
//! ratios taken round by round (to (a) and (d) measured in the same round), and Redis and CPU
//! work summed over every round before dividing by the requests.

use ratelimit_bench::Variant;

use crate::{
    plan::{Cell, Plan, Target},
    rig::Sample,
};

#[derive(Debug, Clone)]
pub struct Row {
    pub cell: Cell,
    pub target: Target,
    /// Requests per second of each round, in round order.
    pub rps_by_round: Vec<f64>,
    /// p50 of each round, microseconds.
    pub p50_by_round: Vec<f64>,
    pub p99_by_round: Vec<f64>,
    /// Requests of each round, in round order.
    pub requests_by_round: Vec<u64>,
    pub requests: u64,
    /// Responses with a status of 400 or more.
    pub error_statuses: u64,
    pub socket_errors: u64,
    pub script_calls: u64,
    pub commands: u64,
    pub connections: u64,
    pub server_cpu_us: f64,
    pub redis_cpu_us: f64,
}

pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

impl Row {
    pub fn rps(&self) -> f64 {
        median(&self.rps_by_round)
    }

    pub fn p50_us(&self) -> f64 {
        median(&self.p50_by_round)
    }

    pub fn p99_us(&self) -> f64 {
        median(&self.p99_by_round)
    }

    fn per_request(&self, total: f64) -> f64 {
        total / self.requests.max(1) as f64
    }

    pub fn scripts_per_request(&self) -> f64 {
        self.per_request(self.script_calls as f64)
    }

    pub fn commands_per_request(&self) -> f64 {
        self.per_request(self.commands as f64)
    }

    pub fn connections_per_request(&self) -> f64 {
        self.per_request(self.connections as f64)
    }

    pub fn server_cpu_per_request_us(&self) -> f64 {
        self.per_request(self.server_cpu_us)
    }

    pub fn redis_cpu_per_request_us(&self) -> f64 {
        self.per_request(self.redis_cpu_us)
    }

    /// Median over rounds of this row's throughput divided by `other`'s in the same round.
    pub fn throughput_ratio(&self, other: &Row) -> f64 {
        median(&self.throughput_ratios(other))
    }

    /// This row's throughput divided by `other`'s, round by round.
    pub fn throughput_ratios(&self, other: &Row) -> Vec<f64> {
        self.rps_by_round
            .iter()
            .zip(&other.rps_by_round)
            .map(|(mine, theirs)| mine / theirs)
            .collect()
    }

    /// Median over rounds of this row's p50 minus `other`'s in the same round, microseconds.
    pub fn added_p50_us(&self, other: &Row) -> f64 {
        let added: Vec<f64> = self
            .p50_by_round
            .iter()
            .zip(&other.p50_by_round)
            .map(|(mine, theirs)| mine - theirs)
            .collect();
        median(&added)
    }
}

#[cfg(test)]
impl Row {
    /// A row for tests: one round per `rps` figure (`p50` as given), one request each, no
    /// error and no Redis or CPU work; fields a test needs are set over it.
    pub fn for_test(cell: Cell, target: Target, rps: &[f64], p50: &[f64]) -> Row {
        Row {
            cell,
            target,
            rps_by_round: rps.to_vec(),
            p50_by_round: p50.to_vec(),
            p99_by_round: Vec::new(),
            requests_by_round: vec![1; rps.len()],
            requests: rps.len() as u64,
            error_statuses: 0,
            socket_errors: 0,
            script_calls: 0,
            commands: 0,
            connections: 0,
            server_cpu_us: 0.0,
            redis_cpu_us: 0.0,
        }
    }
}

/// All rows, in plan order.
pub struct Results {
    pub rows: Vec<Row>,
}

impl Results {
    pub fn new(plan: &Plan, samples: &[Sample]) -> Results {
        let mut rows = Vec::new();
        for cell in &plan.cells {
            for target in &plan.targets {
                let mut mine: Vec<&Sample> = samples
                    .iter()
                    .filter(|s| s.cell == *cell && s.target == *target)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                mine.sort_by_key(|s| s.round);
                rows.push(Row {
                    cell: *cell,
                    target: *target,
                    rps_by_round: mine.iter().map(|s| s.wrk.requests_per_second()).collect(),
                    p50_by_round: mine.iter().map(|s| s.wrk.p50_us as f64).collect(),
                    p99_by_round: mine.iter().map(|s| s.wrk.p99_us as f64).collect(),
                    requests_by_round: mine.iter().map(|s| s.wrk.requests).collect(),
                    requests: mine.iter().map(|s| s.wrk.requests).sum(),
                    error_statuses: mine.iter().map(|s| s.wrk.error_statuses).sum(),
                    socket_errors: mine.iter().map(|s| s.wrk.socket_errors).sum(),
                    script_calls: mine.iter().map(|s| s.redis.script_calls).sum(),
                    commands: mine.iter().map(|s| s.redis.commands).sum(),
                    connections: mine.iter().map(|s| s.redis.connections).sum(),
                    server_cpu_us: mine.iter().map(|s| s.server_cpu.as_micros() as f64).sum(),
                    redis_cpu_us: mine.iter().map(|s| s.redis_cpu.as_micros() as f64).sum(),
                });
            }
        }
        Results { rows }
    }

    pub fn row(&self, cell: Cell, target: Target) -> Option<&Row> {
        self.rows
            .iter()
            .find(|row| row.cell == cell && row.target == target)
    }

    /// The row of a plain variant ((a) to (d)) in `cell`.
    pub fn baseline(&self, cell: Cell, variant: Variant) -> Option<&Row> {
        self.row(cell, Target::of(variant))
    }

    pub fn in_cell(&self, cell: Cell) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(move |row| row.cell == cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_round_by_round_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
        assert!(median(&[]).is_nan());
        let row = |rps: Vec<f64>, p50: Vec<f64>| Row {
            cell: Cell {
                scenario: crate::plan::Scenario::HotKey,
                connections: 1,
            },
            target: Target::of(Variant::Floor),
            rps_by_round: rps,
            p50_by_round: p50,
            p99_by_round: vec![],
            requests_by_round: vec![4, 3, 3],
            requests: 10,
            error_statuses: 0,
            socket_errors: 0,
            script_calls: 10,
            commands: 30,
            connections: 0,
            server_cpu_us: 500.0,
            redis_cpu_us: 0.0,
        };
        let a = row(vec![100.0, 200.0, 50.0], vec![10.0, 10.0, 10.0]);
        let b = row(vec![50.0, 50.0, 50.0], vec![30.0, 25.0, 40.0]);
        // Per round: 2, 4, 1 -> median 2 (a ratio of medians would say 100 / 50 = 2 too,
        // but only round-by-round ratios cancel drift).
        assert_eq!(a.throughput_ratio(&b), 2.0);
        assert_eq!(a.throughput_ratios(&b), [2.0, 4.0, 1.0]);
        assert_eq!(b.added_p50_us(&a), 20.0);
        assert_eq!(b.commands_per_request(), 3.0);
        assert_eq!(b.server_cpu_per_request_us(), 50.0);
    }
}
