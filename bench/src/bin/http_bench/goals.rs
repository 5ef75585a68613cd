//! The performance goals of issue 7, checked against the figures of this run.

use std::time::Duration;

use ratelimit_bench::{ProjectRoute, Variant};

use crate::{
    exact_checks::ExactCheck,
    numbers::{latency, ratio},
    plan::{Cell, Scenario, Target},
    results::Results,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Met,
    NotMet,
    /// This run did not measure what the goal needs (a smoke run).
    NotMeasured,
}

impl Status {
    pub fn text(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::NotMet => "**not met**",
            Status::NotMeasured => "not measured",
        }
    }

    fn of(met: bool) -> Status {
        if met {
            Status::Met
        } else {
            Status::NotMet
        }
    }
}

#[derive(Debug, Clone)]
pub struct Verdict {
    pub goal: String,
    pub figure: String,
    pub status: Status,
}

fn project(route: ProjectRoute) -> Target {
    Target {
        variant: Variant::Project,
        route: Some(route),
    }
}

/// Every goal, one verdict per measured figure.
pub fn evaluate(results: &Results, checks: &[ExactCheck], round_trip: Duration) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    throughput_against(results, Variant::Floor, 1.0, &mut verdicts);
    throughput_against(results, Variant::Limitation, 7.0, &mut verdicts);
    one_script_call(checks, &mut verdicts);
    flood(results, checks, &mut verdicts);
    added_latency(results, round_trip, &mut verdicts);
    verdicts
}

fn not_measured(goal: String) -> Verdict {
    Verdict {
        goal,
        figure: "–".to_owned(),
        status: Status::NotMeasured,
    }
}

/// Hot key, 64 connections: this project's throughput ≥ `at_least` × `baseline`'s, round by round.
fn throughput_against(results: &Results, baseline: Variant, at_least: f64, out: &mut Vec<Verdict>) {
    let cell = Cell {
        scenario: Scenario::HotKey,
        connections: 64,
    };
    let goal = format!(
        "all allowed, hot key, c64: this project ≥ {} ({}) {}",
        ratio(at_least),
        baseline.letter(),
        baseline
    );
    let Some(base) = results.baseline(cell, baseline) else {
        out.push(not_measured(goal));
        return;
    };
    let figures: Vec<(ProjectRoute, f64)> = ProjectRoute::ALL
        .into_iter()
        .filter_map(|route| {
            Some((
                route,
                results.row(cell, project(route))?.throughput_ratio(base),
            ))
        })
        .collect();
    if figures.is_empty() {
        out.push(not_measured(goal));
        return;
    }
    let figure = figures
        .iter()
        .map(|(route, r)| format!("{route} {}", ratio(*r)))
        .collect::<Vec<_>>()
        .join(", ");
    out.push(Verdict {
        goal,
        figure,
        status: Status::of(figures.iter().all(|(_, r)| *r >= at_least)),
    });
}

/// Exactly one script call and no new connection per decided request, every algorithm and
/// the stacked policy (exact sequential checks).
fn one_script_call(checks: &[ExactCheck], out: &mut Vec<Verdict>) {
    for scenario in [Scenario::HotKey, Scenario::Identities] {
        let goal = format!(
            "one script call, 0 new connections per limited request ({})",
            if scenario == Scenario::HotKey {
                "one client"
            } else {
                "a new client each request"
            }
        );
        let mine: Vec<&ExactCheck> = checks
            .iter()
            .filter(|c| c.target.variant == Variant::Project && c.scenario == scenario)
            .collect();
        if mine.is_empty() {
            out.push(not_measured(goal));
            continue;
        }
        let figure = mine
            .iter()
            .map(|c| {
                format!(
                    "{}: {} req → {} scripts, {} conns",
                    c.target.route.map_or("?", |r| r.name()),
                    c.requests,
                    c.redis.script_calls,
                    c.redis.connections
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        out.push(Verdict {
            goal,
            figure,
            status: Status::of(mine.iter().all(|c| c.meets_project_promise())),
        });
    }
}

/// Flood: ≥ 0.9 of the no-limiter throughput, and no Redis call for shielded keys.
fn flood(results: &Results, checks: &[ExactCheck], out: &mut Vec<Verdict>) {
    for connections in [1, 64, 256] {
        let cell = Cell {
            scenario: Scenario::Flood,
            connections,
        };
        let goal = format!("flood, c{connections}: this project ≥ ×0.90 (a) none");
        let Some(none) = results.baseline(cell, Variant::NoLimiter) else {
            out.push(not_measured(goal));
            continue;
        };
        let figures: Vec<(ProjectRoute, f64)> = ProjectRoute::ALL
            .into_iter()
            .filter_map(|route| {
                Some((
                    route,
                    results.row(cell, project(route))?.throughput_ratio(none),
                ))
            })
            .collect();
        out.push(Verdict {
            goal,
            figure: figures
                .iter()
                .map(|(route, r)| format!("{route} {}", ratio(*r)))
                .collect::<Vec<_>>()
                .join(", "),
            status: Status::of(!figures.is_empty() && figures.iter().all(|(_, r)| *r >= 0.9)),
        });
    }
    let goal = "flood: no Redis call for a shielded key".to_owned();
    let shielded: Vec<&ExactCheck> = checks
        .iter()
        .filter(|c| c.target.variant == Variant::Project && c.scenario == Scenario::Flood)
        .collect();
    if shielded.is_empty() {
        out.push(not_measured(goal));
        return;
    }
    out.push(Verdict {
        goal,
        figure: shielded
            .iter()
            .map(|c| {
                format!(
                    "{}: {} rejected → {} commands",
                    c.target.route.map_or("?", |r| r.name()),
                    c.rejected,
                    c.redis.commands
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        status: Status::of(
            shielded
                .iter()
                .all(|c| c.meets_project_promise() && c.redis.commands == 0),
        ),
    });
}

/// One client, one connection: the p50 this project adds to (a) is at most one Redis round
/// trip + 10%, where a round trip is what the floor (d) adds, and, stricter, a bare `PING`.
fn added_latency(results: &Results, round_trip: Duration, out: &mut Vec<Verdict>) {
    let cell = Cell {
        scenario: Scenario::HotKey,
        connections: 1,
    };
    let (Some(none), Some(floor)) = (
        results.baseline(cell, Variant::NoLimiter),
        results.baseline(cell, Variant::Floor),
    ) else {
        out.push(not_measured(
            "c1 added p50 ≤ one Redis round trip + 10%".to_owned(),
        ));
        return;
    };
    let floor_added = floor.added_p50_us(none);
    let ping = round_trip.as_secs_f64() * 1e6;
    let added: Vec<(ProjectRoute, f64)> = ProjectRoute::ALL
        .into_iter()
        .filter_map(|route| Some((route, results.row(cell, project(route))?.added_p50_us(none))))
        .collect();
    let list = added
        .iter()
        .map(|(route, us)| format!("{route} +{}", latency(*us)))
        .collect::<Vec<_>>()
        .join(", ");
    for (bound_name, bound) in [
        (
            format!("the floor's own added p50, +{}", latency(floor_added)),
            floor_added,
        ),
        (
            format!("a bare PING from the driver, {}", latency(ping)),
            ping,
        ),
    ] {
        out.push(Verdict {
            goal: format!("hot key, c1: added p50 over (a) ≤ 1.1 × one round trip ({bound_name})"),
            figure: list.clone(),
            status: Status::of(!added.is_empty() && added.iter().all(|(_, us)| *us <= 1.1 * bound)),
        });
    }
}
