//! The load generator: wrk, one thread, pinned to the load CPUs, with a Lua `done` hook that
//! prints exact figures (`scripts/wrk/summary.lua`).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

const SUMMARY: &str = include_str!("../../../scripts/wrk/summary.lua");
const IDENTITIES: &str = include_str!("../../../scripts/wrk/identities.lua");

/// The address every request of a one-client scenario comes from.
pub const HOT_CLIENT: &str = "198.18.255.1";

/// Who sends the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clients {
    /// Every request from [`HOT_CLIENT`].
    One,
    /// Each request from the next of this many identities.
    Many(u32),
}

/// What one wrk run measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WrkResult {
    pub requests: u64,
    pub duration: Duration,
    /// Responses with a status of 400 or more (wrk's own count: a 1xx or 3xx is not one).
    pub error_statuses: u64,
    /// Connect, read and write errors and timeouts.
    pub socket_errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub mean_us: f64,
}

impl WrkResult {
    pub fn requests_per_second(&self) -> f64 {
        self.requests as f64 / self.duration.as_secs_f64().max(1e-9)
    }
}

/// The Lua scripts, written once into the run's work directory.
pub struct Wrk {
    cpus: String,
    summary: PathBuf,
    identities: PathBuf,
}

impl Wrk {
    pub fn new(cpus: &str, work_dir: &Path) -> Result<Wrk, String> {
        let summary = work_dir.join("summary.lua");
        let identities = work_dir.join("identities.lua");
        std::fs::write(&summary, SUMMARY)
            .and_then(|()| std::fs::write(&identities, format!("{SUMMARY}\n{IDENTITIES}")))
            .map_err(|e| {
                format!(
                    "cannot write the wrk scripts into {}: {e}",
                    work_dir.display()
                )
            })?;
        Ok(Wrk {
            cpus: cpus.to_owned(),
            summary,
            identities,
        })
    }

    /// `connections` keep-alive connections for `duration` on `url`.
    pub fn run(
        &self,
        url: &str,
        clients: Clients,
        connections: usize,
        duration: Duration,
    ) -> Result<WrkResult, String> {
        let mut command = Command::new("taskset");
        command
            .args(["-c", &self.cpus, "wrk", "-t1"])
            .arg(format!("-c{connections}"))
            .arg(format!("-d{}s", duration.as_secs().max(1)))
            .args(["--timeout", "5s"]);
        match clients {
            Clients::One => {
                command
                    .arg("-H")
                    .arg(format!("X-Forwarded-For: {HOT_CLIENT}"))
                    .arg("-s")
                    .arg(&self.summary)
                    .arg(url);
            }
            Clients::Many(count) => {
                command
                    .arg("-s")
                    .arg(&self.identities)
                    .arg(url)
                    .arg("--")
                    .arg(count.to_string());
            }
        }
        let output = command
            .output()
            .map_err(|e| format!("cannot run wrk (apt-get install -y wrk): {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        parse(&stdout).ok_or_else(|| {
            format!(
                "wrk on {url} printed no summary ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        })
    }
}

/// The `BENCH key=value ...` line of `summary.lua`.
fn parse(stdout: &str) -> Option<WrkResult> {
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("BENCH "))?;
    let field = |name: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    let whole = |name: &str| field(name).map(|v| v as u64);
    Some(WrkResult {
        requests: whole("requests")?,
        duration: Duration::from_micros(whole("duration_us")?),
        error_statuses: whole("status_errors")?,
        socket_errors: whole("connect_errors")?
            + whole("read_errors")?
            + whole("write_errors")?
            + whole("timeouts")?,
        p50_us: whole("p50_us")?,
        p99_us: whole("p99_us")?,
        mean_us: field("mean_us")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_parsed_among_wrk_output() {
        let out = "Running 2s test @ http://127.0.0.1:1/allow\n  1 threads and 64 connections\n\
                   BENCH requests=40000 duration_us=2000000 status_errors=3 connect_errors=0 \
                   read_errors=1 write_errors=0 timeouts=2 p50_us=1500 p99_us=4000 mean_us=1600.5\n";
        let result = parse(out).unwrap();
        assert_eq!(result.requests, 40_000);
        assert_eq!((result.error_statuses, result.socket_errors), (3, 3));
        assert_eq!((result.p50_us, result.p99_us), (1500, 4000));
        assert!((result.requests_per_second() - 20_000.0).abs() < 1e-6);
        assert_eq!(parse("no summary"), None);
    }
}
