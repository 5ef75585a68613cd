//! The other two benchmarks a full run ends with, so that one command measures every goal:
//! `redis_capacity` (Redis checks per core against each script's reference) and
//! `sync_fleet` (routes that sync), run through cargo after the HTTP servers and their
//! Redis have stopped; the goal lines they print ([`ratelimit_bench::Goal`]) join the
//! run's goals table.

use std::process::{Command, Stdio};

use ratelimit_bench::Goal;

use crate::goals::{Status, Verdict};

/// The benchmarks, in the order they run.
const COMPANIONS: [&str; 2] = ["redis_capacity", "sync_fleet"];

/// The goals of every companion; one that cannot run, or prints none, is a goal not
/// measured that says why.
pub fn goals() -> Vec<Verdict> {
    COMPANIONS.iter().flat_map(|bin| run(bin)).collect()
}

fn run(bin: &str) -> Vec<Verdict> {
    eprintln!("http_bench: running {bin} (its progress below)");
    // `cargo run` sets CARGO; the workspace is the bench crate's parent.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "ratelimit-bench",
            "--bin",
            bin,
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stderr(Stdio::inherit())
        .output();
    let text = match output {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            // Its tables, as it printed them (it exits 1 when a goal is missed).
            print!("{text}");
            text
        }
        Err(error) => return vec![not_measured(bin, &format!("cannot run cargo: {error}"))],
    };
    let goals = Goal::parse_all(&text);
    if goals.is_empty() {
        return vec![not_measured(
            bin,
            "it printed no goal (its output is above)",
        )];
    }
    goals
        .into_iter()
        .map(|goal| Verdict {
            goal: goal.goal,
            figure: goal.figure,
            status: if goal.met {
                Status::Met
            } else {
                Status::NotMet
            },
        })
        .collect()
}

fn not_measured(bin: &str, why: &str) -> Verdict {
    Verdict {
        goal: format!("the goals of `{bin}`"),
        figure: why.to_owned(),
        status: Status::NotMeasured,
    }
}
