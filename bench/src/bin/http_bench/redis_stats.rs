//! What Redis did, read from the server itself over one connection opened at start (so
//! reading adds no connection): `INFO commandstats` (commands run inside scripts included),
//! `INFO stats` (connections accepted), and `MEMORY USAGE` for the bytes of each key.

use std::collections::BTreeMap;

/// Commands that run a Lua script or function.
const SCRIPT_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
];

/// Cumulative counters; subtract two readings for what happened in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `EVALSHA`/`EVAL`/`FCALL` calls.
    pub script_calls: u64,
    /// Every command but `INFO`, those run inside scripts included.
    pub commands: u64,
    /// `total_connections_received`.
    pub connections: u64,
}

impl Counters {
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            script_calls: self.script_calls.saturating_sub(before.script_calls),
            commands: self.commands.saturating_sub(before.commands),
            connections: self.connections.saturating_sub(before.connections),
        }
    }
}

pub struct RedisStats {
    connection: redis::Connection,
}

impl RedisStats {
    pub fn connect(url: &str) -> Result<RedisStats, String> {
        let connection = redis::Client::open(url)
            .and_then(|client| client.get_connection())
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        Ok(RedisStats { connection })
    }

    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        cmd.query(&mut self.connection)
            .map_err(|e| format!("redis: {e}"))
    }

    fn info(&mut self, section: &str) -> Result<String, String> {
        self.query(redis::cmd("INFO").arg(section))
    }

    pub fn counters(&mut self) -> Result<Counters, String> {
        let commands = self.info("commandstats")?;
        let stats = self.info("stats")?;
        let (script_calls, commands) = parse_commandstats(&commands);
        let connections = info_field(&stats, "total_connections_received")
            .and_then(|v| v.parse().ok())
            .ok_or("INFO stats has no total_connections_received")?;
        Ok(Counters {
            script_calls,
            commands,
            connections,
        })
    }

    /// `redis_version` of `INFO server`.
    pub fn version(&mut self) -> Result<String, String> {
        let server = self.info("server")?;
        info_field(&server, "redis_version")
            .map(str::to_owned)
            .ok_or_else(|| "INFO server has no redis_version".to_owned())
    }

    /// `used_memory` of `INFO memory`, in bytes.
    pub fn used_memory(&mut self) -> Result<u64, String> {
        let memory = self.info("memory")?;
        info_field(&memory, "used_memory")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| "INFO memory has no used_memory".to_owned())
    }

    pub fn ping(&mut self) -> Result<(), String> {
        self.query::<String>(&redis::cmd("PING")).map(drop)
    }

    pub fn flush_all(&mut self) -> Result<(), String> {
        self.query::<()>(redis::cmd("FLUSHALL").arg("SYNC"))
    }

    /// Every key (SCAN, so the server is never blocked long).
    pub fn keys(&mut self) -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<String>) =
                self.query(redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1000))?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// `MEMORY USAGE key SAMPLES 0`: the key's bytes, every element counted.
    pub fn memory_usage(&mut self, key: &str) -> Result<u64, String> {
        let bytes: Option<u64> = self.query(
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0),
        )?;
        Ok(bytes.unwrap_or(0))
    }
}

/// (script calls, commands but `INFO`) from `INFO commandstats`.
fn parse_commandstats(text: &str) -> (u64, u64) {
    let calls: BTreeMap<&str, u64> = text
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|pair| pair.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name, calls))
        })
        .collect();
    let scripts = SCRIPT_COMMANDS
        .iter()
        .filter_map(|name| calls.get(name))
        .sum();
    let commands = calls
        .iter()
        .filter(|(name, _)| **name != "info")
        .map(|(_, calls)| calls)
        .sum();
    (scripts, commands)
}

fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_count_scripts_and_commands_but_not_info() {
        let text = "# Commandstats\r\n\
            cmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_incr:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_info:calls=99,usec=5,usec_per_call=0.05,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_eval:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n";
        assert_eq!(parse_commandstats(text), (11, 21));
        assert_eq!(
            info_field("a:1\r\nredis_version:7.0.15\r\n", "redis_version"),
            Some("7.0.15")
        );
        assert_eq!(info_field("redis_version_x:1\r\n", "redis_version"), None);
    }
}
