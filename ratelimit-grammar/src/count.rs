//! Which requests use a limit's budget: every one, or only those that fail.

use std::fmt;

use crate::suggest;

/// Which requests use a limit's budget (`count = "failures"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Count {
    /// Every request the limit allows uses one unit (the default).
    #[default]
    Requests,
    /// Every request reserves one unit on the way in, as with `Requests` (so attempts in
    /// flight count, and concurrent ones cannot overshoot); a request the handler answers
    /// with a success gives its unit back. A sign-in route counts wrong passwords, not
    /// sign-ins.
    Failures,
}

impl Count {
    /// Every name `count = "..."` takes.
    pub const NAMES: [&'static str; 2] = ["requests", "failures"];

    /// The name used in `count = "..."`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Count::Requests => "requests",
            Count::Failures => "failures",
        }
    }

    /// Parses `count = "<text>"`.
    ///
    /// # Errors
    ///
    /// The message for a name that is none of [`Count::NAMES`], with the likely one.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "requests" => Ok(Count::Requests),
            "failures" => Ok(Count::Failures),
            _ => Err(format!(
                "unknown count `{text}`; expected one of {}{}",
                suggest::list(&Self::NAMES),
                suggest::did_you_mean(text, &Self::NAMES)
            )),
        }
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_near_miss_is_named() {
        for name in Count::NAMES {
            assert_eq!(Count::parse(name).map(Count::as_str), Ok(name));
        }
        let message = Count::parse("failure").unwrap_err();
        assert!(message.ends_with("did you mean `failures`?"), "{message}");
    }
}
