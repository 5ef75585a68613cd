//! The benchmark's own `redis-server`: a free loopback port (never 6379), no persistence,
//! pinned with the load generator.

use std::path::{Path, PathBuf};

use crate::pinned_process::{free_port, PinnedProcess};

pub struct RedisServer {
    process: PinnedProcess,
}

impl RedisServer {
    pub fn start(cpus: &str, work_dir: &Path) -> Result<RedisServer, String> {
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
        let process = PinnedProcess::start(
            "redis-server",
            cpus,
            &PathBuf::from("redis-server"),
            &args,
            port,
            &work_dir.join("redis-server.log"),
        )?;
        Ok(RedisServer { process })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.process.port())
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
