use std::fmt;

use super::{problems::line, Problems};
use crate::identity::{
    ApiKeySource, Canonicalizer, IdentitySources, TrustedProxies, UserIdSource, UsernameReader,
};

/// Who a request is: the client's address behind proxies, how usernames are read from
/// bodies, the user id and the API key. Given to
/// [`RateLimiter::identity`](crate::RateLimiter::identity).
///
/// ```
/// use ratelimit_runtime::{
///     identity::{TrustedProxies, UsernameReader},
///     settings::Identities,
///     store::MemoryStore,
///     RateLimiter,
/// };
///
/// #[derive(serde::Deserialize)]
/// struct Login {
///     email: String,
/// }
///
/// let limiter = RateLimiter::new(MemoryStore::new()).identity(
///     Identities::new()
///         .trusted_proxies(TrustedProxies::hops(1))
///         .username(UsernameReader::json_or_form::<Login>(|l| &l.email))
///         .route_username("POST /admin/login", UsernameReader::field("login")),
/// );
/// assert!(limiter.check_settings().is_ok());
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Identities {
    pub(crate) sources: IdentitySources,
    problems: Problems,
}

impl fmt::Debug for Identities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identities")
            .field("trusted_proxies", &self.sources.trusted_proxies)
            .field(
                "routes_with_own_username",
                &self.sources.route_usernames.len(),
            )
            .finish_non_exhaustive()
    }
}

impl Identities {
    /// The defaults: no trusted proxy, usernames from the `username` field, the
    /// [`UserId`](crate::identity::UserId) extension, the API key from `X-API-Key`, then
    /// `Authorization: Bearer`.
    pub fn new() -> Self {
        Identities::default()
    }

    /// How many proxies the operator runs in front of the app (default none).
    pub fn trusted_proxies(mut self, proxies: TrustedProxies) -> Self {
        self.sources.trusted_proxies = proxies;
        self
    }

    /// How every route that counts usernames reads them from request bodies, unless it has
    /// a reader of its own ([`route_username`](Self::route_username)). The default is
    /// [`UsernameReader::field`]`("username")`; [`UsernameReader::json_or_form`] reads
    /// them with the handler's own type, as `web::Json<T>` and `web::Form<T>` do.
    pub fn username(mut self, reader: UsernameReader) -> Self {
        self.sources.username = reader;
        self
    }

    /// How one route reads usernames, in place of [`username`](Self::username)'s.
    /// `route` is `METHOD /full/pattern` as the App serves it, with any scope's prefix
    /// (`"POST /api/login"`); a route the App does not declare with a `username` identity
    /// is reported in an error line on the first request. Text that is not an upper-case
    /// method, one space and a pattern starting with `/` is refused
    /// ([`check_settings`](crate::RateLimiter::check_settings)).
    pub fn route_username(mut self, route: &str, reader: UsernameReader) -> Self {
        let well_formed = route.split_once(' ').is_some_and(|(method, pattern)| {
            !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase())
                && pattern.starts_with('/')
        });
        let setting = format!("`RateLimiter::identity(..).route_username({route:?}, ..)`");
        if well_formed {
            self.problems.record(setting, Ok(()));
            self.sources
                .route_usernames
                .insert(route.to_owned(), reader);
        } else {
            let why = "name the route as `METHOD /pattern`, e.g. `POST /login`";
            self.problems
                .record(setting.clone(), Err(line(setting, why)));
        }
        self
    }

    /// How a submitted username becomes the name its budget is kept under (default
    /// [`canonical_username`](crate::identity::canonical_username): NFKC, case folding,
    /// invisible characters removed, trimmed). Give it the function your account store
    /// compares names with, so every spelling of one account shares one budget.
    pub fn canonical_username(mut self, canonicalizer: Canonicalizer) -> Self {
        self.sources.canonical_username = canonicalizer;
        self
    }

    /// Where the user id comes from (default the [`UserId`](crate::identity::UserId)
    /// extension).
    pub fn user_id(mut self, source: UserIdSource) -> Self {
        self.sources.user_id = source;
        self
    }

    /// Where the API key comes from (default `X-API-Key`, then `Authorization: Bearer`).
    pub fn api_key(mut self, source: ApiKeySource) -> Self {
        self.sources.api_key = source;
        self
    }

    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.sources
            .trusted_proxies
            .problems()
            .chain(self.problems.lines())
    }
}
