//! A throwaway `redis-server` on a free loopback port, for when `REDIS_URL` is not set.

use std::{
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

pub struct LocalRedis {
    port: u16,
    child: Child,
}

impl LocalRedis {
    pub fn start() -> Result<Self, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server ({e}); install it with `apt-get install redis-server` or set REDIS_URL"))?;
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                return Err("redis-server did not start within 10 s".to_owned());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(LocalRedis { port, child })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
