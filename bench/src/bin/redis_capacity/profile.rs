//! `redis_capacity --profile`: where each row's Redis time goes. Redis runs under
//! `valgrind --tool=callgrind`; its counters are zeroed before a row and dumped after it, and
//! each dump's inclusive counts of four of Redis's functions split the instructions of a
//! check (instructions, not time: one core, no cache or syscall cost; the rows compare):
//!
//! - outside the script: the whole `EVALSHA` but `luaCallFunction` (reading the command,
//!   finding the script by its digest, writing the reply);
//! - its commands: `scriptCall`, the Redis commands the script calls, as Redis runs them;
//! - number formatting: libc's `sprintf` (`__sprintf_chk` in a fortified build), which Lua
//!   calls for `string.format`, for a number turned into a string (`tostring`, `..`) and for
//!   a number passed to `redis.call`;
//! - number parsing: libc's `strtod`, which Lua calls for `tonumber` and for arithmetic on
//!   a string (`ARGV`, `TIME`'s reply, a `GET`);
//! - Lua: the rest of `luaCallFunction`: `KEYS` and `ARGV` made into Lua tables, the
//!   script's own steps, each command's reply made into Lua values, the reply made into
//!   Redis's.

use std::{path::PathBuf, process::Command};

/// Redis under callgrind, and the dumps taken so far.
pub(crate) struct Profiler {
    dir: PathBuf,
    pid: u32,
    dumps: usize,
}

/// A row's instructions, in all (divide by the checks for per check).
#[derive(Clone, Copy, Default)]
pub(crate) struct Counts {
    pub(crate) total: f64,
    pub(crate) script: f64,
    pub(crate) commands: f64,
    pub(crate) formatting: f64,
    pub(crate) parsing: f64,
}

impl Counts {
    /// Per check, as `[total, outside the script, Lua, commands, number formatting, number
    /// parsing]`.
    pub(crate) fn per_check(&self, checks: u64) -> [f64; 6] {
        let n = checks.max(1) as f64;
        let lua = self.script - self.commands - self.formatting - self.parsing;
        [
            self.total / n,
            (self.total - self.script) / n,
            lua / n,
            self.commands / n,
            self.formatting / n,
            self.parsing / n,
        ]
    }
}

impl Profiler {
    /// For the Redis with process id `pid`, dumping into `dir`.
    pub(crate) fn new(dir: PathBuf, pid: u32) -> Self {
        Profiler { dir, pid, dumps: 0 }
    }

    fn control(&self, option: &str) -> Result<(), String> {
        let status = Command::new("callgrind_control")
            .args([option, &self.pid.to_string()])
            .output()
            .map_err(|e| {
                format!("cannot run callgrind_control (apt-get install -y valgrind): {e}")
            })?
            .status;
        if status.success() {
            Ok(())
        } else {
            Err(format!("callgrind_control {option} {} failed", self.pid))
        }
    }

    /// Zeroes the counters: what follows is the next row's.
    pub(crate) fn zero(&self) -> Result<(), String> {
        self.control("-z")
    }

    /// Dumps the counters since [`zero`](Self::zero) and reads them.
    pub(crate) fn dump(&mut self) -> Result<Counts, String> {
        self.control("-d")?;
        self.dumps += 1;
        let file = self
            .dir
            .join(format!("callgrind.out.{}.{}", self.pid, self.dumps));
        let output = Command::new("callgrind_annotate")
            .args(["--inclusive=yes", "--threshold=100"])
            .arg(&file)
            .output()
            .map_err(|e| format!("cannot run callgrind_annotate: {e}"))?;
        if !output.status.success() {
            return Err(format!("callgrind_annotate {} failed", file.display()));
        }
        Ok(parse(&String::from_utf8_lossy(&output.stdout)))
    }
}

/// The inclusive counts of an annotation (`1,234 (5.6%)  file:function [object]`).
fn parse(annotation: &str) -> Counts {
    let mut counts = Counts::default();
    for line in annotation.lines() {
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<f64>() else {
            continue;
        };
        let rest = rest.split_once(") ").map_or(rest, |(_, r)| r).trim();
        let function = rest
            .split(" [")
            .next()
            .and_then(|f| f.rsplit(':').next())
            .unwrap_or("");
        let slot = match (rest, function) {
            ("PROGRAM TOTALS", _) => &mut counts.total,
            (_, "luaCallFunction") => &mut counts.script,
            (_, "scriptCall") => &mut counts.commands,
            (_, "sprintf" | "__sprintf_chk") => &mut counts.formatting,
            (_, "strtod") => &mut counts.parsing,
            _ => continue,
        };
        *slot += count;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_annotation_gives_its_counts() {
        let text = "\
80,398,430 (100.0%)  PROGRAM TOTALS
53,010,437 (65.93%)  ???:call [/usr/bin/redis-check-rdb]
43,728,160 (54.39%)  ???:luaCallFunction [/usr/bin/redis-check-rdb]
 9,000,000 (11.19%)  ???:scriptCall [/usr/bin/redis-check-rdb]
    16,700 ( 0.02%)  ./debug/./debug/sprintf_chk.c:__sprintf_chk [/usr/lib/x86_64-linux-gnu/libc.so.6]
    10,000 ( 0.01%)  ./stdlib/./stdlib/strtod.c:strtod [/usr/lib/x86_64-linux-gnu/libc.so.6]
     9,900 ( 0.01%)  ./stdlib/./stdlib/strtod_l.c:____strtod_l_internal [/usr/lib/x86_64-linux-gnu/libc.so.6]
    16,440 ( 0.02%)  ./libio/./libio/iovsprintf.c:__vsprintf_internal [/usr/lib/x86_64-linux-gnu/libc.so.6]
";
        let counts = parse(text);
        assert_eq!(counts.total, 80_398_430.0);
        assert_eq!(counts.script, 43_728_160.0);
        assert_eq!(counts.commands, 9_000_000.0);
        assert_eq!((counts.formatting, counts.parsing), (16_700.0, 10_000.0));
        let [total, outside, lua, commands, formatting, parsing] = counts.per_check(10);
        assert_eq!(total, 8_039_843.0);
        assert_eq!(outside, 3_667_027.0);
        assert_eq!(lua, 3_470_146.0);
        assert_eq!(
            (commands, formatting, parsing),
            (900_000.0, 1_670.0, 1_000.0)
        );
    }
}
