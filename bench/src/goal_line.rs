//! The goals `redis_capacity` and `sync_fleet` print, one per line on stdout beside their
//! tables, for a full run of `http_bench` to set beside its own in one table:
//! `goal<TAB>what it asks<TAB>what this run measured<TAB>met|not met`.

/// How a goal line begins.
pub const PREFIX: &str = "goal\t";

/// One goal: what it asks, what the run measured, and whether that meets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub goal: String,
    pub figure: String,
    pub met: bool,
}

impl Goal {
    /// The line that says it (tabs and line breaks in its texts become spaces).
    pub fn line(&self) -> String {
        let clean = |text: &str| text.replace(['\t', '\n'], " ");
        format!(
            "{PREFIX}{}\t{}\t{}",
            clean(&self.goal),
            clean(&self.figure),
            if self.met { "met" } else { "not met" }
        )
    }

    /// Every goal line in `output`; other lines are left alone.
    pub fn parse_all(output: &str) -> Vec<Goal> {
        output
            .lines()
            .filter_map(|line| {
                let mut parts = line.strip_prefix(PREFIX)?.split('\t');
                let (goal, figure, status) = (parts.next()?, parts.next()?, parts.next()?);
                let met = match status {
                    "met" => true,
                    "not met" => false,
                    _ => return None,
                };
                Some(Goal {
                    goal: goal.to_owned(),
                    figure: figure.to_owned(),
                    met,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goal_lines_are_read_back_among_other_output() {
        let goals = [
            Goal {
                goal: "calls per request ≤ 0.01".to_owned(),
                figure: "0.0026".to_owned(),
                met: true,
            },
            Goal {
                goal: "a\ttab".to_owned(),
                figure: "×0.79".to_owned(),
                met: false,
            },
        ];
        let output = format!(
            "| a table |\n{}\ntext\n{}\ngoal\tbroken\n",
            goals[0].line(),
            goals[1].line()
        );
        let read = Goal::parse_all(&output);
        assert_eq!(read.len(), 2);
        assert_eq!(read[0], goals[0]);
        assert_eq!((read[1].goal.as_str(), read[1].met), ("a tab", false));
    }
}
