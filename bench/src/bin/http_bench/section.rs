//! The run as BENCHMARKS.md's generated section: the run and the machine in a few lines,
//! every goal, and the two tables the goals are read from (one hot key at 64 and 256
//! connections against the floor (h); the flood against (a)), condensed so that the file
//! stays a page. The whole report (every cell, latency, the exact Redis work, memory) is
//! what the run prints.

use std::fmt::Write as _;

use ratelimit_bench::Variant;

use crate::{
    numbers::{latency, per_request, ratio, whole},
    plan::{Cell, Scenario, Target},
    report::Report,
    results::Row,
};

/// The connections of the condensed tables.
const CONNECTIONS: [usize; 2] = [64, 256];

/// A target's rows at each of [`CONNECTIONS`], and its base's (when measured).
type Pair<'a> = (Target, [&'a Row; 2], [Option<&'a Row>; 2]);

impl Report<'_> {
    /// The condensed section written into BENCHMARKS.md.
    pub fn section(&self) -> String {
        let mut out = String::new();
        self.summary(&mut out);
        self.goals(&mut out);
        self.hot_key(&mut out);
        self.flood(&mut out);
        out
    }

    fn summary(&self, out: &mut String) {
        let m = self.machine;
        let o = self.options;
        // `wrk -v`'s first line ends with its copyright.
        let wrk = m.wrk.split(" Copyright").next().unwrap_or_default();
        let _ = writeln!(out, "### Latest run\n\n{}\n", self.run_line());
        let _ = writeln!(
            out,
            "Machine: revision {}, {} CPUs ({}, load {} at start), kernel {}, Redis {}, {}, {}; \
             each server ({} actix worker(s)) on CPU {}, wrk, redis-server and the driver on \
             CPU {}; a bare `PING` {} from CPU {}.\n",
            m.revision,
            m.cpus,
            m.cpu_model,
            m.load_average,
            m.kernel,
            m.redis,
            wrk,
            m.rustc,
            o.workers,
            o.server_cpus,
            o.load_cpus,
            latency(self.round_trip.from_servers.as_secs_f64() * 1e6),
            o.server_cpus
        );
    }

    /// The floors and this project's routes on one hot key, against (h).
    fn hot_key(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "#### All allowed, one hot key (64 and 256 connections)\n\n\
             | server | c64 req/s | × (h) | c256 req/s | × (h) | scripts/req (c256) | server CPU/req (c64) | Redis CPU/req (c64) |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|"
        );
        let shown = [
            Variant::NoLimiter,
            Variant::FloorPerWorker,
            Variant::FloorHeaders,
            Variant::Project,
        ];
        for (target, [c64, c256], [base64, base256]) in
            self.pairs(Scenario::HotKey, &shown, Variant::FloorHeaders)
        {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                target,
                whole(c64.rps()),
                of(c64, base64),
                whole(c256.rps()),
                of(c256, base256),
                per_request(c256.scripts_per_request()),
                latency(c64.server_cpu_per_request_us()),
                latency(c64.redis_cpu_per_request_us()),
            );
        }
        out.push('\n');
    }

    /// (a), (g) and this project's routes over a limit long spent, against (a).
    fn flood(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "#### Flood: every request over a 1-per-hour limit (64 and 256 connections)\n\n\
             | server | c64 req/s | × (a) | c256 req/s | × (a) |\n|---|---:|---:|---:|---:|"
        );
        let shown = [Variant::NoLimiter, Variant::AnswerOnly, Variant::Project];
        for (target, [c64, c256], [base64, base256]) in
            self.pairs(Scenario::Flood, &shown, Variant::NoLimiter)
        {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                target,
                whole(c64.rps()),
                of(c64, base64),
                whole(c256.rps()),
                of(c256, base256),
            );
        }
        out.push('\n');
    }

    /// In plan order, each target of `shown` variants (no replica) measured in `scenario` at
    /// 64 and 256 connections: its two rows, and `base`'s two.
    fn pairs(&self, scenario: Scenario, shown: &[Variant], base: Variant) -> Vec<Pair<'_>> {
        let cells = CONNECTIONS.map(|connections| Cell {
            scenario,
            connections,
        });
        let bases = cells.map(|cell| self.results.baseline(cell, base));
        self.plan
            .targets
            .iter()
            .filter(|t| !t.replica && shown.contains(&t.variant))
            .filter_map(|target| {
                let [Some(c64), Some(c256)] = cells.map(|cell| self.results.row(cell, *target))
                else {
                    return None;
                };
                Some((*target, [c64, c256], bases))
            })
            .collect()
    }
}

/// `row`'s throughput as a share of `base`'s, round by round.
fn of(row: &Row, base: Option<&Row>) -> String {
    base.map_or("–".to_owned(), |base| ratio(row.throughput_ratio(base)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ratelimit_bench::ProjectRoute;

    use super::*;
    use crate::{
        goals::{Status, Verdict},
        machine::Machine,
        options::Options,
        plan::Plan,
        results::Results,
        round_trip::RoundTrips,
    };

    fn row(scenario: Scenario, connections: usize, target: Target, rps: f64) -> Row {
        let cell = Cell {
            scenario,
            connections,
        };
        Row::for_test(cell, target, &[rps, rps, rps], &[100.0; 3])
    }

    /// The section names the run, keeps every goal, shows the floors and this project's
    /// routes against (h) and the flood against (a), and leaves out what the goals do not
    /// read (the other limiters, the replicas, c1).
    #[test]
    fn the_section_holds_the_goals_and_the_two_tables_they_read() {
        let options = Options::parse(std::iter::empty()).unwrap();
        let plan = Plan::full(3, Duration::from_secs(2));
        let machine = Machine {
            cpus: 2,
            cpu_model: "a CPU".to_owned(),
            kernel: "6".to_owned(),
            redis: "7.0.15".to_owned(),
            wrk: "wrk 4.1.0 [epoll] Copyright (C) 2012 Will Glozer".to_owned(),
            rustc: "rustc 1.95.0".to_owned(),
            load_average: "0.10 0.20 0.30".to_owned(),
            revision: "abc1234".to_owned(),
        };
        let fixed = Target {
            route: Some(ProjectRoute::FixedWindow),
            ..Target::of(Variant::Project)
        };
        let mut rows = Vec::new();
        for connections in [1, 64, 256] {
            for (target, rps) in [
                (Target::of(Variant::FloorHeaders), 100.0),
                (Target::replica_of(Variant::FloorHeaders), 98.0),
                (Target::of(Variant::Governor), 300.0),
                (fixed, 95.0),
            ] {
                rows.push(row(Scenario::HotKey, connections, target, rps));
            }
            for (target, rps) in [
                (Target::of(Variant::NoLimiter), 200.0),
                (Target::of(Variant::AnswerOnly), 180.0),
                (fixed, 150.0),
            ] {
                rows.push(row(Scenario::Flood, connections, target, rps));
            }
        }
        let results = Results { rows };
        let verdicts = [Verdict {
            goal: "a goal".to_owned(),
            figure: "×1.00".to_owned(),
            status: Status::Met,
        }];
        let report = Report {
            options: &options,
            plan: &plan,
            machine: &machine,
            date: "2026-12-07 05:00 UTC".to_owned(),
            elapsed: Duration::from_secs(125),
            round_trip: RoundTrips {
                beside_redis: Duration::from_micros(30),
                from_servers: Duration::from_micros(55),
            },
            results: &results,
            checks: &[],
            memory: &[],
            verdicts: &verdicts,
        };
        let section = report.section();
        for expected in [
            "--rounds 3 --duration 2",
            "2 min 5 s in all",
            "revision abc1234, 2 CPUs (a CPU, load 0.10 0.20 0.30 at start)",
            "a bare `PING` 55 µs",
            "Redis 7.0.15, wrk 4.1.0 [epoll], rustc",
            "| a goal | ×1.00 | met |",
            "| (h) floor-headers | 100 | ×1.00 | 100 | ×1.00 |",
            "| (e) fixed_window | 95 | ×0.95 | 95 | ×0.95 |",
            "| (g) answer-only | 180 | ×0.90 | 180 | ×0.90 |",
            "| (e) fixed_window | 150 | ×0.75 | 150 | ×0.75 |",
        ] {
            assert!(section.contains(expected), "{expected:?} in:\n{section}");
        }
        for left_out in ["governor", "(h′)", "Copyright"] {
            assert!(!section.contains(left_out), "{left_out:?} in:\n{section}");
        }
    }
}
