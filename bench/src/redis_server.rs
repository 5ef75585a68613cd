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
        Self::spawn(name, &[], &[], Duration::from_secs(10))
    }

    /// Starts one under `valgrind --tool=callgrind` (its counts dumped into
    /// `out/callgrind.out.<pid>.<n>`, see [`pid`](Self::pid)), with its timers at 1 Hz so
    /// that they hardly count, and waits (60 s at most) until it answers.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start), and when `valgrind` cannot start.
    pub fn start_profiled(name: &str, out: &std::path::Path) -> Result<RedisServer, String> {
        let file = format!("--callgrind-out-file={}/callgrind.out.%p", out.display());
        Self::spawn(
            name,
            &["valgrind", "--tool=callgrind", &file],
            &["--hz", "1"],
            Duration::from_secs(60),
        )
    }

    fn spawn(
        name: &str,
        wrapper: &[&str],
        extra: &[&str],
        wait: Duration,
    ) -> Result<RedisServer, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let dir = env::temp_dir().join(format!("{name}-{port}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let child = Command::new("taskset")
            .args(["-c", "0"])
            .args(wrapper)
            .args(["redis-server", "--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start taskset {}redis-server (apt-get install -y redis-server util-linux valgrind): {e}", wrapper.first().map_or(String::new(), |w| format!("{w} "))))?;
        let redis = RedisServer {
            child,
            url: format!("redis://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + wait;
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

    /// The server's process id (`taskset` and `valgrind` run it in their own process).
    pub fn pid(&self) -> u32 {
        self.child.id()
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
