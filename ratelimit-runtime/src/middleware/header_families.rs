//! Which rate-limit header families a limiter sends.

/// Which header families limited responses carry. Both are on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFamilies {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds).
    pub x_ratelimit: bool,
    /// `RateLimit-Policy: "name";q=10;w=300` and `RateLimit: "name";r=3;t=120`.
    pub ietf_draft: bool,
}

impl Default for HeaderFamilies {
    fn default() -> Self {
        HeaderFamilies {
            x_ratelimit: true,
            ietf_draft: true,
        }
    }
}
