//! Which rate-limit header families a limiter sends, and how.

/// Which header families limited responses carry, and how the IETF fields read. Both
/// families are on by default, the IETF fields as draft-ietf-httpapi-ratelimit-headers-11
/// defines them, without a partition key.
///
/// Built from [`both`](Self::both) or [`none`](Self::none) and switched setting by setting,
/// so that a setting added later does not break the code that builds one (a struct literal
/// cannot be written outside this crate):
///
/// ```
/// use ratelimit_runtime::{HeaderFamilies, IetfDraft};
///
/// let draft_only = HeaderFamilies::both().x_ratelimit(false);
/// assert!(!draft_only.x_ratelimit && draft_only.ietf_draft);
/// assert_eq!(HeaderFamilies::default(), HeaderFamilies::both());
/// assert_eq!(HeaderFamilies::none().ietf_draft(true), draft_only);
///
/// // `t` as this crate sent it before draft 11 (seconds until the budget is whole), and a
/// // keyed hash of the client's partition in `pk`:
/// let older = HeaderFamilies::both()
///     .ietf_draft_version(IetfDraft::Draft10)
///     .partition_key(true);
/// assert_eq!(older.draft, IetfDraft::Draft10);
/// assert!(older.partition_key);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeaderFamilies {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds).
    pub x_ratelimit: bool,
    /// `RateLimit-Policy: "name";q=10;w=300` and `RateLimit: "name";r=3;t=120`.
    pub ietf_draft: bool,
    /// What `r` and `t` of `RateLimit` mean ([`IetfDraft`]).
    pub draft: IetfDraft,
    /// `pk` on `RateLimit`: a keyed hash of the client's partition (off by default; needs
    /// [`Keys::secret`](crate::settings::Keys::secret)).
    pub partition_key: bool,
}

/// Which reading of draft-ietf-httpapi-ratelimit-headers the `RateLimit` field follows
/// ([`HeaderFamilies::ietf_draft_version`]). `RateLimit-Policy` reads the same in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IetfDraft {
    /// Draft 11 (May 2026) and 12 (the default): `r` is the quota available now and `t` the
    /// effective window, the seconds within which the client can use no more than `r`,
    /// computed per algorithm (`guide::headers`).
    #[default]
    Draft11,
    /// The reading this crate sent before: `r` the requests left, `t` the seconds until the
    /// budget is whole again (every request counted so far stops counting), as drafts 08 to
    /// 10 read their reset parameter.
    Draft10,
}

impl HeaderFamilies {
    /// Every family (the default).
    pub const fn both() -> Self {
        HeaderFamilies {
            x_ratelimit: true,
            ietf_draft: true,
            draft: IetfDraft::Draft11,
            partition_key: false,
        }
    }

    /// No family: limited responses carry no rate-limit header (a rejection still carries
    /// `Retry-After`).
    pub const fn none() -> Self {
        HeaderFamilies {
            x_ratelimit: false,
            ietf_draft: false,
            draft: IetfDraft::Draft11,
            partition_key: false,
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

    /// Which draft's reading `RateLimit` follows: [`IetfDraft::Draft11`] by default,
    /// [`IetfDraft::Draft10`] for clients written against the older one.
    pub const fn ietf_draft_version(mut self, draft: IetfDraft) -> Self {
        self.draft = draft;
        self
    }

    /// With `pk` on `RateLimit`, or without (the default): 12 bytes of HMAC-SHA256, under
    /// the limiter's [`KeySecret`](crate::key::KeySecret), of the binding limit's key (the
    /// route and the client's identity), so a client that acts for several users can tell
    /// their budgets apart, and nobody can recover the identity from it. Without a key
    /// secret the limiter leaves `pk` out and says so at startup.
    pub const fn partition_key(mut self, on: bool) -> Self {
        self.partition_key = on;
        self
    }
}

impl Default for HeaderFamilies {
    fn default() -> Self {
        HeaderFamilies::both()
    }
}
