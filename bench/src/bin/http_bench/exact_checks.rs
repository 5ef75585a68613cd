//! Exact Redis work per request: `n` sequential requests (each answered before the next is
//! sent, so no request is in flight when the counters are read) against every Redis-backed
//! target, for one hot client, for `n` distinct clients, and for a client already over its
//! limit (after the one allowed and the one rejected request that arm the flood shield).
//! One uncounted request precedes the others, so one-time work is not counted.

use ratelimit_bench::Budget;

use crate::{
    http_probe::identity_address,
    plan::{Scenario, Target},
    redis_stats::Counters,
    rig::Rig,
};

/// The outcome of `requests` sequential requests.
#[derive(Debug, Clone, Copy)]
pub struct ExactCheck {
    pub target: Target,
    pub scenario: Scenario,
    pub requests: u64,
    pub redis: Counters,
    pub allowed: u64,
    pub rejected: u64,
    pub other: u64,
}

impl ExactCheck {
    /// What this project promises for it: one script call and no new connection per
    /// decided request, no Redis call at all for a shielded one; every status as expected.
    pub fn meets_project_promise(&self) -> bool {
        let expected_scripts = if self.scenario.allows() {
            self.requests
        } else {
            0
        };
        let statuses = if self.scenario.allows() {
            self.allowed == self.requests
        } else {
            self.rejected == self.requests
        };
        self.redis.script_calls == expected_scripts && self.redis.connections == 0 && statuses
    }
}

pub fn run(rig: &mut Rig, requests: u64) -> Result<Vec<ExactCheck>, String> {
    let targets: Vec<Target> = Target::all()
        .into_iter()
        .filter(|t| t.variant.uses_redis() && !t.replica && !t.bare)
        .collect();
    let mut checks = Vec::new();
    for target in targets {
        for scenario in Scenario::ALL {
            checks.push(check(rig, target, scenario, requests)?);
        }
    }
    Ok(checks)
}

fn check(
    rig: &mut Rig,
    target: Target,
    scenario: Scenario,
    requests: u64,
) -> Result<ExactCheck, String> {
    let mut probe = rig.probe(target)?;
    let path = target.path(scenario.budget());
    // Clients of their own, so the load scenarios' keys are not touched.
    let client = |i: u64| match scenario {
        Scenario::HotKey => "198.18.254.1".to_owned(),
        Scenario::Identities => identity_address(20_000 + i as u32),
        Scenario::Flood => "198.18.254.3".to_owned(),
    };
    if scenario.budget() == Budget::Flood {
        // Spend the one allowed request, then be rejected once by the store.
        probe.get(&path, &client(0))?;
        probe.get(&path, &client(0))?;
    } else {
        // One request first, so a one-time cost (the script's first `EVALSHA` answered
        // `NOSCRIPT` and retried as `EVAL`) is not counted as per-request work.
        probe.get(&path, "198.18.254.2")?;
    }
    let before = rig.stats.counters()?;
    let (mut allowed, mut rejected, mut other) = (0, 0, 0);
    for i in 0..requests {
        match probe.get(&path, &client(i))? {
            200..=299 => allowed += 1,
            429 => rejected += 1,
            _ => other += 1,
        }
    }
    let redis = rig.stats.counters()?.since(before);
    Ok(ExactCheck {
        target,
        scenario,
        requests,
        redis,
        allowed,
        rejected,
        other,
    })
}
