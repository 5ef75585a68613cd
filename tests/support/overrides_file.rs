//! An overrides file as an operator writes it, and waiting for what the services read.

use std::{path::Path, time::Duration};

use ratelimit_runtime::overrides::Overrides;

/// Writes `text` to `path` as an operator should: elsewhere, then renamed over it.
pub fn replace_file(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Waits (up to 2 s) until `holds` on the overrides in force.
pub async fn until(overrides: &Overrides, what: &str, holds: impl Fn(&Overrides) -> bool) {
    let started = std::time::Instant::now();
    while !holds(overrides) {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{what}: not within 2 s; refused: {:?}",
            overrides.refused()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
