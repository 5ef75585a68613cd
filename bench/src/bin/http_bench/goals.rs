//! The performance goals of issue 52, checked against the figures of this run. The floor
//! they are set against is (h): one `EVALSHA` over a connection per worker, this project's
//! own layout, answering with the same five rate-limit headers from that call's figures.

use std::fmt::Write as _;

use ratelimit_bench::{ProjectRoute, Variant};

use crate::{
    exact_checks::ExactCheck,
    numbers::{latency, ratio},
    plan::{Cell, Scenario, Target},
    results::{median, Results},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Met,
    NotMet,
    /// This run did not measure what the goal needs (a smoke run).
    NotMeasured,
    /// The figures reach the goal, but the same server measured twice (A/A) differed by
    /// more than [`AA_NOISE`] in some round: the run cannot tell the goal from noise.
    Unproven,
}

impl Status {
    pub fn text(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::NotMet => "**not met**",
            Status::NotMeasured => "not measured",
            Status::Unproven => "**unproven** (A/A over ±5 % in a round)",
        }
    }

    /// A throughput goal: met when `met` and every round's A/A (`noise`, when measured)
    /// within [`AA_NOISE`] of 1, unproven when only the noise is past it.
    fn within(met: bool, noise: Option<&[f64]>) -> Status {
        let quiet = noise.is_none_or(|rounds| {
            rounds
                .iter()
                .all(|r| r.is_finite() && (r - 1.0).abs() <= AA_NOISE)
        });
        match (met, quiet) {
            (false, _) => Status::NotMet,
            (true, true) => Status::Met,
            (true, false) => Status::Unproven,
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
        bare: false,
    }
}

/// The share of the floor (h) each single algorithm reaches at least, all allowed on one hot
/// key, at 64 and 256 connections.
const AT_THE_FLOOR: f64 = 0.95;
/// The same for the stack of two limits.
const STACK_AT_THE_FLOOR: f64 = 0.92;
/// One client, one connection: the p50 this project adds to (a) is at most this much more
/// than (h)'s, in µs.
const ADDED_P50_OVER_FLOOR_US: f64 = 10.0;
/// The flood's share of (g), a server answering the same 429 and deciding nothing.
const FLOOD_OF_THE_ANSWER: f64 = 0.95;
/// How far from ×1.00 the same server measured twice in one round (A/A) may read for a
/// throughput goal of that cell to count as met: the goals' margins are 5 % and more.
const AA_NOISE: f64 = 0.05;

/// Every goal, one verdict per measured figure.
pub fn evaluate(results: &Results, checks: &[ExactCheck]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for connections in [64, 256] {
        at_least_of_floor(
            results,
            connections,
            |route| {
                if route == ProjectRoute::Stacked {
                    STACK_AT_THE_FLOOR
                } else {
                    AT_THE_FLOOR
                }
            },
            &mut verdicts,
        );
    }
    added_latency(results, &mut verdicts);
    flood(results, checks, &mut verdicts);
    one_script_call(checks, &mut verdicts);
    verdicts
}

fn not_measured(goal: String) -> Verdict {
    Verdict {
        goal,
        figure: "–".to_owned(),
        status: Status::NotMeasured,
    }
}

/// Hot key, `connections` connections: each route's throughput ≥ `at_least(route)` × the
/// floor (h)'s, round by round.
fn at_least_of_floor(
    results: &Results,
    connections: usize,
    at_least: impl Fn(ProjectRoute) -> f64,
    out: &mut Vec<Verdict>,
) {
    let cell = Cell {
        scenario: Scenario::HotKey,
        connections,
    };
    let single = at_least(ProjectRoute::FixedWindow);
    let stacked = at_least(ProjectRoute::Stacked);
    let bounds = if single == stacked {
        format!("every route ≥ {}", ratio(single))
    } else {
        format!(
            "each algorithm ≥ {}, the stack ≥ {}",
            ratio(single),
            ratio(stacked)
        )
    };
    let goal = format!("all allowed, hot key, c{connections}: {bounds} (h) floor");
    let Some(base) = results.baseline(cell, Variant::FloorHeaders) else {
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
    let noise = noise(results, cell, Variant::FloorHeaders);
    out.push(Verdict {
        goal,
        figure: with_noise(figure, results, cell, Variant::FloorHeaders),
        status: Status::within(
            figures
                .iter()
                .all(|(route, r)| r.is_finite() && *r >= at_least(*route)),
            noise.as_deref(),
        ),
    });
}

/// The second server of `variant` against the first in `cell`, round by round (A/A), when
/// the run measured both.
fn noise(results: &Results, cell: Cell, variant: Variant) -> Option<Vec<f64>> {
    let first = results.baseline(cell, variant)?;
    let second = results.row(cell, Target::replica_of(variant))?;
    Some(second.throughput_ratios(first))
}

/// `figure`, followed by how far the second server of `variant` measured from the first in
/// `cell` (A/A), when the run measured both: the noise the cell's ratios carry, its median
/// and, over rounds, its lowest and highest.
fn with_noise(figure: String, results: &Results, cell: Cell, variant: Variant) -> String {
    let Some(rounds) = noise(results, cell, variant) else {
        return figure;
    };
    let mut figure = format!(
        "{figure}; noise: ({}) ÷ ({}) {}",
        Target::replica_of(variant).letter(),
        variant.letter(),
        ratio(median(&rounds))
    );
    let lowest = rounds.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = rounds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if rounds.len() > 1 && lowest.is_finite() && highest.is_finite() {
        let _ = write!(figure, " (rounds {}–{highest:.2})", ratio(lowest));
    }
    figure
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
        let figure = per_route(&mine, |c| {
            format!(
                "{} req → {} scripts, {} conns",
                c.requests, c.redis.script_calls, c.redis.connections
            )
        });
        out.push(Verdict {
            goal,
            figure,
            status: Status::of(mine.iter().all(|c| c.meets_project_promise())),
        });
    }
}

/// Each route's exact figure, `every route: …` when they all read the same.
fn per_route(checks: &[&ExactCheck], figure: impl Fn(&ExactCheck) -> String) -> String {
    let figures: Vec<String> = checks.iter().map(|c| figure(c)).collect();
    if figures.windows(2).all(|pair| pair[0] == pair[1]) {
        return format!(
            "every route: {}",
            figures.first().map_or("", String::as_str)
        );
    }
    checks
        .iter()
        .zip(&figures)
        .map(|(c, figure)| format!("{}: {figure}", c.target.route.map_or("?", |r| r.name())))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Flood: ≥ ×0.95 of (g), the same 429 answered with nothing decided, and no Redis call for
/// shielded keys.
fn flood(results: &Results, checks: &[ExactCheck], out: &mut Vec<Verdict>) {
    for connections in [1, 64, 256] {
        let cell = Cell {
            scenario: Scenario::Flood,
            connections,
        };
        let goal = format!(
            "flood, c{connections}: this project ≥ {} (g) the answer alone",
            ratio(FLOOD_OF_THE_ANSWER)
        );
        let Some(answer) = results.baseline(cell, Variant::AnswerOnly) else {
            out.push(not_measured(goal));
            continue;
        };
        let figures: Vec<(ProjectRoute, f64)> = ProjectRoute::ALL
            .into_iter()
            .filter_map(|route| {
                Some((
                    route,
                    results.row(cell, project(route))?.throughput_ratio(answer),
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
            status: Status::within(
                figures.len() == ProjectRoute::ALL.len()
                    && figures
                        .iter()
                        .all(|(_, r)| r.is_finite() && *r >= FLOOD_OF_THE_ANSWER),
                noise(results, cell, Variant::NoLimiter).as_deref(),
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
        figure: per_route(&shielded, |c| {
            format!("{} rejected → {} commands", c.rejected, c.redis.commands)
        }),
        status: Status::of(
            shielded
                .iter()
                .all(|c| c.meets_project_promise() && c.redis.commands == 0),
        ),
    });
}

/// One client, one connection: the p50 this project adds to (a) is at most
/// [`ADDED_P50_OVER_FLOOR_US`] more than the floor (h) adds, one Redis round trip over the
/// same layout with the same headers.
fn added_latency(results: &Results, out: &mut Vec<Verdict>) {
    let cell = Cell {
        scenario: Scenario::HotKey,
        connections: 1,
    };
    let goal = format!(
        "hot key, c1: added p50 over (a) ≤ the (h) floor's + {} µs",
        ADDED_P50_OVER_FLOOR_US
    );
    let (Some(none), Some(floor)) = (
        results.baseline(cell, Variant::NoLimiter),
        results.baseline(cell, Variant::FloorHeaders),
    ) else {
        out.push(not_measured(goal));
        return;
    };
    let floor_added = floor.added_p50_us(none);
    let added: Vec<(ProjectRoute, f64)> = ProjectRoute::ALL
        .into_iter()
        .filter_map(|route| Some((route, results.row(cell, project(route))?.added_p50_us(none))))
        .collect();
    let mut figure = added
        .iter()
        .map(|(route, us)| format!("{route} +{}", latency(*us)))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(figure, " against (h) +{}", latency(floor_added));
    if let Some(second) = results.row(cell, Target::replica_of(Variant::FloorHeaders)) {
        // The noise: the second floor server's added p50 against the first's.
        let _ = write!(
            figure,
            "; noise: (h′) +{}",
            latency(second.added_p50_us(none))
        );
    }
    out.push(Verdict {
        goal,
        figure,
        status: Status::of(
            added.len() == ProjectRoute::ALL.len()
                && added
                    .iter()
                    .all(|(_, us)| us.is_finite() && *us <= floor_added + ADDED_P50_OVER_FLOOR_US),
        ),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Row;

    fn row(cell: Cell, target: Target, rps: &[f64], p50: &[f64]) -> Row {
        Row::for_test(cell, target, rps, p50)
    }

    /// Routes that read the same are one figure; one that differs names every route.
    #[test]
    fn exact_figures_name_the_routes_only_when_they_differ() {
        let check = |route: ProjectRoute, rejected: u64| ExactCheck {
            target: project(route),
            scenario: Scenario::Flood,
            requests: 10,
            redis: crate::redis_stats::Counters::default(),
            allowed: 10 - rejected,
            rejected,
            other: 0,
        };
        let figure = |c: &ExactCheck| format!("{} rejected", c.rejected);
        let alike = [
            check(ProjectRoute::FixedWindow, 10),
            check(ProjectRoute::Gcra, 10),
        ];
        assert_eq!(
            per_route(&alike.iter().collect::<Vec<_>>(), figure),
            "every route: 10 rejected"
        );
        let unlike = [
            check(ProjectRoute::FixedWindow, 10),
            check(ProjectRoute::Gcra, 9),
        ];
        assert_eq!(
            per_route(&unlike.iter().collect::<Vec<_>>(), figure),
            "fixed_window: 10 rejected; gcra: 9 rejected"
        );
    }

    #[test]
    fn ratio_goals_carry_the_noise_of_their_baselines_replica() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 64,
        };
        let results = Results {
            rows: vec![
                row(cell, Target::of(Variant::FloorPerWorker), &[100.0; 3], &[]),
                row(
                    cell,
                    Target::replica_of(Variant::FloorPerWorker),
                    &[90.0, 95.0, 120.0],
                    &[],
                ),
            ],
        };
        // Round by round 0.90, 0.95, 1.20: the median is the noise figure, and the rounds
        // its spread.
        assert_eq!(
            with_noise(
                "x ×1.10".to_owned(),
                &results,
                cell,
                Variant::FloorPerWorker
            ),
            "x ×1.10; noise: (f′) ÷ (f) ×0.95 (rounds ×0.90–1.20)"
        );
        // No replica measured: the figure alone.
        assert_eq!(
            with_noise("x".to_owned(), &results, cell, Variant::NoLimiter),
            "x"
        );
    }

    /// The flood is held against (g), the same answer with nothing decided, and shows how
    /// much of (a) that answer itself leaves.
    #[test]
    fn the_flood_goal_is_held_against_the_answer_alone() {
        let cell = Cell {
            scenario: Scenario::Flood,
            connections: 64,
        };
        let mut rows = vec![row(cell, Target::of(Variant::NoLimiter), &[100.0; 3], &[])];
        rows.extend(
            ProjectRoute::ALL
                .into_iter()
                .map(|route| row(cell, project(route), &[80.0; 3], &[])),
        );
        let verdict = |rows: &[Row]| {
            let mut verdicts = Vec::new();
            flood(
                &Results {
                    rows: rows.to_vec(),
                },
                &[],
                &mut verdicts,
            );
            verdicts
                .into_iter()
                .find(|v| v.goal.starts_with("flood, c64"))
                .unwrap()
        };
        // Without (g) measured, no verdict.
        assert_eq!(verdict(&rows).status, Status::NotMeasured);
        rows.push(row(
            cell,
            Target::of(Variant::AnswerOnly),
            &[85.0, 84.0, 82.0],
            &[],
        ));
        // 80 of 84: ×0.95 of the answer alone, met, though ×0.80 of (a).
        let met = verdict(&rows);
        assert_eq!(met.status, Status::Met);
        assert!(
            met.figure.starts_with("fixed_window ×0.95")
                && met.figure.ends_with("the answer alone: (g) ÷ (a) ×0.84"),
            "{}",
            met.figure
        );
        let last = rows.len() - 1;
        rows[last] = row(cell, Target::of(Variant::AnswerOnly), &[90.0; 3], &[]);
        assert_eq!(verdict(&rows).status, Status::NotMet);
    }

    #[test]
    fn the_one_connection_goal_is_held_against_the_floor_with_headers() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 1,
        };
        let mut rows = vec![
            row(cell, Target::of(Variant::NoLimiter), &[1.0], &[70.0]),
            row(cell, Target::of(Variant::FloorHeaders), &[1.0], &[170.0]),
            row(
                cell,
                Target::replica_of(Variant::FloorHeaders),
                &[1.0],
                &[160.0],
            ),
        ];
        rows.extend(
            ProjectRoute::ALL
                .into_iter()
                .map(|route| row(cell, project(route), &[1.0], &[175.0])),
        );
        let verdict = |rows: &[Row]| {
            let mut verdicts = Vec::new();
            added_latency(
                &Results {
                    rows: rows.to_vec(),
                },
                &mut verdicts,
            );
            assert_eq!(verdicts.len(), 1);
            verdicts.remove(0)
        };
        let met = verdict(&rows);
        assert!(
            met.figure
                .ends_with("stacked +105 µs against (h) +100 µs; noise: (h′) +90 µs"),
            "{}",
            met.figure
        );
        assert_eq!(met.status, Status::Met);
        // +111 µs is past +100 + 10.
        let last = rows.len() - 1;
        rows[last] = row(cell, project(ProjectRoute::Stacked), &[1.0], &[181.0]);
        assert_eq!(verdict(&rows).status, Status::NotMet);
    }

    /// A throughput goal is met only when the same server measured twice (A/A) read within
    /// 5 % of itself in every round; figures that reach the goal in a noisier run leave it
    /// unproven, and figures short of it are not met whatever the noise.
    #[test]
    fn a_goal_met_in_a_noisy_run_is_unproven() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 256,
        };
        let evaluated = |replica: &[f64], route: f64| {
            let mut rows = vec![row(
                cell,
                Target::of(Variant::FloorHeaders),
                &[100.0; 3],
                &[],
            )];
            rows.push(row(
                cell,
                Target::replica_of(Variant::FloorHeaders),
                replica,
                &[],
            ));
            rows.extend(
                ProjectRoute::ALL
                    .into_iter()
                    .map(|r| row(cell, project(r), &[route; 3], &[])),
            );
            evaluate(&Results { rows }, &[])
                .into_iter()
                .find(|v| v.goal.starts_with("all allowed, hot key, c256"))
                .unwrap()
        };
        let quiet = evaluated(&[96.0, 100.0, 104.0], 97.0);
        assert_eq!(quiet.status, Status::Met);
        assert!(
            quiet
                .figure
                .ends_with("noise: (h′) ÷ (h) ×1.00 (rounds ×0.96–1.04)"),
            "{}",
            quiet.figure
        );
        let noisy = evaluated(&[94.0, 100.0, 104.0], 97.0);
        assert_eq!(noisy.status, Status::Unproven);
        assert!(
            noisy.figure.ends_with("(rounds ×0.94–1.04)"),
            "{}",
            noisy.figure
        );
        assert_eq!(
            evaluated(&[94.0, 100.0, 104.0], 90.0).status,
            Status::NotMet
        );
    }

    /// Each algorithm is held to ×0.95 of (h) and the stack to ×0.92; a goal is not "met"
    /// with only some of the project's routes measured, and a baseline round with no request
    /// (a ratio of infinity) does not make a median "met".
    #[test]
    fn a_goal_needs_every_route_and_finite_ratios() {
        let cell = Cell {
            scenario: Scenario::HotKey,
            connections: 64,
        };
        let verdict = |rows: Vec<Row>| {
            let mut verdicts = Vec::new();
            evaluate(&Results { rows }, &[]).into_iter().for_each(|v| {
                if v.goal.starts_with("all allowed, hot key, c64") {
                    verdicts.push(v);
                }
            });
            assert_eq!(verdicts.len(), 1);
            verdicts.remove(0).status
        };
        let floor = row(
            cell,
            Target::of(Variant::FloorHeaders),
            &[100.0, 100.0],
            &[],
        );
        let mut rows = vec![
            floor.clone(),
            row(cell, project(ProjectRoute::Gcra), &[96.0; 2], &[]),
        ];
        assert_eq!(verdict(rows.clone()), Status::NotMeasured);
        rows.extend(
            ProjectRoute::ALL
                .into_iter()
                .filter(|r| *r != ProjectRoute::Gcra && *r != ProjectRoute::Stacked)
                .map(|route| row(cell, project(route), &[96.0; 2], &[])),
        );
        rows.push(row(cell, project(ProjectRoute::Stacked), &[93.0; 2], &[]));
        assert_eq!(verdict(rows.clone()), Status::Met);
        // One algorithm at ×0.94: not met.
        rows[1] = row(cell, project(ProjectRoute::Gcra), &[94.0; 2], &[]);
        assert_eq!(verdict(rows.clone()), Status::NotMet);
        rows[1] = row(cell, project(ProjectRoute::Gcra), &[96.0; 2], &[]);
        // A floor round with no request: that round's ratio is infinite, and with two rounds
        // the median too.
        rows[0] = row(cell, Target::of(Variant::FloorHeaders), &[0.0, 0.0], &[]);
        assert_eq!(verdict(rows), Status::NotMet);
    }
}
