//! Whether a route's responses tell clients its limits (`headers = "none"`).

use std::fmt;

use crate::suggest;

/// Whether a limited route's responses carry the rate-limit headers (`headers = "..."`).
///
/// `"none"` hides the thresholds on routes where they help an attacker (sign-in, password
/// reset, one-time codes): no `RateLimit`, `RateLimit-Policy` or `X-RateLimit-*` field on
/// any answer, and a 429 whose body names no policy. A 429 still carries `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RouteHeaders {
    /// The header families the limiter is set to send (the default).
    #[default]
    All,
    /// No rate-limit header, whatever the limiter's header families.
    Hidden,
}

impl RouteHeaders {
    /// Every name `headers = "..."` takes.
    pub const NAMES: [&'static str; 2] = ["all", "none"];

    /// The name used in `headers = "..."`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RouteHeaders::All => "all",
            RouteHeaders::Hidden => "none",
        }
    }

    /// Parses `headers = "<text>"`.
    ///
    /// # Errors
    ///
    /// The message for a name that is none of [`RouteHeaders::NAMES`], with the likely one.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "all" => Ok(RouteHeaders::All),
            "none" => Ok(RouteHeaders::Hidden),
            _ => Err(format!(
                "unknown headers `{text}`; expected one of {}{}",
                suggest::list(&Self::NAMES),
                suggest::did_you_mean(text, &Self::NAMES)
            )),
        }
    }
}

impl fmt::Display for RouteHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_near_miss_is_named() {
        for name in RouteHeaders::NAMES {
            assert_eq!(RouteHeaders::parse(name).unwrap().as_str(), name);
        }
        let message = RouteHeaders::parse("nnone").unwrap_err();
        assert!(message.starts_with("unknown headers `nnone`; expected one of `all`, `none`"));
        assert!(message.ends_with("did you mean `none`?"), "{message}");
    }
}
