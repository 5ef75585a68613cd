//! The programs a run needs, with the way to install each.

use std::process::{Command, Stdio};

const PROGRAMS: &[(&str, &[&str], &str)] = &[
    ("wrk", &["-v"], "apt-get install -y wrk"),
    (
        "redis-server",
        &["--version"],
        "apt-get install -y redis-server",
    ),
    ("taskset", &["-V"], "apt-get install -y util-linux"),
];

pub fn check() -> Result<(), String> {
    let missing: Vec<String> = PROGRAMS
        .iter()
        .filter(|(program, args, _)| {
            Command::new(program)
                .args(*args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
        })
        .map(|(program, _, install)| format!("`{program}` (install with `{install}`)"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing: {}", missing.join(", ")))
    }
}

/// Pins this process to `cpus`, beside the load generator, so it never competes with the
/// servers.
pub fn pin_self(cpus: &str) -> Result<(), String> {
    pin(cpus, &std::process::id().to_string())
}

/// Pins the calling thread alone to `cpus`.
pub fn pin_this_thread(cpus: &str) -> Result<(), String> {
    // `/proc/thread-self` links to `<pid>/task/<tid>`; taskset takes a thread id as a pid.
    let link = std::fs::read_link("/proc/thread-self")
        .map_err(|e| format!("cannot read /proc/thread-self: {e}"))?;
    let tid = link
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| format!("no thread id in {}", link.display()))?
        .to_owned();
    pin(cpus, &tid)
}

fn pin(cpus: &str, id: &str) -> Result<(), String> {
    let status = Command::new("taskset")
        .args(["-p", "-c", cpus, id])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run taskset: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset -p -c {cpus} failed ({status})"))
    }
}
