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
        // Without what `cargo run` set for this binary: build scripts that watch their
        // environment (ring's, through cc) would see another one and rebuild, and the next
        // `cargo run` would rebuild them back, two minutes each time.
        for (name, _) in env::vars_os() {
            let name = name.to_string_lossy();
            if is_set_by_cargo_run(&name) {
                build.env_remove(&*name);
            }
        }
        if let Some(paths) = env::var_os("LD_LIBRARY_PATH") {
            let kept: Vec<PathBuf> = env::split_paths(&paths)
                .filter(|path| !path.starts_with(&dir))
                .collect();
            match env::join_paths(kept) {
                Ok(joined) if !joined.is_empty() => build.env("LD_LIBRARY_PATH", joined),
                _ => build.env_remove("LD_LIBRARY_PATH"),
            };
        }
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

/// The variables `cargo run` sets for the binary it runs (its manifest, package and target),
/// not those a user sets to configure cargo (`CARGO_HOME`, `CARGO_TARGET_DIR`, ...).
fn is_set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}
