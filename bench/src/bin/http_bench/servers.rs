//! One running `bench_server` per variant, all pinned to the server CPUs.

use std::path::Path;

use ratelimit_bench::Variant;

use crate::pinned_process::{free_port, PinnedProcess};

pub struct Servers {
    running: Vec<(Variant, PinnedProcess)>,
}

impl Servers {
    pub fn start(
        binary: &Path,
        cpus: &str,
        workers: usize,
        redis_url: &str,
        work_dir: &Path,
    ) -> Result<Servers, String> {
        let mut running = Vec::new();
        for variant in Variant::ALL {
            let port = free_port()?;
            let mut args = vec![
                "--variant".to_owned(),
                variant.flag().to_owned(),
                "--port".to_owned(),
                port.to_string(),
                "--workers".to_owned(),
                workers.to_string(),
            ];
            if variant.uses_redis() {
                args.extend(["--redis".to_owned(), redis_url.to_owned()]);
            }
            let log = work_dir.join(format!("server-{}.log", variant.flag()));
            let process = PinnedProcess::start(
                &format!("bench_server --variant {variant}"),
                cpus,
                binary,
                &args,
                port,
                &log,
            )?;
            running.push((variant, process));
        }
        Ok(Servers { running })
    }

    fn process(&self, variant: Variant) -> &PinnedProcess {
        &self
            .running
            .iter()
            .find(|(v, _)| *v == variant)
            .expect("every variant is started")
            .1
    }

    pub fn port(&self, variant: Variant) -> u16 {
        self.process(variant).port()
    }

    pub fn pid(&self, variant: Variant) -> u32 {
        self.process(variant).pid()
    }

    /// The variants whose server has exited.
    pub fn exited(&mut self) -> Vec<Variant> {
        self.running
            .iter_mut()
            .filter_map(|(variant, process)| (!process.is_running()).then_some(*variant))
            .collect()
    }
}
