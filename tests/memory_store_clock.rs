//! The in-memory store's own clock against steps of the system clock (an NTP correction, a
//! VM resumed with a wrong time), and its capacity's bounds.
//!
//! The step is made by libfaketime (Debian's `libfaketime`, which `tests/run` installs) in
//! a child process, which fakes the system clock and leaves the monotonic one alone.

use std::{
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, MemoryStore, Store},
    Algorithm, IdentityPart, Limit, Window,
};

/// Where Debian and Ubuntu put libfaketime, on any architecture.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketime.so.1")])
        .find(|path| path.exists());
    found.unwrap_or_else(|| {
        panic!(
            "libfaketime not found (/usr/lib/*/faketime/libfaketime.so.1): `apt-get install libfaketime`, as `bash tests/run` does"
        )
    })
}

/// The store follows the time that really passed, not the system clock: a step back of an
/// hour must not refuse for the whole hour (Retry-After ≈ 3,599 s) a GCRA client that made
/// one request of its 10 per second, nor a step forward hand a spent login budget back.
#[test]
fn a_step_of_the_system_clock_neither_locks_clients_out_nor_hands_budgets_back() {
    let dir = tempfile::tempdir().unwrap();
    let offset = dir.path().join("offset");
    std::fs::write(&offset, "+0\n").unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "system_clock_steps_under_libfaketime",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME_TIMESTAMP_FILE", &offset)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1")
        .env("RATELIMIT_TEST_FAKETIME_OFFSET", &offset)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        child.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{stderr}"
    );
}

#[test]
#[ignore = "run by a_step_of_the_system_clock_neither_locks_clients_out_nor_hands_budgets_back"]
fn system_clock_steps_under_libfaketime() {
    let offset = std::env::var("RATELIMIT_TEST_FAKETIME_OFFSET").expect("run by its parent test");
    let step = |to: &str| std::fs::write(&offset, format!("{to}\n")).unwrap();
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    let check = |key: &RouteKey, limits: &[Limit]| {
        runtime
            .block_on(store.check(CheckRequest {
                key,
                limits,
                now_millis: None,
            }))
            .unwrap()
    };
    let client =
        |route: &str| RouteKey::new("rl", "GET", route, &[(IdentityPart::Ip, "203.0.113.7")]);
    let gcra = [Limit::new(10, Window::from_secs(1), Algorithm::Gcra)];
    let log = [Limit::new(3, Window::from_secs(300), Algorithm::SlidingLog)];

    assert!(check(&client("/api"), &gcra).allowed);
    let before = wall();
    step("-3600");
    assert!(
        wall() + 3_000 < before,
        "libfaketime did not step the clock back"
    );
    let after_back = check(&client("/api"), &gcra);
    assert!(
        after_back.allowed,
        "after a step back: {:?}",
        after_back.limits
    );

    step("+0");
    for _ in 0..3 {
        assert!(check(&client("/login"), &log).allowed);
    }
    assert!(!check(&client("/login"), &log).allowed);
    step("+3600");
    assert!(
        wall() > before + 3_000,
        "libfaketime did not step the clock forward"
    );
    let after_forward = check(&client("/login"), &log);
    assert!(
        !after_forward.allowed,
        "after a step forward the spent budget is back: {:?}",
        after_forward.limits
    );
}

/// `capacity(0)` (meant as "unbounded", or a configuration value left empty) would build a
/// store that evicts a live client for every new one: refused at the limiter's startup check.
#[test]
fn a_capacity_of_zero_is_refused() {
    let store = MemoryStore::builder().capacity(0).build();
    assert_eq!(store.refused_settings().len(), 1);
    let limiter = ratelimit_runtime::RateLimiter::new(store);
    let error = limiter.check_settings().unwrap_err().to_string();
    assert!(
        error.contains(
            "`MemoryStore::builder().capacity(0)`: a memory store holds at least one key"
        ),
        "{error}"
    );
    let fixed = MemoryStore::builder().capacity(0).capacity(10).build();
    assert!(fixed.refused_settings().is_empty());
}
