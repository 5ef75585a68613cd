//! A child process pinned to a CPU list with `taskset`, listening on a loopback port,
//! stopped when dropped.

use std::{
    fs::File,
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

pub struct PinnedProcess {
    name: String,
    child: Child,
    port: u16,
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
    /// it accepts connections on `port`.
    pub fn start(
        name: &str,
        cpus: &str,
        program: &Path,
        args: &[String],
        port: u16,
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
            port,
        };
        process.wait_until_listening(log)?;
        Ok(process)
    }

    fn wait_until_listening(&mut self, log: &Path) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || started.elapsed() > Duration::from_secs(20) {
                let output = std::fs::read_to_string(log).unwrap_or_default();
                return Err(format!(
                    "{} did not start listening on 127.0.0.1:{} ({}); its output:\n{output}",
                    self.name,
                    self.port,
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
