//! The test harness itself: `tests/run` and the `redis-server` processes the tests start.

mod support;

use std::{
    io::{BufRead, BufReader, Write},
    net::TcpStream,
    os::unix::fs::PermissionsExt,
    path::PathBuf,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use support::{ping, RedisServer};

const RUN_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/run");
const STOP_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/stop-servers");

/// A server that could not bind its port (another one took it between the probe and the
/// bind) is not taken for started because the other one answers `PING`: a test must not use,
/// flush or kill another test's server.
#[test]
fn a_server_is_not_taken_for_started_when_another_holds_its_port() {
    let other = RedisServer::start();
    let mine = RedisServer::start_on(other.port(), &[]);
    assert!(mine.is_err(), "started on the port of another server");
    assert!(ping(other.port()), "the other server is untouched");
}

/// Run by the next test in a process of its own (ignored otherwise): starts two servers,
/// stops one (`SIGSTOP`, as the fault tests do) and aborts, so nothing drops them.
#[test]
#[ignore = "a child process of the_servers_of_an_aborted_test_process_are_stopped_after_the_run"]
fn child_starts_servers_and_aborts() {
    if std::env::var("HARNESS_CHILD").is_err() {
        return;
    }
    let running = RedisServer::start();
    let paused = RedisServer::start();
    paused.pause();
    for server in [&running, &paused] {
        println!("SERVER {} {}", server.port(), server.dir().display());
    }
    std::io::stdout().flush().unwrap();
    std::process::abort();
}

/// The servers of a test process that aborts (or that a timeout kills) do not outlive the
/// run: `tests/run` names its run in `RATELIMIT_TEST_RUN` and stops that run's servers when
/// it exits, with `tests/stop-servers`: a stopped one too, and their directories go with
/// them.
#[test]
fn the_servers_of_an_aborted_test_process_are_stopped_after_the_run() {
    let run = format!("harness{}", std::process::id());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_starts_servers_and_aborts",
            "--ignored",
            "--nocapture",
        ])
        .env("HARNESS_CHILD", "1")
        .env("RATELIMIT_TEST_RUN", &run)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let servers: Vec<(u16, PathBuf)> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| {
            let (port, dir) = line.strip_prefix("SERVER ")?.split_once(' ')?;
            Some((port.parse().unwrap(), PathBuf::from(dir)))
        })
        .collect();
    assert!(!child.wait().unwrap().success(), "the child aborted");
    assert_eq!(servers.len(), 2, "the child printed its servers");
    assert!(ping(servers[0].0), "its server outlived it");
    let stopped = Command::new("bash")
        .args([STOP_SCRIPT, &run])
        .status()
        .unwrap();
    assert!(stopped.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    for (port, dir) in &servers {
        // Refused, not merely silent: a stopped server still accepts connections.
        while TcpStream::connect(("127.0.0.1", *port)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "the server on {port} is still there"
            );
            thread::sleep(Duration::from_millis(20));
        }
        assert!(!dir.exists(), "{} is left", dir.display());
    }
}

/// The harness needs Redis 7.0 (`CLUSTER ADDSLOTSRANGE`,
/// `--enable-debug-command`, `--busy-reply-threshold`), and Debian 11 or Ubuntu 22.04
/// install 6.0: `tests/run` refuses an older server up front and says which it needs. (A
/// stand-in `redis-server` reporting 6.0.16, and a stand-in `cargo` that records it ran.)
#[test]
fn tests_run_refuses_a_redis_server_older_than_7() {
    let dir = tempfile::tempdir().unwrap();
    let stand_in = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    stand_in(
        "redis-server",
        "echo 'Redis server v=6.0.16 sha=00000000:0 malloc=jemalloc-5.2.1 bits=64 build=a3fdef44459b3ad6'",
    );
    let ran = dir.path().join("cargo-ran");
    stand_in("cargo", &format!("touch {}", ran.display()));
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let output = Command::new("bash")
        .arg(RUN_SCRIPT)
        .env("PATH", &path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && !ran.exists(), "{stderr}");
    assert!(
        stderr.contains("need redis-server 7.0 or later"),
        "{stderr}"
    );
    // With 7.0 it goes on to the tests.
    stand_in(
        "redis-server",
        "echo 'Redis server v=7.0.15 sha=00000000:0'",
    );
    let output = Command::new("bash")
        .arg(RUN_SCRIPT)
        .env("PATH", &path)
        .env("RATELIMIT_BENCH_SMOKE", "0")
        .output()
        .unwrap();
    assert!(
        output.status.success() && ran.exists(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
