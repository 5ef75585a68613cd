use std::fmt;

/// What a route does when the store cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailMode {
    /// Let the request through (logged and counted): for reads, unthrottled beats unavailable.
    Open,
    /// Answer 503 with `Retry-After`: for login and password reset, an outage is exactly
    /// the window an attacker would use.
    Closed,
}

impl FailMode {
    /// The default for a route with these methods: `open` when every method is safe
    /// (`GET`, `HEAD`, `OPTIONS`, `QUERY`), `closed` otherwise (also when the list is empty,
    /// which means "any method"). The attribute applies the same rule at compile time.
    pub fn default_for_methods<'a>(methods: impl IntoIterator<Item = &'a str>) -> Self {
        let mut any = false;
        for method in methods {
            any = true;
            if !matches!(method, "GET" | "HEAD" | "OPTIONS" | "QUERY") {
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
            FailMode::default_for_methods(["GET", "HEAD"]),
            FailMode::Open
        );
        assert_eq!(FailMode::default_for_methods(["POST"]), FailMode::Closed);
        assert_eq!(
            FailMode::default_for_methods(["GET", "POST"]),
            FailMode::Closed
        );
        assert_eq!(FailMode::default_for_methods([]), FailMode::Closed);
    }
}
