//! What a route does when the store cannot answer, and the default for its methods.

use std::fmt;

use crate::suggest;

/// The methods that cannot change state (RFC 9110 safe methods, and the draft `QUERY`): a
/// route that takes only these fails open by default.
pub const SAFE_METHODS: [&str; 4] = ["GET", "HEAD", "OPTIONS", "QUERY"];

/// What a route does when the store cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailMode {
    /// Let the request through (logged and counted): for reads, unthrottled beats unavailable.
    Open,
    /// Answer 503 with `Retry-After`: for login and password reset, an outage is exactly
    /// the window an attacker would use.
    Closed,
    /// Keep limiting in this process, with the same algorithm at a share of the limit
    /// (`ceil(limit / instances)`), until the store answers again.
    Local,
}

impl FailMode {
    /// Every fail mode's name.
    pub const NAMES: [&'static str; 3] = ["open", "closed", "local"];

    /// The default for a route with these methods: `open` when every method is safe
    /// ([`SAFE_METHODS`]), `closed` otherwise (also when the list is empty, which means
    /// "any method").
    pub fn default_for_methods<'a>(methods: impl IntoIterator<Item = &'a str>) -> Self {
        let mut any = false;
        for method in methods {
            any = true;
            if !SAFE_METHODS.contains(&method) {
                return FailMode::Closed;
            }
        }
        if any {
            FailMode::Open
        } else {
            FailMode::Closed
        }
    }

    /// The name used in `fail = "..."`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailMode::Open => "open",
            FailMode::Closed => "closed",
            FailMode::Local => "local",
        }
    }

    /// Parses `fail = "<text>"`.
    ///
    /// # Errors
    ///
    /// The message for a name that is no fail mode, with the likely one.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "open" => Ok(FailMode::Open),
            "closed" => Ok(FailMode::Closed),
            "local" => Ok(FailMode::Local),
            _ => Err(format!(
                "unknown fail mode `{text}`; expected one of {}{}",
                suggest::list(&Self::NAMES),
                suggest::did_you_mean(text, &Self::NAMES)
            )),
        }
    }
}

impl fmt::Display for FailMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_methods_fail_open_and_the_rest_fail_closed() {
        assert_eq!(FailMode::default_for_methods(["GET"]), FailMode::Open);
        assert_eq!(
            FailMode::default_for_methods(["GET", "HEAD", "OPTIONS", "QUERY"]),
            FailMode::Open
        );
        assert_eq!(FailMode::default_for_methods(["POST"]), FailMode::Closed);
        assert_eq!(
            FailMode::default_for_methods(["GET", "POST"]),
            FailMode::Closed
        );
        assert_eq!(FailMode::default_for_methods([]), FailMode::Closed);
        assert!(FailMode::parse("closd")
            .unwrap_err()
            .ends_with("did you mean `closed`?"));
    }
}
