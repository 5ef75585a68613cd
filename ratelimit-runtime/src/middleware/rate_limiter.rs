//! The App-level middleware's builder: [`RateLimiter`] and its configuration, and the
//! per-worker [`Limiter`] it makes. Its service (`service.rs`) installs the limiter for the
//! route guards and applies the default policy to every request whose route has no
//! declaration, so no route is ever silently unlimited.

use std::{
    cell::OnceCell,
    fmt,
    rc::Rc,
    sync::{Arc, OnceLock},
    time::Duration,
};

use actix_web::http::StatusCode;

use super::{
    declared_routes::DeclaredRoutes, flood_shield::FloodShield, headers::HeaderFamilies,
    limiter::Limiter, local_fallback::LocalFallback,
};
use crate::{
    clock::Clock,
    identity::{
        ApiKeySource, Canonicalizer, IdentitySources, TrustedProxies, UserIdSource, UsernameReader,
    },
    key::{valid_prefix, KeySecret, RouteKey, DEFAULT_PREFIX},
    policy::{Algorithm, FailMode, Identity, Limit, RoutePolicy, Window, MAX_STACKED},
    store::{CheckRequest, Store, StoreError},
};

/// The default policy for undeclared routes: 120 per minute, sliding window.
const DEFAULT_LIMITS: &[Limit] = &[Limit::new(
    120,
    Window::from_secs(60),
    Algorithm::SlidingWindow,
)];

/// Installs rate limiting on an App: `App::new().wrap(RateLimiter::new(store))`.
///
/// Declared routes are limited by the guard their `#[rate_limit]` adds; this middleware
/// makes the limiter available to those guards and applies the default policy (120 per
/// minute by user id, else IP; configurable) to every other request.
#[derive(Clone)]
pub struct RateLimiter {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Clock,
    pub(super) sources: IdentitySources,
    pub(super) prefix: String,
    pub(super) secret: Option<KeySecret>,
    pub(super) timeout: Option<Duration>,
    headers: HeaderFamilies,
    shield_capacity: usize,
    unavailable_retry_secs: u64,
    default_limits: &'static [Limit],
    default_identity: Identity,
    default_fail: Option<FailMode>,
    /// The flood shield every worker of this limiter shares, made by the first.
    pub(super) shield: Arc<OnceLock<Arc<FloodShield>>>,
    /// The App's declared routes, as the first worker to serve a request read them.
    pub(super) declared: Arc<OnceLock<Arc<DeclaredRoutes>>>,
    /// The declared routes of the App the coverage check read with this limiter inside,
    /// for naming routes before it serves.
    pub(super) checked: Arc<OnceLock<Arc<DeclaredRoutes>>>,
    /// How many instances share the store: a route that fails `local` gets this share.
    instances: u32,
    /// Whether [`RateLimiter::instances`] was given.
    instances_set: bool,
    /// The local limiter of routes that fail `local`, shared by every worker.
    fallback: Arc<OnceLock<Arc<LocalFallback>>>,
    /// Whether a status is a success, for limits that count failures only.
    success: fn(StatusCode) -> bool,
    /// Where overrides are read from, when anywhere.
    pub(super) overrides: Option<crate::overrides::Overrides>,
    /// The shadow switch, declarations in code and their problems (`rollout.rs`).
    pub(super) rollout: super::rollout_state::Rollout,
}

/// The default success of a limit that counts failures only: a 2xx. A redirect is not one:
/// a form sign-in answers a wrong password with `303 See Other` back to its form.
fn two_hundreds(status: StatusCode) -> bool {
    status.is_success()
}

impl fmt::Debug for RateLimiter {
    /// What it was configured with (the store by its kind; no identity or closure shown),
    /// so an app state holding a limiter can derive `Debug`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("store", &self.store.kind())
            .field("prefix", &self.prefix)
            .field("key_secret", &self.secret)
            .field("timeout", &self.timeout)
            .field("headers", &self.headers)
            .field("default_limits", &self.default_limits)
            .field("default_identity", &self.default_identity)
            .field("default_fail", &self.default_fail)
            .field("instances", &self.instances)
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// A limiter counting in `store`.
    pub fn new(store: impl Store) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A limiter counting in a shared store.
    pub fn from_arc(store: Arc<dyn Store>) -> Self {
        RateLimiter {
            store,
            clock: Clock::Store,
            sources: IdentitySources::default(),
            prefix: DEFAULT_PREFIX.to_owned(),
            secret: None,
            timeout: None,
            headers: HeaderFamilies::default(),
            shield_capacity: 10_000,
            unavailable_retry_secs: 1,
            default_limits: DEFAULT_LIMITS,
            default_identity: Identity::UserIdElseIp,
            default_fail: None,
            shield: Arc::default(),
            declared: Arc::default(),
            checked: Arc::default(),
            instances: 1,
            instances_set: false,
            fallback: Arc::default(),
            success: two_hundreds,
            overrides: None,
            rollout: super::rollout_state::Rollout::default(),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self.shield = Arc::default();
        self.fallback = Arc::default();
        self
    }

    /// Injects the time (tests); the default is the store's own clock (Redis `TIME`).
    pub fn clock(self, clock: impl Into<Clock>) -> Self {
        self.with(|s| s.clock = clock.into())
    }

    /// How many proxies the operator runs in front of the app (default none).
    pub fn trusted_proxies(self, proxies: TrustedProxies) -> Self {
        self.with(|s| s.sources.trusted_proxies = proxies)
    }

    /// How every route that counts usernames reads them from request bodies, unless it has
    /// a reader of its own ([`route_username_reader`](Self::route_username_reader)). The
    /// default is [`UsernameReader::field`]`("username")`.
    pub fn username_reader(self, reader: UsernameReader) -> Self {
        self.with(|s| s.sources.username = reader)
    }

    /// Reads usernames by deserializing request bodies into the handler's own type `T`, as
    /// `web::Json<T>` and `web::Form<T>` do, and taking the name `get` returns: every shape
    /// the handler accepts yields the username the handler sees. Shorthand for
    /// [`username_reader`](Self::username_reader)`(UsernameReader::json_or_form::<T>(get))`.
    ///
    /// ```
    /// use ratelimit_runtime::{store::MemoryStore, RateLimiter};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Login {
    ///     username: String,
    ///     password: String,
    /// }
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new()).username_from::<Login>(|l| &l.username);
    /// # let _ = limiter;
    /// ```
    pub fn username_from<T: serde::de::DeserializeOwned + 'static>(
        self,
        get: fn(&T) -> &str,
    ) -> Self {
        self.username_reader(UsernameReader::json_or_form::<T>(get))
    }

    /// How one route reads usernames, in place of the limiter's
    /// [`username_reader`](Self::username_reader). `route` is `METHOD /full/pattern` as the
    /// App serves it, with any scope's prefix (`"POST /api/login"`); a route the App does not
    /// declare with a `username` identity is reported in an error line on the first request.
    ///
    /// # Panics
    ///
    /// When `route` is not an upper-case method, one space and a pattern starting with `/`.
    pub fn route_username_reader(self, route: &str, reader: UsernameReader) -> Self {
        let well_formed = route.split_once(' ').is_some_and(|(method, pattern)| {
            !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase())
                && pattern.starts_with('/')
        });
        assert!(
            well_formed,
            "`route_username_reader(\"{route}\", ..)`: name the route as `METHOD /pattern`, e.g. `POST /login`"
        );
        self.with(|s| {
            s.sources.route_usernames.insert(route.to_owned(), reader);
        })
    }

    /// How a submitted username becomes the name its budget is kept under (default
    /// [`canonical_username`](crate::identity::canonical_username): NFKC, case folding,
    /// invisible characters removed, trimmed). Give it the function your account store
    /// compares names with, so every spelling of one account shares one budget.
    pub fn canonical_username(self, canonicalizer: Canonicalizer) -> Self {
        self.with(|s| s.sources.canonical_username = canonicalizer)
    }

    /// The deployment secret personal values in keys are hashed under (HMAC-SHA256):
    /// usernames, user ids, API keys and header values, and client addresses when the
    /// secret says so. Every instance of a fleet must share it; changing it starts every
    /// budget afresh. Without one, those values are plain SHA-256 hashes, which a dictionary
    /// reverses, and the limiter says so once at startup.
    pub fn key_secret(self, secret: KeySecret) -> Self {
        self.with(|s| s.secret = Some(secret))
    }

    /// Where the user id comes from (default the [`UserId`](crate::identity::UserId) extension).
    pub fn user_id(self, source: UserIdSource) -> Self {
        self.with(|s| s.sources.user_id = source)
    }

    /// Where the API key comes from (default `X-API-Key`, then `Authorization: Bearer`).
    pub fn api_key(self, source: ApiKeySource) -> Self {
        self.with(|s| s.sources.api_key = source)
    }

    /// The key prefix (default `rl`).
    ///
    /// # Panics
    ///
    /// When the prefix is empty, not ASCII, or contains braces, white space or control
    /// characters.
    pub fn key_prefix(self, prefix: &str) -> Self {
        assert!(
            valid_prefix(prefix),
            "invalid key prefix `{prefix}`: use printable ASCII without `{{` or `}}`"
        );
        self.with(|s| s.prefix = prefix.to_owned())
    }

    /// The longest a request waits for the store before the route's failure policy applies,
    /// in place of the store's own timeout, longer or shorter (a `RedisClusterStore` check
    /// still ends after the longer of its connect timeout and its own timeout, before its
    /// connection stops waiting for the reply). By default the store's own timeout applies
    /// (50 ms for the Redis stores, configured on their builders); a store without one is
    /// given 50 ms.
    ///
    /// # Panics
    ///
    /// When `timeout` is under 1 ms (a configuration value of "0"): tokio's timers count
    /// whole milliseconds, so store checks would time out at random.
    pub fn timeout(self, timeout: Duration) -> Self {
        assert!(
            timeout >= Duration::from_millis(1),
            "`RateLimiter::timeout({timeout:?})`: a rate-limit timeout under 1 ms would fail store checks at random; give it at least 1 ms"
        );
        self.with(|s| s.timeout = Some(timeout))
    }

    /// Which header families limited responses carry, which draft's reading `RateLimit`
    /// follows, and whether it carries a partition key ([`HeaderFamilies`];
    /// `guide::headers`). A route declared with `headers = "none"` sends none of them.
    pub fn headers(self, headers: HeaderFamilies) -> Self {
        self.with(|s| s.headers = headers)
    }

    /// How many rejected keys the flood shield remembers per process (default 10,000;
    /// 0 turns it off).
    pub fn flood_shield_capacity(self, capacity: usize) -> Self {
        self.with(|s| s.shield_capacity = capacity)
    }

    /// `Retry-After` of the 503 a fail-closed route answers during a store outage
    /// (default 1 s), in whole seconds rounded up (at least 1), as a 429's is: a client
    /// is never told to come back before the time given.
    pub fn unavailable_retry_after(self, retry: Duration) -> Self {
        let secs = retry.as_secs() + u64::from(retry.subsec_nanos() > 0);
        self.with(|s| s.unavailable_retry_secs = secs.max(1))
    }

    /// The limits of routes with no declaration (default 120 per minute, sliding window).
    /// Meant for start-up: the limits live for the rest of the program.
    ///
    /// # Panics
    ///
    /// When `limits` is empty or longer than 8, or two of them share an algorithm and a
    /// window (they would count in one key): here, at configuration, not on the first
    /// undeclared request.
    pub fn default_limits(self, limits: Vec<Limit>) -> Self {
        assert!(
            (1..=MAX_STACKED).contains(&limits.len()),
            "the default policy needs 1 to 8 limits"
        );
        let limits: &'static [Limit] = Box::leak(limits.into_boxed_slice());
        // The checks every request's policy is built with, run once now.
        let _ = RoutePolicy::new(limits, Identity::UserIdElseIp, FailMode::Open, false);
        self.with(|s| s.default_limits = limits)
    }

    /// The identity of routes with no declaration (default user id, else IP).
    ///
    /// # Panics
    ///
    /// When `identity` has no part, names one twice or names a header that cannot exist
    /// (as [`RoutePolicy::new`]).
    pub fn default_identity(self, identity: Identity) -> Self {
        identity.assert_valid();
        self.with(|s| s.default_identity = identity)
    }

    /// The failure policy of routes with no declaration (default: open for `GET`, `HEAD`,
    /// `OPTIONS` and `QUERY`, closed otherwise, as for declared routes).
    pub fn default_fail(self, fail: FailMode) -> Self {
        self.with(|s| s.default_fail = Some(fail))
    }

    /// How long [`check_store`](Self::check_store) waits for a second check when the first
    /// timed out.
    pub const STARTUP_GRACE: Duration = Duration::from_secs(1);

    /// Asks the store, as a startup check, and logs which store the limiter counts in and whether
    /// it answered: `info` with the time it took, or `warn` with the error (the app may still
    /// start: routes then fail open, closed or local, as declared, until the store answers). One
    /// check of a key of its own (`<prefix>:{GET:/__ratelimit_startup}` with its limit's suffix,
    /// `:fw1` in Redis; 1 per millisecond: under the store's clock it expires at once, under an
    /// injected one after ten minutes), bounded as a request's check is. When that check times out,
    /// one more is given up to [`STARTUP_GRACE`](Self::STARTUP_GRACE) (a store's first connection
    /// is made and retried in the background): a store slow to connect then reports ready, and one
    /// whose connection keeps failing names why (a wrong password, address or TLS setting) instead
    /// of a timeout. So a store that never answers holds this call about a second longer than a
    /// request's timeout.
    ///
    /// ```
    /// # actix_web::rt::System::new().block_on(async {
    /// use ratelimit_runtime::{store::MemoryStore, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new());
    /// assert!(limiter.check_store().await.is_ok());
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// The store's error when it did not answer: the second check's, or a timeout.
    pub async fn check_store(&self) -> Result<Duration, StoreError> {
        const PROBE: &[Limit] = &[Limit::new(
            1,
            Window::from_millis(1),
            Algorithm::FixedWindow,
        )];
        let key = RouteKey::new(&self.prefix, "GET", "/__ratelimit_startup", &[]);
        let request = CheckRequest {
            key: &key,
            limits: PROBE,
            now_millis: self.clock.now_millis(),
        };
        // Bounded as a request's check is: by the limiter's timeout when set, else by the
        // store's own (a Redis store bounds every call), else by the default.
        let started = std::time::Instant::now();
        let mut answered = match (self.timeout, self.store.timeout()) {
            (Some(timeout), _) => {
                tokio::time::timeout(timeout, self.store.check_within(request, timeout))
                    .await
                    .unwrap_or_else(|_| Err(StoreError::timeout(timeout)))
            }
            (None, Some(_)) => self.store.check(request).await,
            (None, None) => {
                let timeout = crate::store::DEFAULT_TIMEOUT;
                tokio::time::timeout(timeout, self.store.check(request))
                    .await
                    .unwrap_or_else(|_| Err(StoreError::timeout(timeout)))
            }
        };
        if answered
            .as_ref()
            .is_err_and(|error| error.kind() == crate::store::StoreErrorKind::Timeout)
        {
            // The first connection may still be being made, or failing and retried: its
            // outcome, not the request timeout, is what an operator needs to read.
            let grace = Self::STARTUP_GRACE;
            let second = tokio::time::timeout(grace, self.store.check_within(request, grace))
                .await
                .unwrap_or_else(|_| Err(StoreError::timeout(grace)));
            if !second
                .as_ref()
                .is_err_and(|error| error.kind() == crate::store::StoreErrorKind::Timeout)
            {
                answered = second;
            }
        }
        let kind = self.store.kind();
        match answered {
            Ok(_) => {
                let took = started.elapsed();
                tracing::info!(
                    target: "ratelimit",
                    store = kind,
                    answered_in_ms = took.as_secs_f64() * 1000.0,
                    "rate limiter ready: counting in {kind}{}",
                    if kind == "memory" {
                        " (limits are per process, not shared by a fleet)"
                    } else {
                        ""
                    }
                );
                Ok(took)
            }
            Err(error) => {
                let hint = if error.kind() == crate::store::StoreErrorKind::Timeout {
                    " (neither within the timeout nor a second later: the server is silent or unreachable, or its connection is still being retried; later store errors name the cause)"
                } else {
                    ""
                };
                tracing::warn!(
                    target: "ratelimit",
                    store = kind,
                    %error,
                    "rate limiter store did not answer at startup: until it does, routes that fail closed answer 503, routes that fail open pass uncounted, routes that fail local are limited in this process{hint}"
                );
                Err(error)
            }
        }
    }

    /// How many instances of the app share the store (default 1). While the store fails, a
    /// route that fails `local` is limited in each process at `ceil(limit / instances)`, so
    /// a fleet of this many instances lets through at most `instances × ceil(limit /
    /// instances)` (the declared limit when `instances` divides it). The workers of one
    /// process share that share when they share this limiter, cloned into each worker's App
    /// as the examples do; a limiter built inside the server's closure is one per worker.
    ///
    /// # Panics
    ///
    /// When `instances` is 0.
    pub fn instances(self, instances: u32) -> Self {
        assert!(
            instances > 0,
            "`RateLimiter::instances(0)`: a fleet has at least one instance"
        );
        self.with(|s| {
            s.instances = instances;
            s.instances_set = true;
        })
    }

    /// Which answers are successes for limits that count failures only (`count =
    /// "failures"`): a request such a limit allowed gives its unit back when its answer's
    /// status is one (default: 2xx; a redirect is a failure, as a form sign-in's `303` back
    /// to its form after a wrong password). An error a handler returns counts by its
    /// response's status; a handler that panics never answers, so it counts as a failure. A
    /// handler that marks its attempt ([`AttemptOutcome`](crate::AttemptOutcome)) wins over
    /// the status.
    ///
    /// ```
    /// use actix_web::http::StatusCode;
    /// use ratelimit_runtime::{store::MemoryStore, RateLimiter};
    ///
    /// // Every redirect a success too, as the sign-ins of this app redirect only after a
    /// // right password.
    /// let limiter = RateLimiter::new(MemoryStore::new())
    ///     .success_statuses(|status: StatusCode| status.is_success() || status.is_redirection());
    /// ```
    pub fn success_statuses(self, success: fn(StatusCode) -> bool) -> Self {
        self.with(|s| s.success = success)
    }

    /// Reads overrides (limits by route and tier, allow and deny lists) from a file and a
    /// Redis hash while the App runs: see [`overrides`](crate::overrides). Starts the one
    /// thread that reads them and waits up to 2 s for its first read. Build the limiter
    /// once, outside `HttpServer::new`'s closure, and clone it there: every `Overrides`
    /// reads on its own.
    pub fn overrides(self, overrides: crate::overrides::Overrides) -> Self {
        overrides.start(Duration::from_secs(2));
        self.with(|s| s.overrides = Some(overrides))
    }

    /// The overrides this limiter reads, if any.
    pub fn overrides_in_use(&self) -> Option<&crate::overrides::Overrides> {
        self.overrides.as_ref()
    }

    /// The policy applied to an undeclared request with `method`.
    pub fn default_policy(&self, method: &str) -> RoutePolicy {
        let fail = self
            .default_fail
            .unwrap_or_else(|| FailMode::default_for_methods([method]));
        let policy = RoutePolicy::new(self.default_limits, self.default_identity, fail, false);
        match self.rollout.default_enforce {
            Some(enforce) => policy.enforcing(enforce),
            None => policy,
        }
    }

    /// Warns, once per process however many limiters are built (one per worker, when built
    /// inside `HttpServer::new`'s closure), when a route fails `local` and the fleet's size
    /// was not given: each instance then takes the whole limit while the store fails, so a
    /// fleet of N passes about N times the limit (and more across the outage's window).
    fn warn_local_without_instances(&self) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        let declared = crate::registry::declarations()
            .filter(|d| d.fail() == Some(FailMode::Local))
            .map(|d| d.route())
            .collect::<Vec<_>>();
        let by_default = self.default_fail == Some(FailMode::Local);
        if declared.is_empty() && !by_default {
            return;
        }
        WARNED.call_once(|| {
            let routes = if by_default {
                "undeclared routes (`RateLimiter::default_fail`)".to_owned()
            } else {
                declared.join(", ")
            };
            tracing::warn!(
                target: "ratelimit",
                routes = %routes,
                "routes fail `local` while `RateLimiter::instances` is not set: while the store fails, each instance lets the whole limit through, so a fleet of N instances passes about N times it; give the limiter the fleet's size (`instances(1)` for one instance)"
            );
        });
    }

    /// The limiter of one worker: the store's own for this worker (its own Redis connection,
    /// driven on this thread), the shield shared with every other worker.
    pub(super) fn worker_limiter(&self) -> Rc<Limiter> {
        let shield = self.shield.get_or_init(|| {
            // Once per limiter: the first worker is built at startup.
            if self.secret.is_none() {
                tracing::warn!(
                    target: "ratelimit",
                    "no key secret: usernames, user ids, API keys and header values are keyed by plain SHA-256, which a dictionary run over the store's keys reverses; give the limiter `RateLimiter::key_secret` (the same on every instance)"
                );
                if self.headers.partition_key && self.headers.ietf_draft {
                    tracing::warn!(
                        target: "ratelimit",
                        "`HeaderFamilies::partition_key(true)` without a key secret: `pk` is a keyed hash of the client's key and is left out of `RateLimit`; give the limiter `RateLimiter::key_secret` (the same on every instance)"
                    );
                }
            }
            if !self.instances_set {
                self.warn_local_without_instances();
            }
            if let Some(overrides) = &self.overrides {
                let raw = self.sources.api_key.is_raw();
                overrides
                    .shared
                    .raw_api_keys
                    .store(raw, std::sync::atomic::Ordering::Relaxed);
                if raw && overrides.shared.table.load().allow.names_keys() {
                    tracing::warn!(
                        target: "ratelimit",
                        "the allow list names API keys while the limiter reads the API key from a header as the client sends it: anyone who sends a listed key is not limited; give the limiter `ApiKeySource::from_fn` returning only keys your app validated"
                    );
                }
            }
            Arc::new(FloodShield::new(self.shield_capacity))
        });
        let fallback = self.fallback.get_or_init(|| {
            Arc::new(LocalFallback::new(
                self.instances,
                crate::store::DEFAULT_CAPACITY,
            ))
        });
        Rc::new(Limiter {
            store: self
                .store
                .worker_store()
                .unwrap_or_else(|| Arc::clone(&self.store)),
            clock: self.clock.clone(),
            sources: self.sources.clone(),
            prefix: self.prefix.clone(),
            secret: self.secret.clone(),
            timeout: self.timeout,
            headers: self.headers,
            shield: Arc::clone(shield),
            fallback: Arc::clone(fallback),
            unavailable_retry_secs: self.unavailable_retry_secs,
            success: self.success,
            declared: OnceCell::new(),
            overrides: self.overrides.as_ref().map(|o| Arc::clone(&o.shared)),
            shadow: self.rollout.shadow,
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::Method;

    use super::{super::route_info::method_label, *};
    use crate::store::MemoryStore;

    #[test]
    #[should_panic(expected = "same algorithm and window")]
    fn default_limits_sharing_a_key_are_refused_at_configuration() {
        let _ = RateLimiter::new(MemoryStore::new()).default_limits(vec![
            Limit::new(10, Window::from_secs(60), Algorithm::SlidingWindow),
            Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow),
        ]);
    }

    #[test]
    fn undeclared_safe_methods_fail_open_like_declared_ones() {
        // The labels the middleware folds request methods into, as a declaration's default.
        let limiter = RateLimiter::new(MemoryStore::new());
        let query = Method::from_bytes(b"QUERY").unwrap();
        for (method, fail) in [
            (Method::GET, FailMode::Open),
            (Method::HEAD, FailMode::Open),
            (Method::OPTIONS, FailMode::Open),
            (query, FailMode::Open),
            (Method::POST, FailMode::Closed),
            (Method::from_bytes(b"PURGE").unwrap(), FailMode::Closed),
        ] {
            let label = method_label(&method);
            assert_eq!(limiter.default_policy(label).fail(), fail, "{method}");
        }
    }

    #[test]
    fn distinct_default_limits_are_kept() {
        let limiter = RateLimiter::new(MemoryStore::new()).default_limits(vec![
            Limit::new(10, Window::from_secs(1), Algorithm::Gcra),
            Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow),
        ]);
        assert_eq!(limiter.default_policy("GET").limits().len(), 2);
    }
}
