//! Redis bytes per active identity: from an empty Redis, `identities` clients send
//! `requests_each` requests each to one route, then every key's `MEMORY USAGE` is summed
//! (and `used_memory` compared, which also counts the keyspace's own tables).

use ratelimit_bench::{Budget, Variant};

use crate::{http_probe::identity_address, plan::Target, rig::Rig};

#[derive(Debug, Clone, Copy)]
pub struct MemoryFigure {
    pub target: Target,
    pub identities: u32,
    pub requests_each: u32,
    pub keys: u64,
    /// Sum of `MEMORY USAGE <key> SAMPLES 0`.
    pub key_bytes: u64,
    /// Growth of `INFO memory` `used_memory` (may be negative noise for tiny runs).
    pub used_memory: i64,
}

impl MemoryFigure {
    pub fn bytes_per_identity(&self) -> f64 {
        self.key_bytes as f64 / f64::from(self.identities)
    }

    pub fn used_memory_per_identity(&self) -> f64 {
        self.used_memory as f64 / f64::from(self.identities)
    }

    pub fn keys_per_identity(&self) -> f64 {
        self.keys as f64 / f64::from(self.identities)
    }
}

/// The route each Redis-backed target is measured on: this project's `memory` routes
/// (1,000 per hour), the others' `allow` routes (also an hour-long window).
fn budget(target: Target) -> Budget {
    if target.variant == Variant::Project {
        Budget::Memory
    } else {
        Budget::Allow
    }
}

pub fn run(
    rig: &mut Rig,
    identities: u32,
    requests_each: u32,
) -> Result<Vec<MemoryFigure>, String> {
    let targets: Vec<Target> = Target::all()
        .into_iter()
        .filter(|t| t.variant.uses_redis() && !t.replica && !t.bare)
        .collect();
    let mut figures = Vec::new();
    for target in targets {
        rig.stats.flush_all()?;
        let before = rig.stats.used_memory()?;
        let mut probe = rig.probe(target)?;
        let path = target.path(budget(target));
        for _ in 0..requests_each {
            for i in 0..identities {
                let status = probe.get(&path, &identity_address(i))?;
                if !(200..300).contains(&status) {
                    return Err(format!("memory fill: {target} answered {status} on {path}"));
                }
            }
        }
        let after = rig.stats.used_memory()?;
        let keys = rig.stats.keys()?;
        let mut key_bytes = 0;
        for key in &keys {
            key_bytes += rig.stats.memory_usage(key)?;
        }
        figures.push(MemoryFigure {
            target,
            identities,
            requests_each,
            keys: keys.len() as u64,
            key_bytes,
            used_memory: after as i64 - before as i64,
        });
    }
    rig.stats.flush_all()?;
    Ok(figures)
}
