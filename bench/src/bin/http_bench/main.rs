//! Side-by-side HTTP benchmark of this project against no limiter, actix-limitation,
//! actix-governor and a one-`EVALSHA` floor, all in one run:
//!
//! ```text
//! cargo run --release -p ratelimit-bench              # full run and the other two, rewrites BENCHMARKS.md (~30 min)
//! cargo run --release -p ratelimit-bench -- --smoke   # every server once, 2 s each (CI)
//! ```
//!
//! It starts its own `redis-server` on a free loopback port, one `bench_server` per variant
//! pinned to the server CPUs, and drives them with wrk pinned to the load CPUs; see
//! `options::USAGE` and BENCHMARKS.md. A full run ends with `redis_capacity` and
//! `sync_fleet` (`companions`), whose goals join its own.

mod benchmarks_file;
mod companions;
mod exact_checks;
mod goals;
mod http_probe;
mod machine;
mod memory;
mod numbers;
mod options;
mod pinned_process;
mod plan;
mod prerequisites;
mod process_cpu;
mod redis_server;
mod redis_stats;
mod report;
mod results;
mod rig;
mod round_trip;
mod section;
mod server_binary;
mod servers;
mod work_dir;
mod wrk;

use std::{
    process::{Command, ExitCode},
    time::{Duration, Instant},
};

use machine::Machine;
use numbers::whole;
use options::Options;
use plan::{Cell, Plan, Scenario};
use ratelimit_bench::Variant;
use redis_server::RedisServer;
use redis_stats::RedisStats;
use report::Report;
use results::Results;
use rig::{Rig, Sample};
use round_trip::RoundTrips;
use servers::Servers;
use work_dir::WorkDir;

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("http_bench: {message}");
            }
            eprintln!("{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    let mut work_dir = match WorkDir::create() {
        Ok(dir) => dir,
        Err(message) => {
            eprintln!("http_bench: {message}");
            return ExitCode::FAILURE;
        }
    };
    match run(&options, &work_dir) {
        Ok(Health::Sound) => ExitCode::SUCCESS,
        Ok(Health::Faulty(problems)) => {
            work_dir.keep();
            eprintln!(
                "http_bench: the run is not sound (logs in {}):\n  {}",
                work_dir.path().display(),
                problems.join("\n  ")
            );
            ExitCode::FAILURE
        }
        Err(message) => {
            work_dir.keep();
            eprintln!(
                "http_bench: {message}\n(logs in {})",
                work_dir.path().display()
            );
            ExitCode::FAILURE
        }
    }
}

/// Whether every server stayed up and answered as its route's limit says.
enum Health {
    Sound,
    Faulty(Vec<String>),
}

fn run(options: &Options, work_dir: &WorkDir) -> Result<Health, String> {
    let started = Instant::now();
    prerequisites::check()?;
    prerequisites::pin_self(&options.load_cpus)?;
    let server_binary = server_binary::locate()?;
    let redis = RedisServer::start(&options.load_cpus, work_dir.path())?;
    let mut stats = RedisStats::connect(&redis.url())?;
    let machine = Machine::describe(stats.version()?);
    // A smoke run checks that everything runs and answers as its limits say, also in CI on
    // a shared machine: the store's timeout is a second there, so a stall of the machine
    // does not turn allowed requests into the fail-closed routes' 503s. A full run measures
    // the default (50 ms).
    let servers = Servers::start(
        &server_binary,
        &options.server_cpus,
        options.workers,
        &redis.url(),
        options.smoke.then_some(1_000),
        work_dir.path(),
    )?;
    let round_trip = RoundTrips {
        beside_redis: round_trip::median_ping(&mut stats, 2_000)?,
        from_servers: round_trip::median_ping_from(&options.server_cpus, &redis.url(), 2_000)?,
    };
    let mut rig = Rig {
        servers,
        redis_pid: redis.pid(),
        stats,
        wrk: wrk::Wrk::new(&options.load_cpus, work_dir.path())?,
    };
    let plan = if options.smoke {
        Plan::smoke(options.duration)
    } else {
        Plan::full(options.rounds, options.duration)
    };
    eprintln!(
        "http_bench: redis-server {} at {}, servers on CPU {}, wrk on CPU {}; about {} s of load",
        machine.redis,
        redis.url(),
        options.server_cpus,
        options.load_cpus,
        plan.estimated().as_secs()
    );

    let exact_requests = if options.smoke { 200 } else { 1_000 };
    eprintln!("http_bench: exact Redis work, {exact_requests} sequential requests per route");
    let checks = exact_checks::run(&mut rig, exact_requests)?;

    eprintln!("http_bench: warming every route up (1 s, 64 connections)");
    let warm_up = Cell {
        scenario: Scenario::HotKey,
        connections: 64,
    };
    for target in &plan.targets {
        rig.measure(0, warm_up, *target, Duration::from_secs(1))?;
    }

    let samples = measure(&mut rig, &plan)?;
    let results = Results::new(&plan, &samples);

    let (identities, requests_each) = if options.smoke { (100, 2) } else { (1_000, 10) };
    eprintln!(
        "http_bench: Redis memory, {identities} identities × {requests_each} requests per route"
    );
    let memory = memory::run(&mut rig, identities, requests_each)?;
    let exited = rig.servers.exited();
    // The other benchmarks have the machine to themselves.
    drop(rig);
    drop(redis);

    let mut verdicts = goals::evaluate(&results, &checks);
    if !options.smoke && options.companions {
        verdicts.extend(companions::goals());
    }
    let report = Report {
        options,
        plan: &plan,
        machine: &machine,
        date: today(),
        elapsed: started.elapsed(),
        round_trip,
        results: &results,
        checks: &checks,
        memory: &memory,
        verdicts: &verdicts,
    };
    let text = report.render();
    println!("{text}");

    let mut problems = problems(&results, &checks, started.elapsed());
    for target in exited {
        problems.push(format!("the `{target}` server exited during the run"));
    }
    if !problems.is_empty() {
        // Figures of a run that is not sound are printed, never published.
        if let Some(path) = &options.out {
            eprintln!(
                "http_bench: {} left as it was: the run is not sound",
                path.display()
            );
        }
        return Ok(Health::Faulty(problems));
    }
    if let Some(path) = &options.out {
        benchmarks_file::write_section(path, &report.section())?;
        eprintln!("http_bench: wrote the results into {}", path.display());
    }
    Ok(Health::Sound)
}

/// Runs the plan's schedule, printing each figure as it comes.
fn measure(rig: &mut Rig, plan: &Plan) -> Result<Vec<Sample>, String> {
    let schedule = plan.schedule();
    let mut samples = Vec::with_capacity(schedule.len());
    for (i, (round, cell, target)) in schedule.iter().enumerate() {
        let sample = rig.measure(*round, *cell, *target, plan.duration)?;
        eprintln!(
            "[{:>3}/{}] round {} {:?} c{:<3} {:<22} {:>9} req/s  p50 {:>6} µs  {:.3} scripts/req",
            i + 1,
            schedule.len(),
            round + 1,
            cell.scenario,
            cell.connections,
            target.to_string(),
            whole(sample.wrk.requests_per_second()),
            sample.wrk.p50_us,
            sample.redis.script_calls as f64 / sample.wrk.requests.max(1) as f64
        );
        samples.push(sample);
    }
    Ok(samples)
}

/// What would make the figures meaningless: refused or failed requests where every request
/// should pass, passed ones where a limit must refuse, socket errors, a round in which no
/// request completed, statuses no limit explains.
fn problems(
    results: &Results,
    checks: &[exact_checks::ExactCheck],
    elapsed: Duration,
) -> Vec<String> {
    // The flood limits allow one request an hour, a fixed or sliding window one more each
    // time the clock passes a full hour: a run across HH:00 is not unsound for its extra pass.
    let flood_passes = 1 + elapsed.as_secs().div_ceil(3600);
    let mut problems = Vec::new();
    for row in &results.rows {
        let at = |what: &str| {
            format!(
                "{} at c{} ({}): {what}",
                row.target,
                row.cell.connections,
                row.cell.scenario.title()
            )
        };
        if row.cell.scenario.allows() && row.error_statuses > 0 {
            problems.push(at(&format!(
                "{} responses with a status of 400 or more",
                row.error_statuses
            )));
        }
        // The flood client is over every limit from its first request on (the requests its
        // limit allows, one per clock hour the run spans, may fall in this row): a limiter's
        // row that passes more is not measuring its refusals.
        let refuses = matches!(row.target.variant, Variant::Project | Variant::AnswerOnly);
        if !row.cell.scenario.allows()
            && refuses
            && row.requests.saturating_sub(row.error_statuses) > flood_passes
        {
            problems.push(at(&format!(
                "{} of {} flood requests were not refused",
                row.requests - row.error_statuses,
                row.requests
            )));
        }
        if row.socket_errors > 0 {
            problems.push(at(&format!("{} socket errors", row.socket_errors)));
        }
        let empty = row.requests_by_round.iter().filter(|n| **n == 0).count();
        if empty > 0 {
            problems.push(at(&format!(
                "no request completed in {empty} of {} rounds",
                row.requests_by_round.len()
            )));
        }
    }
    for check in checks {
        let unexpected = if check.scenario.allows() {
            check.rejected + check.other
        } else {
            check.allowed + check.other
        };
        if unexpected > 0 {
            problems.push(format!(
                "{} answered {unexpected} of {} sequential requests ({:?}) otherwise than its limit says ({} 2xx, {} 429, {} other)",
                check.target, check.requests, check.scenario, check.allowed, check.rejected, check.other
            ));
        }
    }
    problems
}

fn today() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|| "unknown date".to_owned())
}

#[cfg(test)]
mod tests {
    use ratelimit_bench::ProjectRoute;

    use super::*;
    use crate::{exact_checks::ExactCheck, plan::Target, redis_stats::Counters, results::Row};

    fn row(scenario: Scenario, variant: Variant, requests: &[u64], error_statuses: u64) -> Row {
        let cell = Cell {
            scenario,
            connections: 64,
        };
        let target = Target {
            variant,
            route: (variant == Variant::Project).then_some(ProjectRoute::Gcra),
            replica: false,
            bare: false,
        };
        let rps: Vec<f64> = requests.iter().map(|n| *n as f64).collect();
        Row {
            requests_by_round: requests.to_vec(),
            requests: requests.iter().sum(),
            error_statuses,
            ..Row::for_test(cell, target, &rps, &vec![1.0; requests.len()])
        }
    }

    fn check(scenario: Scenario, statuses: (u64, u64, u64)) -> ExactCheck {
        ExactCheck {
            target: Target::of(Variant::Floor),
            scenario,
            requests: statuses.0 + statuses.1 + statuses.2,
            redis: Counters::default(),
            allowed: statuses.0,
            rejected: statuses.1,
            other: statuses.2,
        }
    }

    /// A round with no request, a limiter passing its flood, and refusals in the allowed
    /// sequential checks each make a run unsound.
    #[test]
    fn runs_whose_figures_mean_nothing_are_not_sound() {
        let minutes = |m: u64| Duration::from_secs(60 * m);
        let problems = |rows: Vec<Row>, checks: &[ExactCheck]| {
            problems(&Results { rows }, checks, minutes(25))
        };
        let sound = vec![
            row(Scenario::HotKey, Variant::Project, &[100, 120], 0),
            row(Scenario::Flood, Variant::Project, &[100, 120], 219),
            row(Scenario::Flood, Variant::NoLimiter, &[100, 120], 0),
        ];
        let checks = [
            check(Scenario::HotKey, (10, 0, 0)),
            check(Scenario::Flood, (0, 10, 0)),
        ];
        assert_eq!(problems(sound, &checks), Vec::<String>::new());

        let stalled = vec![row(Scenario::HotKey, Variant::NoLimiter, &[100, 0], 0)];
        assert_eq!(problems(stalled, &[]).len(), 1);
        let passed_flood = vec![row(Scenario::Flood, Variant::Project, &[100, 120], 200)];
        assert_eq!(problems(passed_flood, &[]).len(), 1);
        // A run across a full hour: a fixed window lets one more request through after it,
        // so two passes in a row are fine, three are not.
        let across_the_hour = vec![row(Scenario::Flood, Variant::Project, &[100, 120], 218)];
        assert_eq!(problems(across_the_hour, &[]), Vec::<String>::new());
        let three = vec![row(Scenario::Flood, Variant::Project, &[100, 120], 217)];
        assert_eq!(problems(three, &[]).len(), 1);
        let long_run = vec![row(Scenario::Flood, Variant::Project, &[100, 120], 217)];
        assert_eq!(
            super::problems(&Results { rows: long_run }, &[], minutes(61)),
            Vec::<String>::new()
        );
        let refused = vec![row(Scenario::Identities, Variant::Floor, &[100], 1)];
        assert_eq!(problems(refused, &[]).len(), 1);
        for check in [
            check(Scenario::Identities, (9, 1, 0)),
            check(Scenario::Flood, (1, 9, 0)),
            check(Scenario::HotKey, (9, 0, 1)),
        ] {
            assert_eq!(problems(Vec::new(), &[check]).len(), 1, "{check:?}");
        }
    }
}
