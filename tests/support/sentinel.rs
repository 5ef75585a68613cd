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

impl Sentinel {
    /// Whether its process is stopped (`T` in `/proc/<pid>/stat`).
    fn paused(&self) -> bool {
        fs::read_to_string(format!("/proc/{}/stat", self.child.id())).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('T'))
        })
    }
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
    sentinel_password: Option<String>,
}

struct Passwords {
    sentinels: String,
    primary: String,
}

impl SentinelSetup {
    /// Starts everything and returns once the replica is in sync and every sentinel knows
    /// the replica and the other two sentinels (which a failover needs).
    pub fn start() -> SentinelSetup {
        Self::start_with(None)
    }

    /// As [`start`](Self::start), with passwords: the sentinels' own (`requirepass`, and
    /// what they tell one another by) and the primary's and replica's.
    pub fn start_with_passwords(sentinels: &str, primary: &str) -> SentinelSetup {
        Self::start_with(Some(Passwords {
            sentinels: sentinels.to_owned(),
            primary: primary.to_owned(),
        }))
    }

    fn start_with(passwords: Option<Passwords>) -> SentinelSetup {
        let auth: Vec<&str> = match &passwords {
            Some(p) => vec!["--requirepass", &p.primary, "--masterauth", &p.primary],
            None => Vec::new(),
        };
        let primary = RedisServer::start_with_args(&auth);
        let mut replica_args = auth.clone();
        let primary_port = primary.port().to_string();
        replica_args.extend([
            "--replicaof",
            "127.0.0.1",
            &primary_port,
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "1",
        ]);
        let replica = RedisServer::start_with_args(&replica_args);
        let password = passwords.as_ref().map(|p| p.primary.as_str());
        wait_for("the replica to be in sync", || {
            info(&replica, "replication", password).contains("master_link_status:up")
        });
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| start_sentinel(primary.port(), passwords.as_ref()))
            .collect();
        let setup = SentinelSetup {
            primary,
            replica,
            sentinels,
            sentinel_password: passwords.map(|p| p.sentinels),
        };
        wait_for("every sentinel to know the replica and the others", || {
            setup.sentinels.iter().all(|s| {
                let Ok(mut conn) = setup.sentinel_connection(s) else {
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

    /// The sentinels' URLs, with their password when they have one.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| self.sentinel_url(s))
            .collect()
    }

    fn sentinel_url(&self, sentinel: &Sentinel) -> String {
        match &self.sentinel_password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", sentinel.port),
            None => format!("redis://127.0.0.1:{}", sentinel.port),
        }
    }

    fn sentinel_connection(&self, sentinel: &Sentinel) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.sentinel_url(sentinel))?.get_connection()
    }

    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Stops sentinel `index` (`SIGSTOP`): its connections stay open and go silent.
    pub fn pause_sentinel(&self, index: usize) {
        let status = Command::new("kill")
            .args(["-STOP", &self.sentinels[index].child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -STOP failed");
    }

    /// Kills the primary (SIGKILL): the sentinels promote the replica once they agree it is
    /// down.
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// The port every sentinel names as the primary's, once they agree.
    pub fn named_primary_port(&self) -> Option<u16> {
        let mut ports = self.sentinels.iter().filter(|s| !s.paused()).map(|s| {
            let mut conn = self.sentinel_connection(s).ok()?;
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

/// One sentinel watching the server on `port` (a proxy's, say), killed on drop. Its quorum
/// is 2, so alone it never fails over: it names that address as long as it runs.
pub struct LoneSentinel(Sentinel);

impl LoneSentinel {
    pub fn start(port: u16) -> LoneSentinel {
        LoneSentinel(start_sentinel(port, None))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.0.port)
    }
}

/// `INFO section` of `server`, signed in with `password` when given.
fn info(server: &RedisServer, section: &str, password: Option<&str>) -> String {
    let url = match password {
        Some(password) => format!("redis://:{password}@127.0.0.1:{}", server.port()),
        None => server.url(),
    };
    let Ok(mut conn) = redis::Client::open(url).and_then(|c| c.get_connection()) else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg(section)
        .query(&mut conn)
        .unwrap_or_default()
}

/// A sentinel watching the primary on `primary_port`, on a free port; tried on another port
/// when another process took this one first.
fn start_sentinel(primary_port: u16, passwords: Option<&Passwords>) -> Sentinel {
    let mut last_log = String::new();
    for _ in 0..5 {
        match try_sentinel(primary_port, passwords) {
            Ok(sentinel) => return sentinel,
            Err(log) => last_log = log,
        }
    }
    panic!("redis-sentinel did not start after 5 attempts; last log:\n{last_log}");
}

fn try_sentinel(primary_port: u16, passwords: Option<&Passwords>) -> Result<Sentinel, String> {
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
    if let Some(p) = passwords {
        let auth = format!(
            "requirepass {sentinels}\nsentinel sentinel-pass {sentinels}\n\
             sentinel auth-pass {MASTER_NAME} {primary}\n",
            sentinels = p.sentinels,
            primary = p.primary,
        );
        let mut config_text = fs::read_to_string(&config).expect("read sentinel.conf");
        config_text.push_str(&auth);
        fs::write(&config, config_text).expect("write sentinel.conf");
    }
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
