//! One running `bench_server` per target, all pinned to the server CPUs: one per variant,
//! and for this project one per route, so every server routes among the same few resources
//! (a server holding all fifteen of this project's routes would walk up to ten more
//! resources per request than the others, which the tables would charge to the limiter).

use std::path::Path;

use ratelimit_bench::Variant;

use crate::{
    pinned_process::{PinnedProcess, Readiness},
    plan::Target,
};

pub struct Servers {
    running: Vec<(Target, PinnedProcess)>,
}

impl Servers {
    pub fn start(
        binary: &Path,
        cpus: &str,
        workers: usize,
        redis_url: &str,
        project_timeout_ms: Option<u64>,
        work_dir: &Path,
    ) -> Result<Servers, String> {
        let mut running = Vec::new();
        for target in Target::all() {
            let variant = target.variant;
            let mut args = vec![
                "--variant".to_owned(),
                variant.flag().to_owned(),
                "--port".to_owned(),
                "0".to_owned(),
                "--workers".to_owned(),
                workers.to_string(),
            ];
            if variant.uses_redis() {
                args.extend(["--redis".to_owned(), redis_url.to_owned()]);
            }
            let mut name = variant.flag().to_owned();
            if let (Variant::Project, Some(ms)) = (variant, project_timeout_ms) {
                args.extend(["--timeout-ms".to_owned(), ms.to_string()]);
            }
            if let Some(route) = target.route {
                args.extend(["--route".to_owned(), route.name().to_owned()]);
                name = format!("{name}-{route}");
            }
            if target.bare {
                args.push("--no-headers".to_owned());
                name.push_str("-bare");
            }
            if target.replica {
                name.push_str("-replica");
            }
            let log = work_dir.join(format!("server-{name}.log"));
            let process = PinnedProcess::start(
                &format!("bench_server {target}"),
                cpus,
                binary,
                &args,
                Readiness::Announced,
                &log,
            )?;
            running.push((target, process));
        }
        Ok(Servers { running })
    }

    fn process(&self, target: Target) -> &PinnedProcess {
        &self
            .running
            .iter()
            .find(|(t, _)| *t == target)
            .expect("every target is started")
            .1
    }

    pub fn port(&self, target: Target) -> u16 {
        self.process(target).port()
    }

    pub fn pid(&self, target: Target) -> u32 {
        self.process(target).pid()
    }

    /// The targets whose server has exited.
    pub fn exited(&mut self) -> Vec<Target> {
        self.running
            .iter_mut()
            .filter_map(|(target, process)| (!process.is_running()).then_some(*target))
            .collect()
    }
}
