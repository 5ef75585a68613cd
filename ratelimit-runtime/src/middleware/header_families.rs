//! Which rate-limit header families a limiter sends.

/// Which header families limited responses carry. Both are on by default.
///
/// Built from [`both`](Self::both) or [`none`](Self::none) and switched family by family,
/// so that a family added later does not break the code that builds one (a struct literal
/// cannot be written outside this crate):
///
/// ```
/// use ratelimit_runtime::HeaderFamilies;
///
/// let draft_only = HeaderFamilies::both().x_ratelimit(false);
/// assert!(!draft_only.x_ratelimit && draft_only.ietf_draft);
/// assert_eq!(HeaderFamilies::default(), HeaderFamilies::both());
/// assert_eq!(HeaderFamilies::none().ietf_draft(true), draft_only);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeaderFamilies {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds).
    pub x_ratelimit: bool,
    /// `RateLimit-Policy: "name";q=10;w=300` and `RateLimit: "name";r=3;t=120`.
    pub ietf_draft: bool,
}

impl HeaderFamilies {
    /// Every family (the default).
    pub const fn both() -> Self {
        HeaderFamilies {
            x_ratelimit: true,
            ietf_draft: true,
        }
    }

    /// No family: limited responses carry no rate-limit header (a rejection still carries
    /// `Retry-After`).
    pub const fn none() -> Self {
        HeaderFamilies {
            x_ratelimit: false,
            ietf_draft: false,
        }
    }

    /// With `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`, or without.
    pub const fn x_ratelimit(mut self, on: bool) -> Self {
        self.x_ratelimit = on;
        self
    }

    /// With `RateLimit-Policy` and `RateLimit` (the IETF draft's fields), or without.
    pub const fn ietf_draft(mut self, on: bool) -> Self {
        self.ietf_draft = on;
        self
    }
}

impl Default for HeaderFamilies {
    fn default() -> Self {
        HeaderFamilies::both()
    }
}
