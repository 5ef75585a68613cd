//! The benchmark's own `redis-server`: a free loopback port (never 6379), no persistence,
//! pinned with the load generator.

use std::path::{Path, PathBuf};

use crate::pinned_process::{free_port, PinnedProcess, Readiness};

pub struct RedisServer {
    process: PinnedProcess,
}

impl RedisServer {
    /// Starts on a free port, and on another if some other process takes that one first
    /// (Redis then exits, unable to bind, before it says it is ready).
    pub fn start(cpus: &str, work_dir: &Path) -> Result<RedisServer, String> {
        let mut failure = String::new();
        for _ in 0..5 {
            let mut port = free_port()?;
            while port == 6379 {
                port = free_port()?;
            }
            let args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &work_dir.display().to_string(),
                "--maxclients",
                "10000",
            ]
            .map(str::to_owned)
            .to_vec();
            match PinnedProcess::start(
                "redis-server",
                cpus,
                &PathBuf::from("redis-server"),
                &args,
                Readiness::LogLine {
                    line: "ready to accept connections",
                    port,
                },
                &work_dir.join("redis-server.log"),
            ) {
                Ok(process) => return Ok(RedisServer { process }),
                Err(error) => failure = error,
            }
        }
        Err(failure)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.process.port())
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
