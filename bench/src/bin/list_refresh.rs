//! What a long allow or deny list in the Redis overrides hash costs Redis, for a fleet: four
//! limiters (as four instances) read one hash of 100,000 deny entries every 500 ms.
//!
//! ```text
//! cargo run --release -p ratelimit-bench --bin list_refresh              # 100,000 entries
//! cargo run --release -p ratelimit-bench --bin list_refresh -- --smoke   # 10,000, shorter
//! ```
//!
//! It starts its own `redis-server` pinned to CPU 0, pins itself to CPU 1, and prints, from
//! Redis's own `INFO commandstats` and `SLOWLOG` (every command logged): the Redis time a
//! refresh costs per instance while the hash is unchanged (`GET` of its version and `HLEN`),
//! the Redis time of one whole read after a change (`HSCAN` in pieces) and the longest single
//! command of it, beside one `HGETALL` of the same hash, the read every refresh made before.
//! It exits 1 when an unchanged refresh reads the hash, or a change is not read by every
//! instance.

use std::{
    collections::BTreeMap,
    env, thread,
    time::{Duration, Instant},
};

use ratelimit_bench::RedisServer;
use ratelimit_runtime::{
    overrides::{version_key, Overrides},
    store::MemoryStore,
    RateLimiter,
};

const INSTANCES: usize = 4;
const REFRESH: Duration = Duration::from_millis(500);

/// `INFO commandstats`: calls and microseconds by command.
fn commandstats(conn: &mut redis::Connection) -> BTreeMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

fn stat(stats: &BTreeMap<String, (u64, u64)>, command: &str) -> (u64, u64) {
    stats.get(command).copied().unwrap_or_default()
}

/// The longest duration (µs) `SLOWLOG` holds for `command`.
fn longest(conn: &mut redis::Connection, command: &str) -> u64 {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(conn)
        .unwrap_or_default();
    entries
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let micros = match fields.get(2)? {
                redis::Value::Int(us) => u64::try_from(*us).ok()?,
                _ => return None,
            };
            let redis::Value::Array(args) = fields.get(3)? else {
                return None;
            };
            let name = match args.first()? {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).to_lowercase(),
                _ => return None,
            };
            (name == command).then_some(micros)
        })
        .max()
        .unwrap_or(0)
}

fn reset(conn: &mut redis::Connection) -> redis::RedisResult<()> {
    redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(conn)?;
    redis::cmd("SLOWLOG").arg("RESET").query::<()>(conn)
}

/// Waits until `HSCAN` calls have stopped growing for two refreshes and reached `at_least`.
fn until_read(
    conn: &mut redis::Connection,
    at_least: u64,
    within: Duration,
) -> Result<u64, String> {
    let started = Instant::now();
    let mut last = (u64::MAX, Instant::now());
    loop {
        let scans = stat(&commandstats(conn), "hscan").0;
        if scans != last.0 {
            last = (scans, Instant::now());
        } else if scans >= at_least && last.1.elapsed() > 2 * REFRESH {
            return Ok(scans);
        }
        if started.elapsed() > within {
            return Err(format!(
                "the hash was not read: {scans} HSCANs in {within:?}"
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn main() -> Result<(), String> {
    let smoke = env::args().any(|a| a == "--smoke");
    let (entries, quiet) = if smoke {
        (10_000u32, Duration::from_secs(2))
    } else {
        (100_000u32, Duration::from_secs(10))
    };
    // This process (the four instances' reading threads) on CPU 1, Redis alone on CPU 0:
    // a command's time in Redis's own figures is then its own.
    let pinned = std::process::Command::new("taskset")
        .args(["-p", "-c", "1", &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run taskset: {e}"))?;
    if !pinned.success() {
        return Err("taskset -p -c 1 failed".to_owned());
    }
    let redis = RedisServer::start("list-refresh")?;
    let mut conn = redis.connection().map_err(|e| e.to_string())?;
    let base = u32::from(std::net::Ipv4Addr::new(100, 64, 0, 0));
    for chunk in (0..entries).collect::<Vec<_>>().chunks(20_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            let address = std::net::Ipv4Addr::from(base + i);
            pipe.hset("rl:overrides", format!("deny ip {address}"), "")
                .ignore();
        }
        pipe.query::<()>(&mut conn).map_err(|e| e.to_string())?;
    }
    for (key, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "1000000"),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(key)
            .arg(value)
            .query::<()>(&mut conn)
            .map_err(|e| e.to_string())?;
    }

    // One HGETALL: what every refresh of every instance read before.
    reset(&mut conn).map_err(|e| e.to_string())?;
    let _: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg("rl:overrides")
        .query(&mut conn)
        .map_err(|e| e.to_string())?;
    let hgetall_us = stat(&commandstats(&mut conn), "hgetall").1;

    // Four instances read it once at start.
    let started = Instant::now();
    let limiters: Vec<RateLimiter> = (0..INSTANCES)
        .map(|_| {
            RateLimiter::new(MemoryStore::new())
                .overrides(Overrides::new().redis(redis.url.as_str()).refresh(REFRESH))
        })
        .collect();
    let first = until_read(&mut conn, 1, Duration::from_secs(60))?;
    let first_read = started.elapsed();

    // Unchanged: each refresh reads the version and the length.
    reset(&mut conn).map_err(|e| e.to_string())?;
    thread::sleep(quiet);
    let stats = commandstats(&mut conn);
    let (gets, get_us) = stat(&stats, "get");
    let (hlens, hlen_us) = stat(&stats, "hlen");
    let unchanged_scans = stat(&stats, "hscan").0;
    let longest_quiet = longest(&mut conn, "get").max(longest(&mut conn, "hlen"));

    // Changed: every instance reads the hash again, in pieces.
    reset(&mut conn).map_err(|e| e.to_string())?;
    redis::cmd("INCR")
        .arg(version_key("rl:overrides"))
        .query::<u64>(&mut conn)
        .map_err(|e| e.to_string())?;
    let per_read = first / INSTANCES as u64;
    let scans = until_read(
        &mut conn,
        per_read * INSTANCES as u64,
        Duration::from_secs(60),
    )?;
    let stats = commandstats(&mut conn);
    let scan_us = stat(&stats, "hscan").1;
    let longest_scan = longest(&mut conn, "hscan");
    drop(limiters);

    let refreshes = gets.max(1) as f64;
    let per_second = INSTANCES as f64 / REFRESH.as_secs_f64();
    println!("{entries} deny entries, {INSTANCES} instances, a refresh every {REFRESH:?} (first read of all four: {first_read:.1?})\n");
    println!("| the hash | Redis time per instance and refresh | longest single command | Redis time per second, {INSTANCES} instances |");
    println!("|---|---:|---:|---:|");
    println!(
        "| unchanged: `GET` version + `HLEN` ({refreshes:.0} refreshes) | {:.1} µs | {longest_quiet} µs | {:.3} ms |",
        (get_us + hlen_us) as f64 / refreshes,
        (get_us + hlen_us) as f64 / refreshes * per_second / 1000.0
    );
    println!(
        "| changed: one whole read, {} `HSCAN`s | {:.2} ms | {longest_scan} µs | once per change |",
        scans / INSTANCES as u64,
        scan_us as f64 / INSTANCES as f64 / 1000.0
    );
    println!(
        "| before: `HGETALL` every refresh | {:.2} ms | {hgetall_us} µs | {:.1} ms |",
        hgetall_us as f64 / 1000.0,
        hgetall_us as f64 * per_second / 1000.0
    );
    if unchanged_scans > 0 {
        return Err(format!(
            "an unchanged hash was read: {unchanged_scans} HSCANs"
        ));
    }
    // Each instance may be between its `GET` and its `HLEN` when the counters are read.
    if gets == 0 || gets.abs_diff(hlens) > INSTANCES as u64 {
        return Err(format!(
            "{gets} GETs and {hlens} HLENs: a refresh reads both"
        ));
    }
    Ok(())
}
