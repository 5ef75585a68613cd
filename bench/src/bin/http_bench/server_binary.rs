//! Finds `bench_server` beside this binary, building it first when run through cargo
//! (`cargo run` builds only the binary it runs).

use std::{
    env,
    path::PathBuf,
    process::{Command, Stdio},
};

pub fn locate() -> Result<PathBuf, String> {
    let exe = env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("this executable has no parent directory")?
        .to_path_buf();
    if let Ok(cargo) = env::var("CARGO") {
        let release = dir.file_name().is_some_and(|name| name == "release");
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "ratelimit-bench", "--bin", "bench_server"]);
        if release {
            build.arg("--release");
        }
        let status = build
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run cargo to build bench_server: {e}"))?;
        if !status.success() {
            return Err(format!("building bench_server failed ({status})"));
        }
    }
    let server = dir.join("bench_server");
    if server.is_file() {
        Ok(server)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build --release -p ratelimit-bench`",
            server.display()
        ))
    }
}
