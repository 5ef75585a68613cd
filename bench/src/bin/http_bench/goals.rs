//! The performance goals of issue 7, checked against the figures of this run.

use std::fmt::Write as _;

use ratelimit_bench::{ProjectRoute, Variant};

use crate::{
    exact_checks::ExactCheck,
    numbers::{latency, ratio},
    plan::{Cell, Scenario, Target},
    results::Results,
    round_trip::RoundTrips,
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
        replica: false,
    }
}

/// Every goal, one verdict per measured figure.
pub fn evaluate(results: &Results, checks: &[ExactCheck], round_trip: RoundTrips) -> Vec<Verdict> {
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
    if figures.len() < ProjectRoute::ALL.len() {
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
        figure: with_noise(figure, results, cell, baseline),
        status: Status::of(figures.iter().all(|(_, r)| r.is_finite() && *r >= at_least)),
    });
}

/// `figure`, followed by how far the second server of `variant` measured from the first in
/// `cell` (A/A), when the run measured both: the noise the cell's ratios carry.
fn with_noise(figure: String, results: &Results, cell: Cell, variant: Variant) -> String {
    let replica = Target::replica_of(variant);
    let (Some(first), Some(second)) = (results.baseline(cell, variant), results.row(cell, replica))
    else {
        return figure;
    };
    format!(
        "{figure}; noise: ({}) ÷ ({}) {}",
        replica.letter(),
        variant.letter(),
        ratio(second.throughput_ratio(first))
    )
}

/// `figure`, followed by (g) ÷ (a) when the run measured (g) in `cell`: the share of the no
/// limiter's throughput left once a server answers this project's 429 and decides nothing,
/// the most any limiter sending that answer could reach.
fn with_answer_only(figure: String, results: &Results, cell: Cell) -> String {
    let (Some(none), Some(answer)) = (
        results.baseline(cell, Variant::NoLimiter),
        results.baseline(cell, Variant::AnswerOnly),
    ) else {
        return figure;
    };
    format!(
        "{figure}; the answer alone: (g) ÷ (a) {}",
        ratio(answer.throughput_ratio(none))
    )
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
        if mine.len() < ProjectRoute::ALL.len() {
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
        let figure = figures
            .iter()
            .map(|(route, r)| format!("{route} {}", ratio(*r)))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Verdict {
            goal,
            figure: with_answer_only(
                with_noise(figure, results, cell, Variant::NoLimiter),
                results,
                cell,
            ),
            status: Status::of(
                figures.len() == ProjectRoute::ALL.len()
                    && figures.iter().all(|(_, r)| r.is_finite() && *r >= 0.9),
            ),
        });
    }
    let goal = "flood: no Redis call for a shielded key".to_owned();
    let shielded: Vec<&ExactCheck> = checks
        .iter()
        .filter(|c| c.target.variant == Variant::Project && c.scenario == Scenario::Flood)
        .collect();
    if shielded.len() < ProjectRoute::ALL.len() {
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
/// trip + 10%, where a round trip is what the floor (d) adds, and, stricter, a bare `PING`
/// from the servers' CPU.
fn added_latency(results: &Results, round_trip: RoundTrips, out: &mut Vec<Verdict>) {
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
    let ping = round_trip.from_servers.as_secs_f64() * 1e6;
    let added: Vec<(ProjectRoute, f64)> = ProjectRoute::ALL
        .into_iter()
        .filter_map(|route| Some((route, results.row(cell, project(route))?.added_p50_us(none))))
        .collect();
    let mut list = added
        .iter()
        .map(|(route, us)| format!("{route} +{}", latency(*us)))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(second) = results.row(cell, Target::replica_of(Variant::Floor)) {
        // The noise: the second floor server's added p50 against the first's.
        let _ = write!(
            list,
            "; noise: (d′) +{} against (d) +{}",
            latency(second.added_p50_us(none)),
            latency(floor_added)
        );
    }
    for (bound_name, bound) in [
        (
            format!("the floor's own added p50, +{}", latency(floor_added)),
            floor_added,
        ),
        (
            format!("a bare PING from the servers' CPU, {}", latency(ping)),
            ping,
        ),
    ] {
        out.push(Verdict {
            goal: format!("hot key, c1: added p50 over (a) ≤ 1.1 × one round trip ({bound_name})"),
            figure: list.clone(),
            status: Status::of(
                added.len() == ProjectRoute::ALL.len()
                    && added
                        .iter()
                        .all(|(_, us)| us.is_finite() && *us <= 1.1 * bound),
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::results::Row;

    fn row(cell: Cell, target: Target, rps: &[f64], p50: &[f64]) -> Row {
        Row::for_test(cell, target, rps, p50)
    }

    #[test]
    fn ratio_goals_carry_the_noise_of_their_baselines_replica() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 64,
        };
        let results = Results {
            rows: vec![
                row(cell, Target::of(Variant::Floor), &[100.0; 3], &[]),
                row(
                    cell,
                    Target::replica_of(Variant::Floor),
                    &[90.0, 95.0, 120.0],
                    &[],
                ),
            ],
        };
        // Round by round 0.90, 0.95, 1.20: the median is the noise figure.
        assert_eq!(
            with_noise("x ×1.10".to_owned(), &results, cell, Variant::Floor),
            "x ×1.10; noise: (d′) ÷ (d) ×0.95"
        );
        // No replica measured: the figure alone.
        assert_eq!(
            with_noise("x".to_owned(), &results, cell, Variant::NoLimiter),
            "x"
        );
    }

    #[test]
    fn the_flood_goal_shows_what_the_answer_alone_leaves() {
        let cell = Cell {
            scenario: Scenario::Flood,
            connections: 64,
        };
        let mut rows = vec![
            row(cell, Target::of(Variant::NoLimiter), &[100.0; 3], &[]),
            row(cell, project(ProjectRoute::Gcra), &[80.0; 3], &[]),
        ];
        let figure = |rows: &[Row]| {
            let mut verdicts = Vec::new();
            flood(
                &Results {
                    rows: rows.to_vec(),
                },
                &[],
                &mut verdicts,
            );
            let verdict = verdicts
                .into_iter()
                .find(|v| v.goal.starts_with("flood, c64"))
                .unwrap();
            assert_eq!(verdict.status, Status::NotMet);
            verdict.figure
        };
        // Without (g) measured: the figure alone.
        assert_eq!(figure(&rows), "gcra ×0.80");
        rows.push(row(
            cell,
            Target::of(Variant::AnswerOnly),
            &[85.0, 90.0, 95.0],
            &[],
        ));
        assert_eq!(
            figure(&rows),
            "gcra ×0.80; the answer alone: (g) ÷ (a) ×0.90"
        );
    }

    #[test]
    fn the_one_connection_goal_shows_the_second_floors_added_latency() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 1,
        };
        let mut rows = vec![
            row(cell, Target::of(Variant::NoLimiter), &[1.0], &[70.0]),
            row(cell, Target::of(Variant::Floor), &[1.0], &[170.0]),
            row(cell, Target::replica_of(Variant::Floor), &[1.0], &[160.0]),
        ];
        rows.extend(
            ProjectRoute::ALL
                .into_iter()
                .map(|route| row(cell, project(route), &[1.0], &[175.0])),
        );
        let results = Results { rows };
        let mut verdicts = Vec::new();
        added_latency(
            &results,
            RoundTrips {
                beside_redis: Duration::from_micros(20),
                from_servers: Duration::from_micros(60),
            },
            &mut verdicts,
        );
        assert_eq!(verdicts.len(), 2);
        assert!(
            verdicts[0]
                .figure
                .ends_with("stacked +105 µs; noise: (d′) +90 µs against (d) +100 µs"),
            "{}",
            verdicts[0].figure
        );
        assert_eq!(verdicts[0].status, Status::Met);
        assert_eq!(verdicts[1].status, Status::NotMet);
    }

    /// A goal is not "met" with only some of the project's routes measured, and a baseline
    /// round with no request (a ratio of infinity) does not make a median "met".
    #[test]
    fn a_goal_needs_every_route_and_finite_ratios() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 64,
        };
        let verdict = |rows: Vec<Row>| {
            let mut verdicts = Vec::new();
            throughput_against(&Results { rows }, Variant::Floor, 1.0, &mut verdicts);
            verdicts.remove(0).status
        };
        let floor = row(cell, Target::of(Variant::Floor), &[100.0, 100.0], &[]);
        let mut rows = vec![
            floor.clone(),
            row(cell, project(ProjectRoute::Gcra), &[150.0; 2], &[]),
        ];
        assert_eq!(verdict(rows.clone()), Status::NotMeasured);
        rows.extend(
            ProjectRoute::ALL
                .into_iter()
                .filter(|r| *r != ProjectRoute::Gcra)
                .map(|route| row(cell, project(route), &[150.0; 2], &[])),
        );
        assert_eq!(verdict(rows.clone()), Status::Met);
        // A floor round with no request: that round's ratio is infinite, and with two rounds
        // the median too.
        rows[0] = row(cell, Target::of(Variant::Floor), &[0.0, 0.0], &[]);
        assert_eq!(verdict(rows), Status::NotMet);
    }
}
