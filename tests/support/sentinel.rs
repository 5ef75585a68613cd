//! A primary, its replica and three sentinels (Debian's `redis-sentinel`) on loopback ports,
//! killed on drop.

use std::{
    fs,
    io::ErrorKind,
    path::PathBuf,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use super::{dir_prefix, ping, RedisServer};

const MISSING: &str = "redis-sentinel not found on PATH; install it with `apt-get install redis-sentinel` (tests/run does)";

/// The name the sentinels know the primary by.
pub const MASTER_NAME: &str = "limiter";

/// One sentinel process.
struct Sentinel {
    port: u16,
    _dir: TempDir,
    child: Child,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A primary, one replica of it, and three sentinels watching it (quorum 2, the primary
/// down after 1 s without an answer).
pub struct SentinelSetup {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

impl SentinelSetup {
    /// Starts everything and returns once the replica is in sync and every sentinel knows
    /// the replica and the other two sentinels (which a failover needs).
    pub fn start() -> SentinelSetup {
        let primary = RedisServer::start();
        let replica = RedisServer::start_with_args(&[
            "--replicaof",
            "127.0.0.1",
            &primary.port().to_string(),
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "1",
        ]);
        wait_for("the replica to be in sync", || {
            info(&replica, "replication").contains("master_link_status:up")
        });
        let sentinels: Vec<Sentinel> = (0..3).map(|_| start_sentinel(primary.port())).collect();
        let setup = SentinelSetup {
            primary,
            replica,
            sentinels,
        };
        wait_for("every sentinel to know the replica and the others", || {
            setup.sentinels.iter().all(|s| {
                let Ok(mut conn) = redis::Client::open(format!("redis://127.0.0.1:{}", s.port))
                    .and_then(|c| c.get_connection())
                else {
                    return false;
                };
                let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(MASTER_NAME)
                    .query(&mut conn)
                    .unwrap_or_default();
                let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(MASTER_NAME)
                    .query(&mut conn)
                    .unwrap_or_default();
                replicas.len() == 1 && others.len() == 2
            })
        });
        setup
    }

    /// The sentinels' URLs.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Kills the primary (SIGKILL): the sentinels promote the replica once they agree it is
    /// down.
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// The port every sentinel names as the primary's, once they agree.
    pub fn named_primary_port(&self) -> Option<u16> {
        let mut ports = self.sentinels.iter().map(|s| {
            let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", s.port))
                .and_then(|c| c.get_connection())
                .ok()?;
            let (_, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(MASTER_NAME)
                .query(&mut conn)
                .ok()?;
            Some(port)
        });
        let first = ports.next()??;
        ports.all(|p| p == Some(first)).then_some(first)
    }
}

/// `INFO section` of `server`.
pub fn info(server: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut server.connection())
        .unwrap_or_default()
}

/// A sentinel watching the primary on `primary_port`, on a free port; tried on another port
/// when another process took this one first.
fn start_sentinel(primary_port: u16) -> Sentinel {
    let mut last_log = String::new();
    for _ in 0..5 {
        match try_sentinel(primary_port) {
            Ok(sentinel) => return sentinel,
            Err(log) => last_log = log,
        }
    }
    panic!("redis-sentinel did not start after 5 attempts; last log:\n{last_log}");
}

fn try_sentinel(primary_port: u16) -> Result<Sentinel, String> {
    let dir = tempfile::Builder::new()
        .prefix(&dir_prefix())
        .tempdir()
        .expect("temp dir");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let config: PathBuf = dir.path().join("sentinel.conf");
    let log = dir.path().join("sentinel.log");
    fs::write(
        &config,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = dir.path().display(),
            log = log.display(),
        ),
    )
    .expect("write sentinel.conf");
    // The sentinel rewrites its configuration file, which must come first.
    let child = match Command::new("redis-sentinel")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{MISSING}"),
        Err(e) => panic!("could not run redis-sentinel: {e}"),
    };
    let mut sentinel = Sentinel {
        port,
        _dir: dir,
        child,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = fs::read_to_string(&log).is_ok_and(|l| l.contains("+monitor master"));
        if ready && ping(port) {
            return Ok(sentinel);
        }
        if sentinel.child.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
            return Err(fs::read_to_string(&log).unwrap_or_default());
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (at most 30 s) for `ready`.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "never reached: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}
