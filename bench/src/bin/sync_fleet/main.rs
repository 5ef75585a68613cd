//! Routes that sync (`sync = "100ms"`) measured as the issue states them, in one run:
//!
//! ```text
//! cargo run --release -p ratelimit-bench --bin sync_fleet            # full run (~3 min)
//! cargo run --release -p ratelimit-bench --bin sync_fleet -- --smoke # a few seconds (CI)
//! ```
//!
//! 1. **A fleet on one hot key.** Four `bench_server --sync` processes share one
//!    `redis-server`; a paced client offers `/hot/sync` (100,000 a minute, fixed window,
//!    shares of 166) three times its limit, 5,000 requests a second from one client address,
//!    spread over the four. Each answer is counted in the window (on the clock Redis and the
//!    servers share) it came back in; a full window's admitted count is held to the limit plus
//!    one share per instance, and the script calls Redis ran (`INFO commandstats`) to 0.01 per
//!    request.
//! 2. **Throughput against actix-governor.** One `bench_server` each: this project's
//!    `/allow/sync` (a limit no run reaches, decided from shares) without rate-limit headers
//!    (the answer actix-governor gives) and with them, actix-governor's `/allow` (in-memory
//!    GCRA) and this project's `/allow/fixed_window` (a script call per request), each driven
//!    by wrk on one hot key, in turns, for several rounds, and actix-governor once more at
//!    the end of each round (its A/A noise); the medians side by side, as ratios.

#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/http_probe.rs"]
mod http_probe;
#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/pinned_process.rs"]
mod pinned_process;
#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/redis_server.rs"]
mod redis_server;
#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/redis_stats.rs"]
mod redis_stats;
#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/server_binary.rs"]
mod server_binary;
#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/work_dir.rs"]
mod work_dir;
#[allow(dead_code, reason = "shared with http_bench, which uses all of it")]
#[path = "../http_bench/wrk.rs"]
mod wrk;

use std::{
    collections::BTreeMap,
    path::Path,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use http_probe::HttpProbe;
use pinned_process::{PinnedProcess, Readiness};
use ratelimit_bench::Goal;
use redis_server::RedisServer;
use redis_stats::RedisStats;
use work_dir::WorkDir;
use wrk::{Clients, Wrk};

/// The hot route's limit and window, as `bench_server` declares them.
const LIMIT: u64 = 100_000;
const WINDOW_MS: u64 = 60_000;
/// Its share: `LIMIT × 100 ms ÷ WINDOW_MS`.
const SHARE: u64 = LIMIT * 100 / WINDOW_MS;
const INSTANCES: usize = 4;
/// Connections per instance, each sending at its own steady pace.
const CONNECTIONS: usize = 25;

struct Options {
    smoke: bool,
    rounds: usize,
    seconds: u64,
    server_cpus: String,
    load_cpus: String,
}

const USAGE: &str = "usage: sync_fleet [--smoke] [--rounds N] [--seconds N] [--server-cpus LIST] [--load-cpus LIST]";

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut options = Options {
            smoke: false,
            rounds: 3,
            seconds: 5,
            server_cpus: "0".to_owned(),
            load_cpus: "1".to_owned(),
        };
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
            match flag.as_str() {
                "--smoke" => options.smoke = true,
                "--rounds" => options.rounds = number(&flag, &value()?)?,
                "--seconds" => options.seconds = number(&flag, &value()?)? as u64,
                "--server-cpus" => options.server_cpus = value()?,
                "--load-cpus" => options.load_cpus = value()?,
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if options.smoke {
            options.rounds = 1;
            options.seconds = 1;
        }
        Ok(options)
    }
}

fn number(flag: &str, text: &str) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{flag}` takes a positive whole number, not `{text}`"))
}

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("sync_fleet: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut work_dir = match WorkDir::create() {
        Ok(dir) => dir,
        Err(message) => {
            eprintln!("sync_fleet: {message}");
            return ExitCode::FAILURE;
        }
    };
    match run(&options, work_dir.path()) {
        // A smoke run checks that everything runs and answers as its limits say, not the
        // targets (its windows are not whole, its rounds too short).
        Ok(met) if met || options.smoke => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!("sync_fleet: a target was missed (see above)");
            ExitCode::FAILURE
        }
        Err(message) => {
            work_dir.keep();
            eprintln!(
                "sync_fleet: {message} (logs in {})",
                work_dir.path().display()
            );
            ExitCode::FAILURE
        }
    }
}

/// Starts `bench_server` with `args` on the server CPUs.
fn server(
    name: &str,
    options: &Options,
    args: &[&str],
    dir: &Path,
) -> Result<PinnedProcess, String> {
    let binary = server_binary::locate()?;
    let all: Vec<String> = ["--port", "0", "--workers", "1"]
        .iter()
        .chain(args)
        .map(|s| (*s).to_owned())
        .collect();
    PinnedProcess::start(
        name,
        &options.server_cpus,
        &binary,
        &all,
        Readiness::Announced,
        &dir.join(format!("{name}.log")),
    )
}

fn run(options: &Options, dir: &Path) -> Result<bool, String> {
    let redis = RedisServer::start(&options.load_cpus, dir)?;
    let url = redis.url();

    // 1. The fleet.
    let mut fleet = Vec::new();
    for i in 0..INSTANCES {
        let name = format!("project-sync-{i}");
        let args = ["--variant", "project", "--sync", "--redis", url.as_str()];
        fleet.push(server(&name, options, &args, dir)?);
    }
    let ports: Vec<u16> = fleet.iter().map(PinnedProcess::port).collect();
    let mut stats = RedisStats::connect(&url)?;
    let before = stats.counters()?;
    let offered_per_second = 3 * LIMIT * 1000 / WINDOW_MS;
    let length = if options.smoke {
        Duration::from_secs(3)
    } else {
        // Through the end of the next whole window.
        let now = epoch_ms();
        let next = now - now % WINDOW_MS + WINDOW_MS;
        Duration::from_millis(next + WINDOW_MS - now + 500)
    };
    println!(
        "## sync: a fleet of {INSTANCES} on one hot key\n\n`/hot/sync`: {LIMIT} per minute (fixed window), `sync = \"100ms\"` (shares of {SHARE}), offered {offered_per_second} requests a second (3 × the limit) for {:.0} s over {} connections\n",
        length.as_secs_f64(),
        INSTANCES * CONNECTIONS
    );
    let answers = offer(&ports, offered_per_second, length)?;
    let calls = stats.counters()?.since(before).script_calls;
    drop(fleet);
    let sent: u64 = answers
        .values()
        .map(|w| w.admitted + w.refused + w.other)
        .sum();
    let per_request = calls as f64 / sent.max(1) as f64;
    let bound = LIMIT + LIMIT / 100 + INSTANCES as u64 * SHARE;
    println!("| window (start, s) | whole | admitted | refused | other | bound |");
    println!("|---|---|---:|---:|---:|---:|");
    let first = answers.keys().next().copied();
    let last = answers.keys().last().copied();
    let mut whole_windows = Vec::new();
    for (start, window) in &answers {
        // Only a window the run covered from its start to its end is whole.
        let whole = Some(*start) != first && Some(*start) != last;
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            start / 1000,
            if whole { "yes" } else { "no" },
            window.admitted,
            window.refused,
            window.other,
            if whole {
                bound.to_string()
            } else {
                "-".to_owned()
            }
        );
        if whole {
            whole_windows.push(window.admitted);
        }
    }
    let other: u64 = answers.values().map(|w| w.other).sum();
    if other > 0 {
        return Err(format!(
            "{other} answers of the fleet were neither 200 nor 429 (see the servers' logs)"
        ));
    }
    println!(
        "\n{sent} requests, {calls} script calls: {per_request:.4} per request (target ≤ 0.01)\n"
    );
    let mut goals = vec![
        Goal {
            goal: format!(
                "`sync`, {INSTANCES} instances on one hot key of {LIMIT} a minute offered 3×: admitted in a whole window ≤ the limit + 1 % + a share each"
            ),
            figure: if whole_windows.is_empty() {
                "no whole window".to_owned()
            } else {
                let admitted: Vec<String> = whole_windows.iter().map(u64::to_string).collect();
                format!("{} (bound {bound})", admitted.join(", "))
            },
            met: !whole_windows.is_empty() && whole_windows.iter().all(|a| *a <= bound),
        },
        Goal {
            goal: "`sync`: Redis script calls per request ≤ 0.01".to_owned(),
            figure: format!("{per_request:.4}"),
            met: per_request <= 0.01,
        },
    ];

    // 2. Throughput.
    let wrk = Wrk::new(&options.load_cpus, dir)?;
    // The first is the target's: actix-governor answers without rate-limit headers, so
    // this project's route that syncs is measured answering the same; with them, and a
    // script call per request, beside it.
    let sync = ["--variant", "project", "--sync", "--redis", url.as_str()];
    let targets = [
        (
            "this project, `sync`, no rate-limit headers (the same answer)",
            [&sync[..], &["--no-headers"]].concat(),
            "/allow/sync",
        ),
        (
            "actix-governor (in-memory GCRA)",
            vec!["--variant", "governor"],
            "/allow",
        ),
        (
            "this project, `sync`, five rate-limit headers",
            sync.to_vec(),
            "/allow/sync",
        ),
        (
            "this project, fixed window, a script call per request",
            vec![
                "--variant",
                "project",
                "--route",
                "fixed_window",
                "--redis",
                url.as_str(),
            ],
            "/allow/fixed_window",
        ),
        // Measured again last: the noise of the yardstick itself (A/A).
        (
            "actix-governor again (A/A)",
            vec!["--variant", "governor"],
            "/allow",
        ),
    ];
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let servers: Vec<PinnedProcess> = targets
        .iter()
        .enumerate()
        .map(|(i, (_, args, _))| server(&format!("throughput-{i}"), options, args, dir))
        .collect::<Result<_, _>>()?;
    for _ in 0..options.rounds {
        for (i, ((_, _, path), process)) in targets.iter().zip(&servers).enumerate() {
            let url = format!("http://127.0.0.1:{}{path}", process.port());
            let result = wrk.run(&url, Clients::One, 64, Duration::from_secs(options.seconds))?;
            if result.error_statuses + result.socket_errors > 0 {
                return Err(format!(
                    "{path}: {} error statuses, {} socket errors",
                    result.error_statuses, result.socket_errors
                ));
            }
            figures[i].push(result.requests_per_second());
        }
    }
    let governor = median(&figures[1]);
    println!(
        "## sync: throughput on one hot key, c64, median of {} rounds of {} s\n",
        options.rounds, options.seconds
    );
    println!("| server | requests/s | × actix-governor |");
    println!("|---|---:|---:|");
    for ((name, _, _), values) in targets.iter().zip(&figures) {
        let value = median(values);
        println!("| {name} | {value:.0} | ×{:.2} |", value / governor);
    }
    let ratio = median(&figures[0]) / governor;
    let noise = median(&figures[targets.len() - 1]) / governor;
    println!(
        "\n`sync` (the same answer) ÷ actix-governor ×{ratio:.2} (target ≥ ×0.90); A/A ×{noise:.2}"
    );
    goals.push(Goal {
        goal: "`sync` without rate-limit headers ≥ ×0.90 actix-governor (one hot key, c64)"
            .to_owned(),
        figure: format!("×{ratio:.2}; noise: actix-governor again ×{noise:.2}"),
        met: ratio >= 0.9,
    });
    println!();
    for goal in &goals {
        println!("{}", goal.line());
    }
    Ok(goals.iter().all(|goal| goal.met))
}

/// What the fleet answered in one window.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    admitted: u64,
    refused: u64,
    other: u64,
}

/// `per_second` requests a second for `length`, from one client address, spread evenly over
/// [`CONNECTIONS`] connections to each of `ports`; the answers by the window they came in.
fn offer(
    ports: &[u16],
    per_second: u64,
    length: Duration,
) -> Result<BTreeMap<u64, Window>, String> {
    let answers = Arc::new(Mutex::new(BTreeMap::<u64, Window>::new()));
    let connections = ports.len() * CONNECTIONS;
    let period = Duration::from_secs_f64(connections as f64 / per_second as f64);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + length;
    let threads: Vec<_> = (0..connections)
        .map(|i| {
            let port = ports[i % ports.len()];
            let answers = Arc::clone(&answers);
            // Each connection starts at its own offset, so the fleet's load is even.
            let offset = period.mul_f64(i as f64 / connections as f64);
            std::thread::spawn(move || -> Result<(), String> {
                let mut probe = HttpProbe::connect(port)?;
                let mut next = start + offset;
                while next < end {
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let status = probe.get("/hot/sync", "198.18.255.1")?;
                    let window = epoch_ms() / WINDOW_MS * WINDOW_MS;
                    let mut answers = answers.lock().expect("no panic while held");
                    let counted = answers.entry(window).or_default();
                    match status {
                        200 => counted.admitted += 1,
                        429 => counted.refused += 1,
                        _ => counted.other += 1,
                    }
                    next += period;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "a client thread panicked")??;
    }
    let answers = answers.lock().expect("threads joined").clone();
    Ok(answers)
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}
