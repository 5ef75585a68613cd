//! A child process pinned to a CPU list with `taskset`, serving on a loopback port it names
//! in its output, stopped when dropped.

use std::{
    fs::File,
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use ratelimit_bench::LISTENING;

pub struct PinnedProcess {
    name: String,
    child: Child,
    port: u16,
}

/// How a started process says that it serves, and where: read from its own output, so a
/// port taken by another process between [`free_port`] and the start is never mistaken for
/// this one's.
pub enum Readiness {
    /// `bench_server`, started on port 0: prints [`LISTENING`] and its address.
    Announced,
    /// A program told to listen on `port` that writes `line` (ASCII case ignored) to its
    /// output once it does (`redis-server`'s "Ready to accept connections").
    LogLine { line: &'static str, port: u16 },
}

impl Readiness {
    /// The port the process serves on, once its output says it serves.
    fn port(&self, output: &str) -> Option<u16> {
        match self {
            Readiness::Announced => output.lines().find_map(|line| {
                let address = line.strip_prefix(LISTENING)?;
                address.trim().rsplit_once(':')?.1.parse().ok()
            }),
            Readiness::LogLine { line, port } => output
                .to_ascii_lowercase()
                .contains(&line.to_ascii_lowercase())
                .then_some(*port),
        }
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl PinnedProcess {
    /// Starts `program args` on `cpus` (`taskset -c`), its output in `log`, and waits until
    /// its output says it serves (`ready`).
    pub fn start(
        name: &str,
        cpus: &str,
        program: &Path,
        args: &[String],
        ready: Readiness,
        log: &Path,
    ) -> Result<PinnedProcess, String> {
        let output =
            File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let errors = output
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        // taskset execs the program, so the child's pid is the program's own.
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cpus)
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .spawn()
            .map_err(|e| format!("cannot start {name} ({}): {e}", program.display()))?;
        let mut process = PinnedProcess {
            name: name.to_owned(),
            child,
            port: 0,
        };
        process.port = process.wait_until_ready(&ready, log)?;
        Ok(process)
    }

    fn wait_until_ready(&mut self, ready: &Readiness, log: &Path) -> Result<u16, String> {
        let started = Instant::now();
        loop {
            let output = std::fs::read_to_string(log).unwrap_or_default();
            if let Some(port) = ready.port(&output) {
                return Ok(port);
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || started.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "{} did not start serving ({}); its output:\n{output}",
                    self.name,
                    exited.map_or("timed out after 20 s".to_owned(), |s| s.to_string()),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for PinnedProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_comes_from_the_process_own_words() {
        let announced = Readiness::Announced;
        assert_eq!(announced.port("starting\n"), None);
        assert_eq!(
            announced.port(&format!("warming up\n{LISTENING}127.0.0.1:40123\n")),
            Some(40123)
        );
        // A line that only mentions the words, or a bad port, is not the announcement.
        assert_eq!(
            announced.port("error: bench_server listening on nothing\n"),
            None
        );
        assert_eq!(announced.port(&format!("{LISTENING}127.0.0.1:x\n")), None);

        let redis = Readiness::LogLine {
            line: "ready to accept connections",
            port: 6400,
        };
        assert_eq!(redis.port("* Server initialized\n"), None);
        assert_eq!(
            redis.port("* Server initialized\n* Ready to accept connections tcp\n"),
            Some(6400)
        );
    }
}
