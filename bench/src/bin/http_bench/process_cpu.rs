//! CPU time a process has used, from `/proc/<pid>/stat` (utime + stime, all threads).

use std::{process::Command, sync::OnceLock, time::Duration};

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`, 100 on Linux).
fn ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|ticks| *ticks > 0)
            .unwrap_or(100)
    })
}

/// User plus system time of `pid` so far.
pub fn cpu_time(pid: u32) -> Result<Duration, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    let ticks = parse_ticks(&stat).ok_or_else(|| format!("unexpected /proc/{pid}/stat: {stat}"))?;
    Ok(Duration::from_micros(
        ticks * 1_000_000 / ticks_per_second(),
    ))
}

/// utime + stime: fields 14 and 15, counted after the parenthesised command name.
fn parse_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_system_ticks_are_summed_whatever_the_name() {
        let stat = "4242 (bench server) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    120 30 0 0 20 0 3 0 1000 100000 200 18446744073709551615";
        assert_eq!(parse_ticks(stat), Some(150));
        assert!(cpu_time(std::process::id()).is_ok());
    }
}
