//! The machine a run measured, for the report.

use std::process::Command;

#[derive(Debug, Clone)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub redis: String,
    pub wrk: String,
    pub rustc: String,
    pub load_average: String,
    /// The workspace's commit, and whether the runtime had uncommitted changes.
    pub revision: String,
}

fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|out| {
            let text = if out.stdout.is_empty() {
                out.stderr
            } else {
                out.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .filter(|line| !line.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Machine {
    pub fn describe(redis_version: String) -> Machine {
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                (name.trim() == "model name").then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let cpus = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        Machine {
            cpus,
            cpu_model,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            redis: redis_version,
            wrk: first_line("wrk", &["-v"]),
            rustc: first_line(
                &std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()),
                &["-V"],
            ),
            load_average: read("/proc/loadavg")
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            revision: revision(),
        }
    }
}

fn revision() -> String {
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let commit = first_line("git", &["-C", workspace, "rev-parse", "--short", "HEAD"]);
    let changed = Command::new("git")
        .args([
            "-C",
            workspace,
            "status",
            "--porcelain",
            "ratelimit-runtime",
            "ratelimit-macros",
            "bench",
        ])
        .output()
        .is_ok_and(|out| !out.stdout.is_empty());
    if changed {
        format!("{commit} + uncommitted changes in ratelimit-runtime/, ratelimit-macros/ or bench/")
    } else {
        commit
    }
}
