//! Redis capacity per core: how many checks one Redis core decides for each algorithm and
//! for the stack, beside the floor script (`bench/scripts/floor.lua`: `INCR` + `PEXPIRE`),
//! measured side by side in one run. Two more reference scripts split the distance between
//! them: the floor reading the server's clock first, as the specification has every check do
//! (`floor_clock.lua`), and that counting in a hash field per window, this project's key
//! scheme (`floor_window_field.lua`); neither answers any figure.
//!
//! ```text
//! cargo run --release -p ratelimit-bench --bin redis_capacity              # 3 rounds of 3 s
//! cargo run --release -p ratelimit-bench --bin redis_capacity -- --smoke   # 1 round of 0.5 s
//! cargo run --release -p ratelimit-bench --bin redis_capacity -- --profile # where the time goes
//! ```
//!
//! It starts its own `redis-server` on a free loopback port pinned to CPU 0 (`taskset`) and
//! pins itself to CPU 1. The checks go as a fleet's many connections present them: 8
//! connections, 32 calls in flight on each (pipelined), 10,000 identities in turn, the server's
//! clock. This project's rows are `RedisStore::check` (the real scripts, `EVALSHA`); the
//! floor's row is `EVALSHA` of the floor script over the same kind of connection. Redis's
//! own CPU time (`INFO cpu`, user + system) per check gives the checks one core decides per
//! second; the achieved rate and how busy Redis was show whether the client kept it busy.

use std::{
    env,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use futures_util::future::join_all;
use profile::{Counts, Profiler};
use ratelimit_bench::{Goal, RedisServer};
use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, RedisStore, Store},
    Algorithm, IdentityPart, Limit, Window,
};

mod profile;

const CONNECTIONS: usize = 8;
const IN_FLIGHT_PER_CONNECTION: usize = 32;
const IDENTITIES: usize = 10_000;

/// A script the project's rows are measured against: row label, source.
type Reference = (&'static str, &'static str);

/// The floor first: every ratio is to it.
const REFERENCES: [Reference; 3] = [
    (
        "floor (INCR + PEXPIRE)",
        include_str!("../../../scripts/floor.lua"),
    ),
    (
        "floor + the server's clock (TIME)",
        include_str!("../../../scripts/floor_clock.lua"),
    ),
    (
        "floor + TIME, counted in a field per window (HINCRBY)",
        include_str!("../../../scripts/floor_window_field.lua"),
    ),
];

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// `REFERENCES[i]`.
    Reference(usize),
    Project(&'static str),
}

fn limits(name: &str) -> Vec<Limit> {
    let hour = Window::from_secs(3600);
    match name {
        "fixed_window" => vec![Limit::new(2_000_000_000, hour, Algorithm::FixedWindow)],
        "sliding_window" => vec![Limit::new(2_000_000_000, hour, Algorithm::SlidingWindow)],
        // Each identity is checked about once per 100 ms here: a log of 1,000 per 10 s never
        // fills, and keeps about 100 entries per key.
        "sliding_log" => vec![Limit::new(
            1_000,
            Window::from_secs(10),
            Algorithm::SlidingLog,
        )],
        "gcra" => vec![Limit::new(1_800_000_000, hour, Algorithm::Gcra)],
        _ => vec![
            Limit::new(2_000_000_000, hour, Algorithm::SlidingWindow),
            Limit::new(1_000_000, Window::from_secs(1), Algorithm::Gcra),
        ],
    }
}

const PROJECT_ROWS: [&str; 5] = [
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "gcra",
    "stacked",
];

/// A project row's yardstick (issue 52): the reference script with the same clock read and
/// key layout, answering no figure (its index in [`REFERENCES`]), and the target ratio to it.
fn yardstick(row: &str) -> (usize, f64) {
    match row {
        // A window's count is a field of the limit's hash, as `floor_window_field.lua` keeps it.
        "fixed_window" => (2, 0.92),
        "sliding_window" => (2, 0.80),
        "stacked" => (2, 0.45),
        // One key, no field: `floor_clock.lua`.
        "gcra" => (1, 0.75),
        _ => (1, 0.55),
    }
}

/// One measurement: checks decided, Redis CPU seconds, wall seconds.
#[derive(Clone, Copy, Default)]
struct Measured {
    checks: u64,
    redis_cpu: f64,
    wall: f64,
}

/// Redis's CPU seconds so far (`used_cpu_user` + `used_cpu_sys`).
fn redis_cpu(conn: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(conn)
        .unwrap_or_default();
    info.lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

fn keys() -> Vec<RouteKey> {
    (0..IDENTITIES)
        .map(|i| {
            let ip = format!("10.{}.{}.{}", i / 65536, i / 256 % 256, i % 256);
            RouteKey::new("rl", "GET", "/capacity", &[(IdentityPart::Ip, ip.as_str())])
        })
        .collect()
}

/// Keeps `IN_FLIGHT_PER_CONNECTION` checks in flight on each connection for `duration`.
async fn load(
    variant: Variant,
    duration: Duration,
    stats: &mut redis::Connection,
) -> Result<Measured, String> {
    let keys = keys();
    let deadline = Instant::now() + duration;
    let cpu_before = redis_cpu(stats);
    let started = Instant::now();
    let lanes = (0..CONNECTIONS * IN_FLIGHT_PER_CONNECTION).map(|lane| {
        let keys = &keys;
        async move {
            let connection = lane / IN_FLIGHT_PER_CONNECTION;
            Ok::<u64, String>(match variant {
                Variant::Reference(script) => {
                    reference_lane(connection, script, lane, keys, deadline).await?
                }
                Variant::Project(name) => {
                    project_lane(connection, name, lane, keys, deadline).await?
                }
            })
        }
    });
    let checks: u64 = join_all(lanes)
        .await
        .into_iter()
        .collect::<Result<Vec<u64>, String>>()?
        .into_iter()
        .sum();
    let wall = started.elapsed().as_secs_f64();
    Ok(Measured {
        checks,
        redis_cpu: redis_cpu(stats) - cpu_before,
        wall,
    })
}

thread_local! {
    /// Per connection: the connection and the digest of each of `REFERENCES`.
    static REFERENCE_CONNECTIONS: std::cell::RefCell<Vec<(redis::aio::MultiplexedConnection, Vec<String>)>> = const { std::cell::RefCell::new(Vec::new()) };
    static STORES: std::cell::RefCell<Vec<RedisStore>> = const { std::cell::RefCell::new(Vec::new()) };
}

async fn reference_lane(
    connection: usize,
    script: usize,
    lane: usize,
    keys: &[RouteKey],
    deadline: Instant,
) -> Result<u64, String> {
    let (mut conn, digests) = REFERENCE_CONNECTIONS.with(|c| c.borrow()[connection].clone());
    let (label, _) = REFERENCES[script];
    let mut n = 0u64;
    let mut i = lane;
    while Instant::now() < deadline {
        let key = format!("{}:reference{script}", keys[i % IDENTITIES].as_str());
        let count: u64 = redis::cmd("EVALSHA")
            .arg(&digests[script])
            .arg(1)
            .arg(key)
            .arg(3_600_000)
            .query_async(&mut conn)
            .await
            .map_err(|e| format!("{label}: {e}"))?;
        if count == 0 {
            return Err(format!("{label}: a count of 0"));
        }
        n += 1;
        i += CONNECTIONS * IN_FLIGHT_PER_CONNECTION;
    }
    Ok(n)
}

async fn project_lane(
    connection: usize,
    name: &str,
    lane: usize,
    keys: &[RouteKey],
    deadline: Instant,
) -> Result<u64, String> {
    let store = STORES.with(|s| s.borrow()[connection].clone());
    let limits = limits(name);
    let mut n = 0u64;
    let mut i = lane;
    while Instant::now() < deadline {
        let decision = store
            .check(CheckRequest {
                key: &keys[i % IDENTITIES],
                limits: &limits,
                now_millis: None,
            })
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        if !decision.allowed {
            return Err(format!("{name}: a check was refused"));
        }
        n += 1;
        i += CONNECTIONS * IN_FLIGHT_PER_CONNECTION;
    }
    Ok(n)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), String> {
    let smoke = env::args().any(|a| a == "--smoke");
    let profiled = env::args().any(|a| a == "--profile");
    // Under callgrind Redis runs some 50 times slower: one round, and a warm-up long enough
    // to make every identity's keys.
    let (rounds, duration, warm_up) = if profiled {
        (1, Duration::from_secs(3), Duration::from_secs(3))
    } else if smoke {
        (1, Duration::from_millis(500), Duration::from_millis(300))
    } else {
        (3, Duration::from_secs(3), Duration::from_millis(300))
    };
    // This process on CPU 1, Redis alone on CPU 0.
    let pinned = Command::new("taskset")
        .args(["-p", "-c", "1", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run taskset: {e}"))?;
    if !pinned.success() {
        return Err("taskset -p -c 1 failed".to_owned());
    }
    let dumps = env::temp_dir().join(format!("redis-capacity-profile-{}", std::process::id()));
    let (redis, mut profiler) = if profiled {
        std::fs::create_dir_all(&dumps).map_err(|e| e.to_string())?;
        let redis = RedisServer::start_profiled("redis-capacity", &dumps)?;
        let pid = redis.pid();
        (redis, Some(Profiler::new(dumps.clone(), pid)))
    } else {
        (RedisServer::start("redis-capacity")?, None)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut stats = redis::Client::open(redis.url.as_str())
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())?;
    let variants: Vec<Variant> = (0..REFERENCES.len())
        .map(Variant::Reference)
        .chain(PROJECT_ROWS.iter().map(|name| Variant::Project(name)))
        .collect();
    let mut results: Vec<Vec<Measured>> = vec![Vec::new(); variants.len()];
    let mut profiles: Vec<Counts> = vec![Counts::default(); variants.len()];
    runtime.block_on(async {
        for _ in 0..CONNECTIONS {
            let client = redis::Client::open(redis.url.as_str()).map_err(|e| e.to_string())?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            let mut digests = Vec::new();
            for (_, source) in REFERENCES {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(source)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                digests.push(sha);
            }
            REFERENCE_CONNECTIONS.with(|c| c.borrow_mut().push((conn, digests)));
            let store = RedisStore::builder(redis.url.clone())
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .map_err(|e| e.to_string())?;
            STORES.with(|s| s.borrow_mut().push(store));
        }
        // Warm-up: every script loaded, every key made.
        for variant in &variants {
            load(*variant, warm_up, &mut stats).await?;
        }
        for _ in 0..rounds {
            for (v, variant) in variants.iter().enumerate() {
                if let Some(profiler) = &profiler {
                    profiler.zero()?;
                }
                let measured = load(*variant, duration, &mut stats).await?;
                if let Some(profiler) = &mut profiler {
                    profiles[v] = profiler.dump()?;
                }
                results[v].push(measured);
            }
        }
        Ok::<(), String>(())
    })?;

    if profiled {
        drop(redis);
        let _ = std::fs::remove_dir_all(&dumps);
        print_profile(&variants, &results, &profiles);
        return Ok(());
    }
    let per_core = |m: &Measured| m.checks as f64 / m.redis_cpu.max(1e-9);
    let floor_per_core: Vec<f64> = results[0].iter().map(per_core).collect();
    println!(
        "Redis capacity per core: {rounds} round(s) of {duration:?} per row, {CONNECTIONS} connections x {IN_FLIGHT_PER_CONNECTION} in flight, {IDENTITIES} identities; Redis on CPU 0, this client on CPU 1\n"
    );
    println!("| row | checks/s achieved | Redis busy | Redis CPU per check | checks/s per Redis core | × floor | × its reference | target |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut goals = Vec::new();
    for (v, variant) in variants.iter().enumerate() {
        let name = match variant {
            Variant::Reference(script) => REFERENCES[*script].0,
            Variant::Project(name) => name,
        };
        let rows = &results[v];
        let achieved = median(rows.iter().map(|m| m.checks as f64 / m.wall).collect());
        let busy = median(rows.iter().map(|m| m.redis_cpu / m.wall).collect());
        let cpu_per_check = median(
            rows.iter()
                .map(|m| m.redis_cpu * 1e6 / m.checks.max(1) as f64)
                .collect(),
        );
        let capacity = median(rows.iter().map(per_core).collect());
        // Ratios round by round, then the median.
        let ratio = median(
            rows.iter()
                .zip(&floor_per_core)
                .map(|(m, floor)| per_core(m) / floor)
                .collect(),
        );
        // The project's rows against their own reference, round by round too.
        let against = match variant {
            Variant::Reference(_) => String::from(" | |"),
            Variant::Project(name) => {
                let (reference, target) = yardstick(name);
                let reference_row = row_of(&variants, reference);
                let ratio = median(
                    rows.iter()
                        .zip(&results[reference_row])
                        .map(|(m, r)| per_core(m) / per_core(r))
                        .collect(),
                );
                goals.push(Goal {
                    goal: format!(
                        "Redis checks per core: {name} ≥ ×{target:.2} of {}",
                        reference_label(reference)
                    ),
                    figure: format!("×{ratio:.2}"),
                    met: ratio >= target,
                });
                format!(
                    " ×{ratio:.2} ({}) | ×{target:.2} |",
                    reference_label(reference)
                )
            }
        };
        println!(
            "| {name} | {achieved:.0} | {:.0} % | {cpu_per_check:.2} µs | {capacity:.0} | ×{ratio:.2} |{against}",
            busy * 100.0
        );
    }
    println!();
    for goal in &goals {
        println!("{}", goal.line());
    }
    Ok(())
}

/// The row of `REFERENCES[reference]` among `variants`.
fn row_of(variants: &[Variant], reference: usize) -> usize {
    variants
        .iter()
        .position(|v| *v == Variant::Reference(reference))
        .expect("every reference is measured")
}

/// The instructions of a check, split as [`profile`] says, each row beside its reference.
fn print_profile(variants: &[Variant], results: &[Vec<Measured>], profiles: &[Counts]) {
    println!(
        "Redis instructions per check under callgrind: 1 round of 3 s per row, {CONNECTIONS} connections x {IN_FLIGHT_PER_CONNECTION} in flight, {IDENTITIES} identities\n"
    );
    println!("| row | checks | instructions per check | outside the script | Lua | its commands | number formatting | number parsing | × its reference |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let checks = |v: usize| results[v].iter().map(|m| m.checks).sum::<u64>();
    let per_check = |v: usize| profiles[v].per_check(checks(v));
    for (v, variant) in variants.iter().enumerate() {
        let (name, against) = match variant {
            Variant::Reference(script) => (REFERENCES[*script].0, String::new()),
            Variant::Project(name) => {
                let (reference, _) = yardstick(name);
                let r = row_of(variants, reference);
                // Fewer instructions is more checks: the reference's count over this row's.
                let ratio = per_check(r)[0] / per_check(v)[0].max(1.0);
                (
                    *name,
                    format!("×{ratio:.2} ({})", reference_label(reference)),
                )
            }
        };
        let [total, outside, lua, commands, formatting, parsing] = per_check(v);
        println!(
            "| {name} | {} | {total:.0} | {outside:.0} | {lua:.0} | {commands:.0} | {formatting:.0} | {parsing:.0} | {against} |",
            checks(v)
        );
    }
}

/// A reference script's short name, for the ratio column.
fn reference_label(index: usize) -> &'static str {
    match index {
        0 => "floor",
        1 => "floor_clock",
        _ => "floor_window_field",
    }
}
