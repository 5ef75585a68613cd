//! The run's figures as Markdown, printed whole (`section` condenses them for
//! BENCHMARKS.md).

use std::{fmt::Write as _, time::Duration};

use ratelimit_bench::{route, Budget, Variant};

use crate::{
    exact_checks::ExactCheck,
    goals::Verdict,
    machine::Machine,
    memory::MemoryFigure,
    numbers::{latency, per_request, ratio, whole},
    options::Options,
    plan::{Plan, Scenario, Target},
    results::{Results, Row},
    round_trip::RoundTrips,
};

pub struct Report<'a> {
    pub options: &'a Options,
    pub plan: &'a Plan,
    pub machine: &'a Machine,
    pub date: String,
    pub elapsed: Duration,
    pub round_trip: RoundTrips,
    pub results: &'a Results,
    pub checks: &'a [ExactCheck],
    pub memory: &'a [MemoryFigure],
    pub verdicts: &'a [Verdict],
}

impl Report<'_> {
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.run(&mut out);
        self.goals(&mut out);
        for scenario in Scenario::ALL {
            self.scenario(&mut out, scenario);
        }
        self.exact(&mut out);
        self.memory(&mut out);
        out
    }

    fn run(&self, out: &mut String) {
        let m = self.machine;
        let o = self.options;
        let _ = writeln!(out, "### Latest run\n\n{}\n", self.run_line());
        let _ = writeln!(out, "| machine | |\n|---|---|");
        let rows = [
            ("workspace revision", m.revision.clone()),
            ("CPUs (`nproc`)", m.cpus.to_string()),
            ("CPU model (`/proc/cpuinfo`)", m.cpu_model.clone()),
            ("kernel", m.kernel.clone()),
            ("Redis", m.redis.clone()),
            ("wrk", m.wrk.clone()),
            ("rustc", m.rustc.clone()),
            ("load average at start (shared machine)", m.load_average.clone()),
            (
                "pinning",
                format!(
                    "each server ({} actix worker(s)) on CPU {}; wrk (1 thread), redis-server and the driver on CPU {}",
                    o.workers, o.server_cpus, o.load_cpus
                ),
            ),
            (
                "one Redis round trip (bare `PING`, median of 2,000)",
                format!(
                    "{} from the servers' CPU {}, {} from the driver beside Redis",
                    latency(self.round_trip.from_servers.as_secs_f64() * 1e6),
                    o.server_cpus,
                    latency(self.round_trip.beside_redis.as_secs_f64() * 1e6)
                ),
            ),
        ];
        for (name, value) in rows {
            let _ = writeln!(out, "| {name} | {value} |");
        }
        out.push('\n');
    }

    /// The command, when, and how long: `` `cargo run …` on <date>: 3 round(s) of … ``.
    pub(crate) fn run_line(&self) -> String {
        format!(
            "`{}` on {}: {} round(s) of {} s per measurement, {} measurements, {} min {} s in all.",
            self.options.command(),
            self.date,
            self.plan.rounds,
            self.plan.duration.as_secs(),
            self.plan.schedule().len(),
            self.elapsed.as_secs() / 60,
            self.elapsed.as_secs() % 60
        )
    }

    pub(crate) fn goals(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "#### Goals\n\n| goal | this run | status |\n|---|---|---|"
        );
        for v in self.verdicts {
            let _ = writeln!(out, "| {} | {} | {} |", v.goal, v.figure, v.status.text());
        }
        out.push('\n');
    }

    fn scenario(&self, out: &mut String, scenario: Scenario) {
        let cells: Vec<_> = self
            .plan
            .cells
            .iter()
            .filter(|c| c.scenario == scenario)
            .collect();
        if cells.is_empty() {
            return;
        }
        let _ = writeln!(out, "#### {}\n", capitalised(scenario.title()));
        let _ = writeln!(
            out,
            "| conns | server | req/s | p50 | p99 | × (a) | × (d) | × (f) | × (h) | scripts/req | Redis cmds/req | new Redis conns/req | server CPU/req | Redis CPU/req | status ≥ 400 | socket errors |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for cell in cells {
            let none = self.results.baseline(*cell, Variant::NoLimiter);
            let floor = self.results.baseline(*cell, Variant::Floor);
            let per_worker = self.results.baseline(*cell, Variant::FloorPerWorker);
            let with_headers = self.results.baseline(*cell, Variant::FloorHeaders);
            let floors = [floor, per_worker, with_headers];
            for row in self.results.in_cell(*cell) {
                let _ = writeln!(out, "{}", table_row(row, none, floors));
            }
        }
        out.push('\n');
    }

    fn exact(&self, out: &mut String) {
        if self.checks.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "#### Exact Redis work per request\n\n\
             Sequential requests, each answered before the next is sent; the flood client has \
             spent its one request and been rejected once by Redis before counting starts.\n\n\
             | server | scenario | requests | 2xx | 429 | other | script calls | Redis commands | new Redis connections |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for c in self.checks {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.target,
                short(c.scenario),
                c.requests,
                c.allowed,
                c.rejected,
                c.other,
                c.redis.script_calls,
                c.redis.commands,
                c.redis.connections
            );
        }
        out.push('\n');
    }

    fn memory(&self, out: &mut String) {
        if self.memory.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "#### Redis memory per active identity\n\n\
             From an empty Redis, N identities each send R requests to one route (this project: \
             the `/memory/*` routes, 1,000 per hour, the stacked one with 100 per 10 minutes (GCRA) besides; (b), (d) and (f): their `/allow` routes, an hour \
             long too); then `MEMORY USAGE <key> SAMPLES 0` of every key, summed, over N.\n\n\
             | server | route | N × R | keys/identity | bytes/identity (`MEMORY USAGE`) | `used_memory` growth/identity |\n\
             |---|---|---:|---:|---:|---:|"
        );
        for m in self.memory {
            let budget = if m.target.variant == Variant::Project {
                Budget::Memory
            } else {
                Budget::Allow
            };
            let _ = writeln!(
                out,
                "| {} | `{}` | {} × {} | {:.2} | {} | {} |",
                m.target,
                route::path(m.target.variant, m.target.route, budget),
                whole(f64::from(m.identities)),
                m.requests_each,
                m.keys_per_identity(),
                whole(m.bytes_per_identity()),
                whole(m.used_memory_per_identity())
            );
        }
        out.push('\n');
    }
}

/// One row of a scenario's table; `floors`: (d), (f) and (h) of its cell.
fn table_row(row: &Row, none: Option<&Row>, floors: [Option<&Row>; 3]) -> String {
    // Measured for every row, servers without Redis too: stray Redis work would show.
    let redis_figure = per_request;
    let [floor, per_worker, with_headers] = floors;
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        row.cell.connections,
        label(row.target),
        whole(row.rps()),
        latency(row.p50_us()),
        latency(row.p99_us()),
        none.map_or("–".to_owned(), |n| ratio(row.throughput_ratio(n))),
        floor.map_or("–".to_owned(), |d| ratio(row.throughput_ratio(d))),
        per_worker.map_or("–".to_owned(), |f| ratio(row.throughput_ratio(f))),
        with_headers.map_or("–".to_owned(), |h| ratio(row.throughput_ratio(h))),
        redis_figure(row.scripts_per_request()),
        redis_figure(row.commands_per_request()),
        redis_figure(row.connections_per_request()),
        latency(row.server_cpu_per_request_us()),
        latency(row.redis_cpu_per_request_us()),
        whole(row.error_statuses as f64),
        whole(row.socket_errors as f64),
    )
}

fn label(target: Target) -> String {
    match target.route {
        Some(_) => target.to_string(),
        None if target.replica => format!(
            "({}) {}: a second server, measured last (A/A)",
            target.letter(),
            target.variant.description()
        ),
        None => format!("({}) {}", target.letter(), target.variant.description()),
    }
}

fn short(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::HotKey => "one client",
        Scenario::Identities => "new client each request",
        Scenario::Flood => "flood (over the limit)",
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
