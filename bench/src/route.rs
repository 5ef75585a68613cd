//! The routes every server serves and the limits behind them.
//!
//! - `allow`: a limit no run can reach, so every request is allowed (hot key and many
//!   identities);
//! - `flood`: 1 per hour, so every request after the first is over the limit;
//! - `memory` (this project only): 1,000 per hour per algorithm (the stacked policy with 100
//!   per 10 minutes besides, whose GCRA key outlives the fill), for the Redis bytes each
//!   active identity costs. The other Redis variants are measured on `allow`, whose keys also
//!   live for an hour.
//!
//! Variants (a) to (d) serve `/allow` and `/flood`; this project serves one route per
//! algorithm and one stacked policy under each: `/allow/fixed_window`, `/flood/gcra`, ...

use std::fmt;

use crate::Variant;

/// The limit of the `allow` routes of variants (b) to (d), per [`ALLOW_WINDOW_SECS`].
pub const ALLOW_LIMIT: u32 = 2_000_000_000;
/// The window of the `allow` routes.
pub const ALLOW_WINDOW_SECS: u64 = 3600;
/// The limit of the `flood` routes, per [`FLOOD_WINDOW_SECS`].
pub const FLOOD_LIMIT: u32 = 1;
/// The window of the `flood` routes.
pub const FLOOD_WINDOW_SECS: u64 = 3600;

/// What a route's limit lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Never reached: every request is allowed.
    Allow,
    /// 1 per hour: every request after the first is rejected.
    Flood,
    /// A realistic limit with an hour-long window, for memory per identity.
    Memory,
}

impl Budget {
    /// The first path segment.
    pub const fn segment(self) -> &'static str {
        match self {
            Budget::Allow => "allow",
            Budget::Flood => "flood",
            Budget::Memory => "memory",
        }
    }
}

/// This project's routes under each budget: one per algorithm and one stacked policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjectRoute {
    /// `algorithm = "fixed_window"`.
    FixedWindow,
    /// `algorithm = "sliding_window"`.
    SlidingWindow,
    /// `algorithm = "sliding_log"`.
    SlidingLog,
    /// `algorithm = "gcra"`.
    Gcra,
    /// Two stacked limits (sliding window per hour + GCRA per second), decided in one call.
    Stacked,
}

impl ProjectRoute {
    /// Every route, in the order the tables list them.
    pub const ALL: [ProjectRoute; 5] = [
        ProjectRoute::FixedWindow,
        ProjectRoute::SlidingWindow,
        ProjectRoute::SlidingLog,
        ProjectRoute::Gcra,
        ProjectRoute::Stacked,
    ];

    /// The route named `name` (`fixed_window`, ..., `stacked`).
    pub fn from_name(name: &str) -> Option<ProjectRoute> {
        ProjectRoute::ALL
            .into_iter()
            .find(|route| route.name() == name)
    }

    /// The last path segment, named after the algorithm.
    pub const fn name(self) -> &'static str {
        match self {
            ProjectRoute::FixedWindow => "fixed_window",
            ProjectRoute::SlidingWindow => "sliding_window",
            ProjectRoute::SlidingLog => "sliding_log",
            ProjectRoute::Gcra => "gcra",
            ProjectRoute::Stacked => "stacked",
        }
    }
}

impl fmt::Display for ProjectRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The path of `budget` on `variant` (`route` only for this project).
pub fn path(variant: Variant, route: Option<ProjectRoute>, budget: Budget) -> String {
    match (variant, route) {
        (Variant::Project, Some(route)) => format!("/{}/{}", budget.segment(), route.name()),
        _ => format!("/{}", budget.segment()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_budget_and_the_algorithm() {
        assert_eq!(path(Variant::Floor, None, Budget::Flood), "/flood");
        assert_eq!(
            path(
                Variant::Project,
                Some(ProjectRoute::SlidingLog),
                Budget::Allow
            ),
            "/allow/sliding_log"
        );
    }
}
