//! The counting algorithms a limit may use.

use std::fmt;

use crate::suggest;

/// How a limit counts requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// One counter per window; up to twice the limit can pass across a window boundary.
    FixedWindow,
    /// Current and previous window counters, the previous one weighted by how much of it
    /// still overlaps the sliding window. The default.
    #[default]
    SlidingWindow,
    /// One sorted-set entry per allowed request: exact, memory grows with the limit.
    SlidingLog,
    /// Generic cell rate algorithm: one key holding the theoretical arrival time.
    Gcra,
}

impl Algorithm {
    /// Every algorithm, in the order the attribute lists them.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::Gcra,
    ];

    /// Every algorithm's name, in the order the attribute lists them.
    pub const NAMES: [&'static str; 4] = ["fixed_window", "sliding_window", "sliding_log", "gcra"];

    /// The name used in `algorithm = "..."`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Gcra => "gcra",
        }
    }

    /// The algorithm's position in [`ALL`](Self::ALL): tables indexed by it, sized
    /// `Algorithm::ALL.len()`, stop compiling when an algorithm is added.
    pub const fn index(self) -> usize {
        match self {
            Algorithm::FixedWindow => 0,
            Algorithm::SlidingWindow => 1,
            Algorithm::SlidingLog => 2,
            Algorithm::Gcra => 3,
        }
    }

    /// Parses the attribute spelling.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// Parses `algorithm = "<text>"`: the algorithm, or the message naming the choices.
    ///
    /// # Errors
    ///
    /// The message for a name that is no algorithm, with the likely one.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::from_name(text).ok_or_else(|| {
            format!(
                "unknown algorithm `{text}`; expected one of {}{}",
                suggest::list(&Self::NAMES),
                suggest::did_you_mean(text, &Self::NAMES)
            )
        })
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
