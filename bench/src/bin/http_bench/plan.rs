//! What a run measures, and in which order: every target in turn inside each (scenario,
//! connections) cell, cell after cell, round after round (a, b, c, d, e…, a, b, …), so
//! drift on a shared machine hits every variant alike.

use std::{fmt, time::Duration};

use ratelimit_bench::{route, Budget, ProjectRoute, Variant};

use crate::wrk::Clients;

/// How many identities the many-clients scenario cycles through.
pub const IDENTITIES: u32 = 10_000;

/// One server route under load: a variant, and for this project one of its routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    pub variant: Variant,
    pub route: Option<ProjectRoute>,
    /// A second server of the same variant, measured last in each cell: how far two
    /// identical servers measured in one cell differ is the noise every ratio of that cell
    /// carries (an A/A comparison).
    pub replica: bool,
    /// This project's route answering without its rate-limit headers (`--no-headers`),
    /// which the floors do not send: what the headers cost. Hot key only.
    pub bare: bool,
}

/// The variants measured twice in each cell, (a′), (f′) and (h′): the baselines of the
/// goals, and (f) beside (h).
pub const REPLICATED: [Variant; 3] = [
    Variant::NoLimiter,
    Variant::FloorPerWorker,
    Variant::FloorHeaders,
];

impl Target {
    /// (a) to (d), (f), (h), (g), this project's route per algorithm and the stacked one,
    /// then the replicas (a′), (f′) and (h′).
    pub fn all() -> Vec<Target> {
        let others = [
            Variant::NoLimiter,
            Variant::Limitation,
            Variant::Governor,
            Variant::Floor,
            Variant::FloorPerWorker,
            Variant::FloorHeaders,
            Variant::AnswerOnly,
        ]
        .map(Target::of);
        let project = ProjectRoute::ALL.map(|route| Target {
            variant: Variant::Project,
            route: Some(route),
            replica: false,
            bare: false,
        });
        let bare = Target {
            variant: Variant::Project,
            route: Some(ProjectRoute::FixedWindow),
            replica: false,
            bare: true,
        };
        let replicas = REPLICATED.map(Target::replica_of);
        others
            .into_iter()
            .chain(project)
            .chain([bare])
            .chain(replicas)
            .collect()
    }

    pub const fn of(variant: Variant) -> Target {
        Target {
            variant,
            route: None,
            replica: false,
            bare: false,
        }
    }

    /// The second server of `variant`.
    pub const fn replica_of(variant: Variant) -> Target {
        Target {
            variant,
            route: None,
            replica: true,
            bare: false,
        }
    }

    /// Whether the target is measured in `scenario`: (g) answers only the flood differently
    /// from (a), so it is measured there alone; the route without headers is measured
    /// where the floors are compared, on the hot key.
    pub fn measures(&self, scenario: Scenario) -> bool {
        if self.bare {
            return scenario == Scenario::HotKey;
        }
        self.variant != Variant::AnswerOnly || scenario == Scenario::Flood
    }

    /// `a`, or `a′` for a replica.
    pub fn letter(&self) -> String {
        let prime = if self.replica { "′" } else { "" };
        format!("{}{prime}", self.variant.letter())
    }

    pub fn path(&self, budget: Budget) -> String {
        route::path(self.variant, self.route, budget)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.route {
            Some(route) if self.bare => {
                write!(f, "({}) {}, no rate-limit headers", self.letter(), route)
            }
            Some(route) => write!(f, "({}) {}", self.letter(), route),
            None => write!(f, "({}) {}", self.letter(), self.variant),
        }
    }
}

/// The traffic of one measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Every request allowed, all from one client (one hot key).
    HotKey,
    /// Every request allowed, each from the next of [`IDENTITIES`] clients.
    Identities,
    /// One client far over a 1-per-hour limit: every request is rejected.
    Flood,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::HotKey, Scenario::Identities, Scenario::Flood];

    pub const fn budget(self) -> Budget {
        match self {
            Scenario::HotKey | Scenario::Identities => Budget::Allow,
            Scenario::Flood => Budget::Flood,
        }
    }

    pub const fn clients(self) -> Clients {
        match self {
            Scenario::HotKey | Scenario::Flood => Clients::One,
            Scenario::Identities => Clients::Many(IDENTITIES),
        }
    }

    /// Whether the scenario's requests should all be allowed.
    pub const fn allows(self) -> bool {
        !matches!(self, Scenario::Flood)
    }

    pub const fn title(self) -> &'static str {
        match self {
            Scenario::HotKey => "all allowed, one hot key",
            Scenario::Identities => "all allowed, 10,000 distinct identities",
            Scenario::Flood => "flood: every request over a 1-per-hour limit",
        }
    }
}

/// One (scenario, connections) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cell {
    pub scenario: Scenario,
    pub connections: usize,
}

/// The whole schedule of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub rounds: usize,
    pub duration: Duration,
    pub cells: Vec<Cell>,
    pub targets: Vec<Target>,
}

impl Plan {
    /// Every scenario at 1, 64 and 256 connections.
    pub fn full(rounds: usize, duration: Duration) -> Plan {
        let cells = Scenario::ALL
            .into_iter()
            .flat_map(|scenario| {
                [1, 64, 256].map(|connections| Cell {
                    scenario,
                    connections,
                })
            })
            .collect();
        Plan {
            rounds,
            duration,
            cells,
            targets: Target::all(),
        }
    }

    /// Every server once, hot key at 64 connections.
    pub fn smoke(duration: Duration) -> Plan {
        Plan {
            rounds: 1,
            duration,
            cells: vec![Cell {
                scenario: Scenario::HotKey,
                connections: 64,
            }],
            targets: Target::all(),
        }
    }

    /// Measurements in run order: (round, cell, target).
    pub fn schedule(&self) -> Vec<(usize, Cell, Target)> {
        let mut order = Vec::new();
        for round in 0..self.rounds {
            for cell in &self.cells {
                for target in &self.targets {
                    if target.measures(cell.scenario) {
                        order.push((round, *cell, *target));
                    }
                }
            }
        }
        order
    }

    pub fn estimated(&self) -> Duration {
        // Each measurement also settles and reads counters for about half a second.
        (self.duration + Duration::from_millis(500)) * self.schedule().len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_interleave_every_target_within_each_cell() {
        let plan = Plan::full(2, Duration::from_secs(1));
        let order = plan.schedule();
        // Three hot-key cells of 15 targets, three of many identities of 14 and three flood
        // cells of 15: (g) is measured in the flood alone, the route without headers on the
        // hot key alone.
        assert_eq!(order.len(), 2 * (3 * 15 + 3 * 14 + 3 * 15));
        let first: Vec<String> = order[..15].iter().map(|(_, _, t)| t.to_string()).collect();
        assert_eq!(first[0], "(a) none");
        assert_eq!(first[3], "(d) floor");
        assert_eq!(first[4], "(f) floor-per-worker");
        assert_eq!(first[5], "(h) floor-headers");
        assert_eq!(first[6], "(e) fixed_window");
        assert_eq!(first[10], "(e) stacked");
        assert_eq!(first[11], "(e) fixed_window, no rate-limit headers");
        // The replicas close each cell, as far from (a), (f) and (h) in time as any target.
        assert_eq!(first[12], "(a′) none");
        assert_eq!(first[13], "(f′) floor-per-worker");
        assert_eq!(first[14], "(h′) floor-headers");
        assert_eq!(order[15].1, plan.cells[1]);
        assert!(order[..132].iter().all(|(round, _, _)| *round == 0));
        let flood: Vec<String> = order
            .iter()
            .filter(|(round, cell, _)| *round == 0 && *cell == plan.cells[6])
            .map(|(_, _, t)| t.to_string())
            .collect();
        assert_eq!(plan.cells[6].scenario, Scenario::Flood);
        assert_eq!(flood.len(), 15);
        assert_eq!(flood[6], "(g) answer-only");
        assert_eq!(Plan::smoke(Duration::from_secs(2)).schedule().len(), 15);
        // One server each: a replica is not its original.
        let targets = Target::all();
        let distinct: std::collections::HashSet<Target> = targets.iter().copied().collect();
        assert_eq!(distinct.len(), targets.len());
        assert_ne!(
            Target::of(Variant::Floor),
            Target::replica_of(Variant::Floor)
        );
    }
}
