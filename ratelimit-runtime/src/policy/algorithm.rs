use std::fmt;

/// How a limit counts requests. See the README's "Choosing an algorithm".
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

    /// The name used in `algorithm = "..."`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Parses the attribute spelling.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
