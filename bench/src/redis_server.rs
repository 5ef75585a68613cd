//! A `redis-server` of the benchmark's own, on a free loopback port, pinned to CPU 0 with
//! `taskset` (the measuring client keeps CPU 1), stopped and its directory removed on drop.

use std::{
    env,
    net::TcpListener,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    /// `redis://127.0.0.1:<port>`.
    pub url: String,
    dir: std::path::PathBuf,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisServer {
    /// Starts one, and waits (10 s at most) until it answers.
    ///
    /// # Errors
    ///
    /// When no port is free, `taskset` or `redis-server` cannot start, or it does not answer.
    pub fn start(name: &str) -> Result<RedisServer, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let dir = env::temp_dir().join(format!("{name}-{port}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let child = Command::new("taskset")
            .args(["-c", "0", "redis-server", "--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start taskset redis-server (apt-get install -y redis-server util-linux): {e}"))?;
        let redis = RedisServer {
            child,
            url: format!("redis://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis::Client::open(redis.url.as_str())
            .and_then(|c| c.get_connection())
            .is_err()
        {
            if Instant::now() > deadline {
                return Err("redis-server did not come up".to_owned());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    /// A new connection.
    ///
    /// # Errors
    ///
    /// Redis's, when it does not answer.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url.as_str())?.get_connection()
    }
}
