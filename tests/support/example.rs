//! The example programs of this package, run as processes by the tests.

use std::{net::TcpListener, path::PathBuf, process::Command};

/// Builds (when needed) and locates an example binary of this package.
pub fn example(name: &str) -> PathBuf {
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--quiet", "--example", name])
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo build --example {name} failed");
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    profile_dir.join("examples").join(name)
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Builds (when needed) and locates the `ratelimit-admin` command.
pub fn admin_command() -> PathBuf {
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--quiet", "-p", "ratelimit-admin"])
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo build -p ratelimit-admin failed");
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("ratelimit-admin")
}
