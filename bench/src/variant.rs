//! The servers measured side by side, one `bench_server --variant <flag>` each.

use std::fmt;

/// One server variant; every one runs the same trivial handler with the same worker count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// (a) no limiter at all: the ceiling.
    NoLimiter,
    /// (b) actix-limitation (crates.io): Redis fixed window.
    Limitation,
    /// (c) actix-governor (crates.io): in-memory GCRA, per process.
    Governor,
    /// (d) one `EVALSHA` (INCR + PEXPIRE) per request over one multiplexed connection: the
    /// floor of one Redis round trip.
    Floor,
    /// (e) this project: `RateLimiter` + `#[rate_limit]` handlers over `RedisStore`.
    Project,
    /// (f) the floor with one connection per actix worker, made on the worker's thread (this
    /// project's layout), instead of one per process.
    FloorPerWorker,
    /// (h) (f) answering with the five rate-limit headers this project sends, their figures
    /// from its one `EVALSHA`: the floor of a limiter that tells clients their limits.
    FloorHeaders,
    /// (g) no limiter, answering every `/flood` request with this project's 429 (captured
    /// once from its fixed-window flood route, then replayed): what the answer alone costs,
    /// without identifying the client or deciding anything. Measured in the flood only.
    AnswerOnly,
}

impl Variant {
    /// Every variant, in the order each round runs them.
    pub const ALL: [Variant; 8] = [
        Variant::NoLimiter,
        Variant::Limitation,
        Variant::Governor,
        Variant::Floor,
        Variant::FloorPerWorker,
        Variant::FloorHeaders,
        Variant::AnswerOnly,
        Variant::Project,
    ];

    /// The `--variant` flag of `bench_server`.
    pub const fn flag(self) -> &'static str {
        match self {
            Variant::NoLimiter => "none",
            Variant::Limitation => "limitation",
            Variant::Governor => "governor",
            Variant::Floor => "floor",
            Variant::Project => "project",
            Variant::FloorPerWorker => "floor-per-worker",
            Variant::FloorHeaders => "floor-headers",
            Variant::AnswerOnly => "answer-only",
        }
    }

    /// The letter the tables use.
    pub const fn letter(self) -> char {
        match self {
            Variant::NoLimiter => 'a',
            Variant::Limitation => 'b',
            Variant::Governor => 'c',
            Variant::Floor => 'd',
            Variant::Project => 'e',
            Variant::FloorPerWorker => 'f',
            Variant::FloorHeaders => 'h',
            Variant::AnswerOnly => 'g',
        }
    }

    /// What the variant is, for tables.
    pub const fn description(self) -> &'static str {
        match self {
            Variant::NoLimiter => "no limiter",
            Variant::Limitation => "actix-limitation 0.6 (Redis fixed window)",
            Variant::Governor => "actix-governor 0.10 (in-memory GCRA)",
            Variant::Floor => "floor: one EVALSHA (INCR+PEXPIRE), multiplexed",
            Variant::Project => "this project (RateLimiter + #[rate_limit], RedisStore)",
            Variant::FloorPerWorker => "floor, one connection per worker (this project's layout)",
            Variant::FloorHeaders => "floor (f) sending this project's five rate-limit headers",
            Variant::AnswerOnly => "no limiter, answering with this project's 429 (replayed)",
        }
    }

    /// The variant a `--variant` flag names.
    pub fn from_flag(flag: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.flag() == flag)
    }

    /// Whether the variant counts in Redis.
    pub const fn uses_redis(self) -> bool {
        matches!(
            self,
            Variant::Limitation
                | Variant::Floor
                | Variant::FloorPerWorker
                | Variant::FloorHeaders
                | Variant::Project
        )
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_and_letters_are_distinct() {
        for v in Variant::ALL {
            assert_eq!(Variant::from_flag(v.flag()), Some(v));
        }
        let letters: std::collections::HashSet<char> =
            Variant::ALL.iter().map(|v| v.letter()).collect();
        assert_eq!(letters.len(), Variant::ALL.len());
        assert_eq!(Variant::from_flag("nope"), None);
    }
}
