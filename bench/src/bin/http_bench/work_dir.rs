//! A scratch directory for one run (wrk scripts, server logs, Redis's directory), removed
//! when the run ends unless it failed, so its logs can be read.

use std::path::{Path, PathBuf};

pub struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub fn create() -> Result<WorkDir, String> {
        let path = std::env::temp_dir().join(format!("ratelimit-bench-{}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(WorkDir { path, keep: false })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the directory in place (for its logs).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
