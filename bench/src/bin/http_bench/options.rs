//! The command line of `http_bench`.

use std::{path::PathBuf, time::Duration};

pub const USAGE: &str = "\
usage: http_bench [--smoke] [--rounds <n>] [--duration <seconds>] [--workers <n>]
                  [--server-cpus <list>] [--load-cpus <list>] [--out <file> | --no-write]
                  [--http-only]

  --smoke          each server, one scenario (hot key, 64 connections), 2 s, one round;
                   exits 1 when a server fails or an allowed request is refused
  --rounds         interleaved rounds of the full run (default 3)
  --duration       seconds of load per measurement (default 2)
  --workers        actix workers of every server (default 1)
  --server-cpus    CPUs the servers are pinned to, a taskset list (default 0)
  --load-cpus      CPUs wrk and redis-server are pinned to (default 1)
  --out            the file whose generated section is rewritten (default BENCHMARKS.md at
                   the workspace root; a smoke run writes nothing unless --out is given)
  --no-write       print only
  --http-only      a full run without redis_capacity and sync_fleet after it (whose goals
                   join the table otherwise; ~5 min)";

/// How a run is shaped.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub smoke: bool,
    pub rounds: usize,
    pub duration: Duration,
    pub workers: usize,
    pub server_cpus: String,
    pub load_cpus: String,
    /// Where to write the results section, if anywhere.
    pub out: Option<PathBuf>,
    /// Whether a full run ends with `redis_capacity` and `sync_fleet`.
    pub companions: bool,
}

/// BENCHMARKS.md beside the workspace's Cargo.toml.
fn default_out() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../BENCHMARKS.md"))
}

impl Options {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut smoke = false;
        let mut rounds = None;
        let mut duration = None;
        let mut workers = 1;
        let mut server_cpus = "0".to_owned();
        let mut load_cpus = "1".to_owned();
        let mut out = None;
        let mut write = true;
        let mut companions = true;
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
            match flag.as_str() {
                "--smoke" => smoke = true,
                "--rounds" => rounds = Some(positive(&flag, &value()?)?),
                "--duration" => {
                    duration = Some(Duration::from_secs(positive(&flag, &value()?)? as u64))
                }
                "--workers" => workers = positive(&flag, &value()?)?,
                "--server-cpus" => server_cpus = value()?,
                "--load-cpus" => load_cpus = value()?,
                "--out" => out = Some(PathBuf::from(value()?)),
                "--no-write" => write = false,
                "--http-only" => companions = false,
                "--help" | "-h" => return Err(String::new()),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        let out = match (write, out) {
            (false, _) => None,
            (true, Some(path)) => Some(path),
            (true, None) => (!smoke).then(default_out),
        };
        Ok(Options {
            smoke,
            rounds: if smoke { 1 } else { rounds.unwrap_or(3) },
            duration: duration.unwrap_or(Duration::from_secs(2)),
            workers,
            server_cpus,
            load_cpus,
            out,
            companions,
        })
    }

    /// The command line that reproduces this run, for the report.
    pub fn command(&self) -> String {
        let mut command = "cargo run --release -p ratelimit-bench --".to_owned();
        if self.smoke {
            command.push_str(" --smoke");
        } else {
            command.push_str(&format!(" --rounds {}", self.rounds));
        }
        command.push_str(&format!(
            " --duration {} --workers {} --server-cpus {} --load-cpus {}",
            self.duration.as_secs(),
            self.workers,
            self.server_cpus,
            self.load_cpus
        ));
        if !self.smoke && !self.companions {
            command.push_str(" --http-only");
        }
        command
    }
}

fn positive(flag: &str, text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{flag}` needs a positive whole number, got `{text}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Options, String> {
        Options::parse(args.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn a_full_run_writes_the_report_and_a_smoke_run_does_not() {
        let full = parse("").unwrap();
        assert_eq!((full.rounds, full.smoke), (3, false));
        assert!(full.out.as_ref().unwrap().ends_with("BENCHMARKS.md"));
        let smoke = parse("--smoke --rounds 5").unwrap();
        assert_eq!((smoke.rounds, smoke.out), (1, None));
        assert!(parse("--smoke --out x.md").unwrap().out.is_some());
        assert_eq!(parse("--no-write").unwrap().out, None);
        assert!(parse("--rounds 0").unwrap_err().contains("`--rounds`"));
        assert!(parse("--bogus").is_err());
        assert!(full.companions && !parse("--http-only").unwrap().companions);
    }
}
