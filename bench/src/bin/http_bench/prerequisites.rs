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
    let status = Command::new("taskset")
        .args(["-p", "-c", cpus, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run taskset: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset -p -c {cpus} failed ({status})"))
    }
}
