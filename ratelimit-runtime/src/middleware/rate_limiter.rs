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

use super::{
    declared_routes::DeclaredRoutes,
    flood_shield::FloodShield,
    limiter::Limiter,
    local_fallback::LocalFallback,
    rejection::{RejectWith, Rejection},
};
use crate::{
    clock::Clock,
    key::RouteKey,
    policy::{Algorithm, FailMode, Limit, RoutePolicy, Window},
    settings::{ConfigError, Failure, Identities, Keys, Problems, Responses, Undeclared},
    store::{CheckRequest, Store, StoreError},
};

/// Installs rate limiting on an App: `App::new().wrap(RateLimiter::new(store))`.
///
/// Declared routes are limited by the guard their `#[rate_limit]` adds; this middleware
/// makes the limiter available to those guards and applies the default policy (120 per
/// minute by user id, else IP; [`undeclared`](Self::undeclared)) to every other request.
///
/// Its settings come in groups ([`settings`](crate::settings)), each given to one method:
/// [`identity`](Self::identity), [`keys`](Self::keys), [`responses`](Self::responses),
/// [`failure`](Self::failure), [`undeclared`](Self::undeclared); the time
/// ([`clock`](Self::clock)) and the [`overrides`](Self::overrides) on their own. A value a
/// group refuses is reported by [`check_settings`](Self::check_settings) with every other
/// one, and an App wrapped with such a limiter does not start. The store's timeout is set
/// on the store's builder.
///
/// ```
/// use ratelimit_runtime::{
///     identity::TrustedProxies,
///     settings::{Failure, Identities},
///     store::MemoryStore,
///     RateLimiter,
/// };
///
/// let limiter = RateLimiter::new(MemoryStore::new())
///     .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)))
///     .failure(Failure::new().instances(3));
/// limiter.check_settings().expect("settings the limiter takes");
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Clock,
    pub(super) identity: Identities,
    pub(super) keys: Keys,
    /// The bound of a store check in place of the store's own, when given.
    pub(super) timeout: Option<Duration>,
    pub(super) responses: Responses,
    pub(super) failure: Failure,
    pub(super) undeclared: Undeclared,
    /// Refused values of settings outside the groups, and groups given twice.
    pub(super) problems: Problems,
    /// The groups given so far (by a group method or a deprecated setter of the group).
    given: GroupsGiven,
    /// The flood shield every worker of this limiter shares, made by the first.
    pub(super) shield: Arc<OnceLock<Arc<FloodShield>>>,
    /// The local shares of routes that sync, shared by every worker.
    shares: Arc<OnceLock<Arc<super::shares::Shares>>>,
    /// The App's declared routes, as the first worker to serve a request read them.
    pub(super) declared: Arc<OnceLock<Arc<DeclaredRoutes>>>,
    /// The declared routes of the App the coverage check read with this limiter inside,
    /// for naming routes before it serves.
    pub(super) checked: Arc<OnceLock<Arc<DeclaredRoutes>>>,
    /// The local limiter of routes that fail `local`, shared by every worker.
    fallback: Arc<OnceLock<Arc<LocalFallback>>>,
    /// Where overrides are read from, when anywhere.
    pub(super) overrides: Option<crate::overrides::Overrides>,
    /// The shadow switch, declarations in code and their problems (`rollout.rs`).
    pub(super) rollout: super::rollout_state::Rollout,
    /// The app's answer to refusals, when it gives one.
    reject_with: Option<RejectWith>,
    /// The tiers the App's requests carry, when it names them (`RateLimiter::tiers`).
    tiers: Option<std::collections::BTreeSet<String>>,
    /// The ban on every limited route (`RateLimiter::ban`), when set.
    ban: Option<crate::policy::Ban>,
}

impl fmt::Debug for RateLimiter {
    /// What it was configured with (the store by its kind, the secret by its length, no
    /// personal value), so an app state holding a limiter can derive `Debug`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("store", &self.store.kind())
            .field("identity", &self.identity)
            .field("keys", &self.keys)
            .field("timeout", &self.timeout)
            .field("responses", &self.responses)
            .field("failure", &self.failure)
            .field("undeclared", &self.undeclared)
            .field("reject_with", &self.reject_with.is_some())
            .finish_non_exhaustive()
    }
}

/// Building a limiter and its settings.
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
            identity: Identities::default(),
            keys: Keys::default(),
            timeout: None,
            responses: Responses::default(),
            failure: Failure::default(),
            undeclared: Undeclared::default(),
            problems: Problems::default(),
            given: GroupsGiven::default(),
            shield: Arc::default(),
            shares: Arc::default(),
            declared: Arc::default(),
            checked: Arc::default(),
            fallback: Arc::default(),
            overrides: None,
            rollout: super::rollout_state::Rollout::default(),
            reject_with: None,
            tiers: None,
            ban: None,
        }
    }

    pub(super) fn with(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self.shield = Arc::default();
        self.fallback = Arc::default();
        self
    }

    /// Injects the time (tests); the default is the store's own clock (Redis `TIME`).
    pub fn clock(self, clock: impl Into<Clock>) -> Self {
        self.with(|s| s.clock = clock.into())
    }

    /// Who a request is: trusted proxies, username readers, user id, API key
    /// ([`Identities`]). Give it once, with every value: a second call would replace the
    /// first whole, so it is refused ([`check_settings`](Self::check_settings)), as it is
    /// after a deprecated setter of the group (`trusted_proxies`, `api_key`, ...).
    pub fn identity(self, identities: Identities) -> Self {
        self.group(Group::Identity, |s| s.identity = identities)
    }

    /// How budgets are named in the store: key prefix and secret ([`Keys`]). Given once, as
    /// [`identity`](Self::identity).
    pub fn keys(self, keys: Keys) -> Self {
        self.group(Group::Keys, |s| s.keys = keys)
    }

    /// What limited answers carry and which answers are successes ([`Responses`]). Given
    /// once, as [`identity`](Self::identity).
    pub fn responses(self, responses: Responses) -> Self {
        self.group(Group::Responses, |s| s.responses = responses)
    }

    /// The fleet's size for routes that fail `local`, and the flood shield ([`Failure`]).
    /// Given once, as [`identity`](Self::identity).
    pub fn failure(self, failure: Failure) -> Self {
        self.group(Group::Failure, |s| s.failure = failure)
    }

    /// The policy of routes with no declaration ([`Undeclared`]). Given once, as
    /// [`identity`](Self::identity).
    pub fn undeclared(self, undeclared: Undeclared) -> Self {
        self.group(Group::Undeclared, |s| s.undeclared = undeclared)
    }

    /// Answers refusals with the app's own response instead of the limiter's
    /// `application/problem+json` (`guide::headers`): `respond` is called with the
    /// [`Rejection`] on every refusal, whatever its [`reason`](Rejection::reason) (over a
    /// limit, locked out, on the deny list, the store down on a route that fails closed),
    /// so one function answers them all, matching on the reason; a reason it does not
    /// answer itself can fall back to [`Rejection::default_response`].
    ///
    /// The limiter adds its headers to the app's response: `Retry-After` and the rate-limit
    /// headers of the binding limit, as [`Responses::headers`](crate::settings::Responses::headers)
    /// and the route's `headers = ".."` say (they replace any of the same name the app set:
    /// they are the limiter's figures), and `Cache-Control: no-store` unless the response
    /// has a `Cache-Control` of its own. The status and body are the app's, whatever they
    /// are: a status that is no error (an API that answers every error with `200`) is the
    /// app's choice, and is sent. A route in shadow refuses nothing, so it never calls
    /// `respond`. A request that middleware in front of the route refused with an error,
    /// from a client over the limit, is answered with `respond`'s response too. The 400 (or
    /// 413) of a route that refuses unreadable usernames is no rate-limit refusal: it keeps
    /// its own answer.
    ///
    /// `respond` runs on the request path, once per refusal, the flood of one client
    /// included: keep it cheap and free of blocking calls. It must not panic; if it does,
    /// the limiter answers with the default answer and logs an error (target `ratelimit`),
    /// unless the app is built with `panic = "abort"`, which ends the process.
    /// Given once: a second call would replace the first function without a word, so it is
    /// refused ([`check_settings`](Self::check_settings)).
    ///
    /// ```
    /// use actix_web::{get, http::StatusCode, test, App, HttpResponse};
    /// use ratelimit_runtime::{
    ///     clock::ManualClock, rate_limit, store::MemoryStore, RateLimiter, RejectionReason,
    /// };
    ///
    /// #[rate_limit(limit = 1, window = "1m", identity = "ip", algorithm = "sliding_log")]
    /// #[get("/search")]
    /// async fn search() -> HttpResponse {
    ///     HttpResponse::Ok().finish()
    /// }
    ///
    /// # actix_web::rt::System::new().block_on(async {
    /// let limiter = RateLimiter::new(MemoryStore::new())
    ///     .clock(ManualClock::at(1_700_000_000_000))
    ///     .reject_with(|rejection| match rejection.reason() {
    ///         RejectionReason::Limit | RejectionReason::Lockout => {
    ///             HttpResponse::TooManyRequests().json(serde_json::json!({
    ///                 "error": { "code": "SLOW_DOWN", "route": rejection.route() },
    ///                 "retry_in": rejection.retry_after().map(|wait| wait.as_secs()),
    ///             }))
    ///         }
    ///         // Denied, store down, and any reason added later: the limiter's own answer.
    ///         _ => rejection.default_response(),
    ///     });
    /// limiter.check_settings().unwrap();
    /// let app = test::init_service(App::new().service(search).wrap(limiter)).await;
    /// let request = || {
    ///     test::TestRequest::get()
    ///         .uri("/search")
    ///         .peer_addr("203.0.113.7:4000".parse().unwrap())
    ///         .to_request()
    /// };
    /// assert_eq!(test::call_service(&app, request()).await.status(), StatusCode::OK);
    ///
    /// let refused = test::call_service(&app, request()).await;
    /// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    /// // The limiter's headers, on the app's body.
    /// assert_eq!(refused.headers().get("retry-after").unwrap(), "60");
    /// assert_eq!(refused.headers().get("x-ratelimit-remaining").unwrap(), "0");
    /// assert_eq!(refused.headers().get("cache-control").unwrap(), "no-store");
    /// assert_eq!(refused.headers().get("content-type").unwrap(), "application/json");
    /// let body: serde_json::Value = test::read_body_json(refused).await;
    /// assert_eq!(body["error"]["code"], "SLOW_DOWN");
    /// assert_eq!(body["error"]["route"], "GET /search");
    /// assert_eq!(body["retry_in"], 60);
    /// # });
    /// ```
    pub fn reject_with<F>(mut self, respond: F) -> Self
    where
        F: Fn(&Rejection) -> actix_web::HttpResponse + Send + Sync + 'static,
    {
        if self.reject_with.is_some() {
            let setting = "`RateLimiter::reject_with(..)`";
            self.problems.record(
                format!("{setting} given twice"),
                Err(format!(
                    "{setting}: given twice: the later function replaces the earlier; give one function, matching on `Rejection::reason`"
                )),
            );
        }
        self.with(|s| s.reject_with = Some(Arc::new(respond)))
    }

    /// Bans a client on every limited route once it has been refused `ban.times()` times
    /// within `ban.within()`, on any of them, for `ban.duration()`: every request of the
    /// client is then refused at once, with the ban's `Retry-After`, by one key check (the
    /// flood shield answers repeats without one), never a check of each limit. The ban counts
    /// by `ban.identity()`, the client address unless [`Ban::identified_by`](crate::policy::Ban::identified_by) says otherwise
    /// (an identity every request has without its body: no username). Routes with their
    /// own `ban` are banned by both. On routes with a limit that counts failures only,
    /// failures count toward it once their handler ran. Routes that wait for their turn (`wait`), shadow routes and a store down
    /// (whatever the route's `fail`) count nothing toward it; a route that waits refuses a
    /// client it bans while this process's flood shield remembers the ban (up to a second
    /// after each refusal the store gave). Every refusal on a route it covers is counted in
    /// the store: the flood shield remembers bans there, not ordinary refusals.
    ///
    /// ```
    /// # actix_web::rt::System::new().block_on(async {
    /// use actix_web::{get, http::StatusCode, test, App, HttpResponse};
    /// use ratelimit_runtime::{policy::Ban, rate_limit, store::MemoryStore, RateLimiter, Window};
    ///
    /// #[rate_limit(limit = 1, window = "1m")]
    /// #[get("/search")]
    /// async fn search() -> HttpResponse {
    ///     HttpResponse::Ok().finish()
    /// }
    ///
    /// #[rate_limit(limit = 100, window = "1m")]
    /// #[get("/feed")]
    /// async fn feed() -> HttpResponse {
    ///     HttpResponse::Ok().finish()
    /// }
    ///
    /// // Two refusals within 10 minutes ban the address for an hour, on every route.
    /// let limiter = RateLimiter::new(MemoryStore::new())
    ///     .ban(Ban::new(2, Window::from_secs(600), Window::from_secs(3600)));
    /// let app = test::init_service(App::new().service(search).service(feed).wrap(limiter)).await;
    /// let get = |uri| {
    ///     test::TestRequest::get().uri(uri).peer_addr("203.0.113.7:4000".parse().unwrap()).to_request()
    /// };
    /// assert_eq!(test::call_service(&app, get("/search")).await.status(), StatusCode::OK);
    /// assert_eq!(test::call_service(&app, get("/search")).await.status(), 429);
    /// let banned = test::call_service(&app, get("/search")).await;
    /// assert_eq!(banned.headers().get("retry-after").unwrap(), "3600");
    /// // `/feed` has its whole budget, and refuses the banned address.
    /// assert_eq!(test::call_service(&app, get("/feed")).await.status(), 429);
    /// # });
    /// ```
    pub fn ban(mut self, ban: crate::policy::Ban) -> Self {
        let setting = "`RateLimiter::ban(..)`";
        if self.ban.is_some() {
            self.problems.record(
                format!("{setting} given twice"),
                Err(format!(
                    "{setting}: given twice: the later ban replaces the earlier; give one"
                )),
            );
        }
        if ban.identity().is_some_and(crate::identity::reads_body) {
            self.problems.record(
                format!("{setting} identity"),
                Err(format!(
                    "{setting}: the limiter's ban counts by an identity every request has before its body is read; `{}` reads the username from the body (give the route its own `ban`)",
                    ban.identity().map(|i| i.to_string()).unwrap_or_default()
                )),
            );
        }
        self.with(|s| s.ban = Some(ban))
    }

    /// Names every tier the App's requests carry (the [`Tier`](crate::overrides::Tier) its
    /// auth layer puts in them): a declaration naming another
    /// (`#[rate_limit(tier = "por", ..)]`) is then a refused setting naming the nearest tier
    /// listed, so the App does not start with a misspelled tier no request carries; and the
    /// limiter's [`overrides`](Self::overrides) take these tiers in their selectors (beside
    /// [`Overrides::tiers`](crate::overrides::Overrides::tiers)), refusing others with a
    /// suggestion. Without it a tier named by one declaration only, close to one others
    /// name, is a warning of the coverage check.
    ///
    /// ```
    /// use ratelimit_runtime::{store::MemoryStore, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new()).tiers(["free", "pro", "enterprise"]);
    /// assert!(limiter.check_settings().is_ok());
    /// let wrong = RateLimiter::new(MemoryStore::new()).tiers(["Pro"]);
    /// assert!(wrong.check_settings().unwrap_err().to_string().contains("lower-case"));
    /// ```
    pub fn tiers<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let setting = "`RateLimiter::tiers(..)`";
        if self.tiers.is_some() {
            self.problems.record(
                format!("{setting} given twice"),
                Err(format!(
                    "{setting}: given twice: the later list replaces the earlier; give every tier once"
                )),
            );
        }
        let mut tiers = std::collections::BTreeSet::new();
        for name in names {
            let name = name.as_ref();
            match ratelimit_grammar::check_tier(name) {
                Ok(()) => {
                    tiers.insert(name.to_owned());
                }
                Err(problem) => self.problems.record(
                    format!("{setting} {name}"),
                    Err(format!("{setting}: {problem}")),
                ),
            }
        }
        if let Some(overrides) = &mut self.overrides {
            overrides.take_tiers(&tiers);
        }
        self.with(|s| s.tiers = Some(tiers))
    }

    /// One line per tier a declaration of the program names that [`tiers`](Self::tiers)
    /// does not list, when it was given.
    fn unknown_declared_tiers(&self) -> Vec<String> {
        let Some(known) = &self.tiers else {
            return Vec::new();
        };
        let names: Vec<&str> = known.iter().map(String::as_str).collect();
        let mut problems = Vec::new();
        for declaration in crate::registry::declarations() {
            let Some(policy) = declaration.policy().limited() else {
                continue;
            };
            for tier in policy.tiers().iter().filter(|t| !known.contains(t.name())) {
                problems.push(format!(
                    "`{}` ({}) declares limits for tier `{}`, which `RateLimiter::tiers(..)` does not list{}; the App's tiers are {}",
                    declaration.route(),
                    declaration.handler(),
                    tier.name(),
                    ratelimit_grammar::suggest::did_you_mean(tier.name(), &names),
                    ratelimit_grammar::suggest::list(&names),
                ));
            }
        }
        problems
    }

    /// Gives `group` its value; a group given before is a refused setting: its values would
    /// be lost without a word (a validated API key source, the trusted proxies).
    fn group(mut self, group: Group, set: impl FnOnce(&mut Self)) -> Self {
        if self.given.has(group) {
            let setting = format!("`RateLimiter::{}(..)`", group.name());
            self.problems.record(
                format!("{setting} given twice"),
                Err(format!(
                    "{setting}: given twice, or after a deprecated setter of its group: the later value replaces every value of the earlier; give the group once, with all its values"
                )),
            );
        }
        self.given.set(group);
        self.with(set)
    }

    /// Gives `group` a value built from its current one (the deprecated setters): never
    /// refused for being given before, but marks the group as given.
    pub(super) fn extend_group(mut self, group: Group, set: impl FnOnce(&mut Self)) -> Self {
        self.given.set(group);
        self.with(set)
    }

    /// Reads overrides (limits by route and tier, allow and deny lists) from a file and a
    /// Redis hash while the App runs: see [`overrides`](crate::overrides). Starts the one
    /// thread that reads them and waits up to 2 s for its first read. Build the limiter
    /// once, outside `HttpServer::new`'s closure, and clone it there: every `Overrides`
    /// reads on its own.
    pub fn overrides(self, mut overrides: crate::overrides::Overrides) -> Self {
        if let Some(tiers) = &self.tiers {
            overrides.take_tiers(tiers);
        }
        overrides.start(Duration::from_secs(2));
        self.with(|s| s.overrides = Some(overrides))
    }

    /// The overrides this limiter reads, if any.
    pub fn overrides_in_use(&self) -> Option<&crate::overrides::Overrides> {
        self.overrides.as_ref()
    }

    /// The policy applied to an undeclared request with `method`.
    pub fn default_policy(&self, method: &str) -> RoutePolicy {
        self.undeclared.policy(method)
    }

    pub(super) fn undeclared_settings(&self) -> &Undeclared {
        &self.undeclared
    }
}

/// Startup checks.
impl RateLimiter {
    /// Every setting this limiter (and its [`overrides`](Self::overrides)) refused, each
    /// line naming the setting as written: the check to run in `main` before serving. An
    /// App wrapped with a limiter that fails it logs the error at `error` level and does
    /// not start: its middleware fails to build, so `HttpServer::run` ends with an error
    /// (actix-server's "Can not start server service") and `actix_web::test::init_service`
    /// panics ("service initialization failed").
    ///
    /// ```
    /// use ratelimit_runtime::{
    ///     settings::{Failure, Keys},
    ///     store::MemoryStore,
    ///     RateLimiter,
    /// };
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new())
    ///     .keys(Keys::new().prefix("my app"))
    ///     .failure(Failure::new().instances(0));
    /// let error = limiter.check_settings().unwrap_err();
    /// assert_eq!(error.problems().len(), 2);
    /// assert!(error.to_string().contains("`RateLimiter::keys(..).prefix(..)`: invalid key prefix `my app`"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`], every refused setting on a line of its own.
    pub fn check_settings(&self) -> Result<(), ConfigError> {
        // Declarations in code, and what the coverage check found against the App's routes
        // (which holds the others too once the check ran: each is listed once).
        let rollout = self.rollout.problems();
        let store = self.store.refused_settings();
        // The program's shared budgets: two of one name would count in one key.
        let budgets = crate::policy::duplicate_names();
        let tiers = self.unknown_declared_tiers();
        let overrides = self.overrides.iter().flat_map(|o| o.problems());
        let mut problems: Vec<String> = Vec::new();
        let settings = self
            .identity
            .problems()
            .chain(self.keys.problems())
            .chain(self.failure.problems())
            .chain(self.undeclared.problems())
            .chain(self.problems.lines())
            .chain(store.iter().map(String::as_str))
            .chain(overrides)
            .chain(budgets.iter().map(String::as_str))
            .chain(tiers.iter().map(String::as_str))
            .chain(rollout.iter().map(String::as_str));
        for problem in settings {
            if !problems.iter().any(|p| p == problem) {
                problems.push(problem.to_owned());
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::new(problems))
        }
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
        let key = RouteKey::new(&self.keys.prefix, "GET", "/__ratelimit_startup", &[]);
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
                crate::store::within(timeout, self.store.check_within(request, timeout))
                    .await
                    .unwrap_or_else(|_| Err(StoreError::timeout(timeout)))
            }
            (None, Some(_)) => self.store.check(request).await,
            (None, None) => {
                let timeout = crate::store::DEFAULT_TIMEOUT;
                crate::store::within(timeout, self.store.check(request))
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
            let second = crate::store::within(grace, self.store.check_within(request, grace))
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

    /// Warns, once per process however many limiters are built (one per worker, when built
    /// inside `HttpServer::new`'s closure), when a route fails `local` and the fleet's size
    /// was not given: each instance then takes the whole limit while the store fails, so a
    /// fleet of N passes about N times the limit (and more across the outage's window).
    fn warn_local_without_instances(&self) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        let declared = crate::registry::declarations()
            .chain(self.rollout.declared.iter().copied())
            .filter(|d| d.fail() == Some(FailMode::Local))
            .map(|d| d.route())
            .collect::<Vec<_>>();
        let by_default = self.undeclared.fail == Some(FailMode::Local);
        if declared.is_empty() && !by_default {
            return;
        }
        WARNED.call_once(|| {
            let routes = if by_default {
                "undeclared routes (`RateLimiter::undeclared(..).fail(..)`)".to_owned()
            } else {
                declared.join(", ")
            };
            tracing::warn!(
                target: "ratelimit",
                routes = %routes,
                "routes fail `local` while `RateLimiter::failure(..).instances(..)` is not set: while the store fails, each instance lets the whole limit through, so a fleet of N instances passes about N times it; give the limiter the fleet's size (`Failure::new().instances(1)` for one instance)"
            );
        });
    }

    /// The limiter of one worker: the store's own for this worker (its own Redis connection,
    /// driven on this thread), the shield shared with every other worker.
    pub(super) fn worker_limiter(&self) -> Rc<Limiter> {
        let shield = self.shield.get_or_init(|| {
            // Once per limiter: the first worker is built at startup.
            if self.keys.secret.is_none() {
                tracing::warn!(
                    target: "ratelimit",
                    "no key secret: usernames, user ids, API keys and header values are keyed by plain SHA-256, which a dictionary run over the store's keys reverses; give the limiter `RateLimiter::keys(Keys::new().secret(..))` (the same on every instance)"
                );
                if self.responses.headers.partition_key && self.responses.headers.ietf_draft {
                    tracing::warn!(
                        target: "ratelimit",
                        "`HeaderFamilies::partition_key(true)` without a key secret: `pk` is a keyed hash of the client's key and is left out of `RateLimit`; give the limiter `RateLimiter::keys(Keys::new().secret(..))` (the same on every instance)"
                    );
                }
            }
            if self.rollout.shadow {
                let enforcing = crate::registry::declarations()
                    .chain(self.rollout.declared.iter().copied())
                    .filter(|d| matches!(d.policy, crate::policy::Policy::Limited(p) if p.enforce() == Some(true)))
                    .map(|d| d.route())
                    .collect::<Vec<_>>();
                let default = match self.undeclared.enforce {
                    Some(true) => "; undeclared routes enforce (`Undeclared::enforce(true)`)",
                    _ => "",
                };
                tracing::warn!(
                    target: "ratelimit",
                    enforcing = %enforcing.join(", "),
                    "the App is in shadow (`RateLimiter::shadow(true)`): limits count and log their would-be refusals (`shadow_rejected`) but refuse nothing, except on routes that say `enforce = true` ({} of them){default}; drop `.shadow(true)` to enforce",
                    enforcing.len()
                );
            }
            if !self.failure.instances_set {
                self.warn_local_without_instances();
            }
            if let Some(overrides) = &self.overrides {
                let raw = self.identity.sources.api_key.is_raw();
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
            Arc::new(FloodShield::new(self.failure.shield_capacity))
        });
        let fallback = self.fallback.get_or_init(|| {
            Arc::new(LocalFallback::new(
                self.failure.instances,
                crate::store::DEFAULT_CAPACITY,
            ))
        });
        Rc::new(Limiter {
            store: self
                .store
                .worker_store()
                .unwrap_or_else(|| Arc::clone(&self.store)),
            clock: self.clock.clone(),
            sources: self.identity.sources.clone(),
            prefix: self.keys.prefix.clone(),
            secret: self.keys.secret.clone(),
            timeout: self.timeout,
            headers: self.responses.headers,
            shield: Arc::clone(shield),
            shares: Arc::clone(
                self.shares
                    .get_or_init(|| Arc::new(super::shares::Shares::new())),
            ),
            fallback: Arc::clone(fallback),
            unavailable_retry_secs: self.responses.unavailable_retry_secs,
            success: self.responses.success,
            declared: OnceCell::new(),
            overrides: self.overrides.as_ref().map(|o| Arc::clone(&o.shared)),
            shadow: self.rollout.shadow,
            reject_with: self.reject_with.clone(),
            costs: self.rollout.costs.iter().cloned().collect(),
            waiting: Rc::default(),
            max_waiting: self.failure.max_waiting,
            bans: self.store.bans(),
            ban: self.limiter_ban(),
        })
    }
}

impl RateLimiter {
    /// The limiter's ban as each worker keeps it, when its store keeps bans (a warning says
    /// so when it does not).
    fn limiter_ban(&self) -> Option<super::limiter::LimiterBan> {
        if !self.store.bans() {
            let declared = crate::registry::declarations()
                .any(|d| d.policy().limited().is_some_and(|p| p.ban().is_some()));
            static WARNED: std::sync::Once = std::sync::Once::new();
            if self.ban.is_some() || declared {
                WARNED.call_once(|| {
                    tracing::warn!(
                        target: "ratelimit",
                        store = self.store.kind(),
                        "bans are declared (`ban`, `RateLimiter::ban`) but the store keeps none (`Store::bans` is false): routes are checked without their bans"
                    );
                });
            }
            return None;
        }
        let ban = self.ban?;
        Some(super::limiter::LimiterBan {
            ban,
            identity: ban.identity().unwrap_or(crate::policy::Identity::Parts(&[
                crate::policy::IdentityPart::Ip,
            ])),
            stem: crate::key::RouteKey::ban_stem(&self.keys.prefix),
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::Method;

    use super::{super::route_info::method_label, *};
    use crate::store::MemoryStore;

    #[test]
    fn default_limits_sharing_a_key_are_refused_at_configuration() {
        let limiter =
            RateLimiter::new(MemoryStore::new()).undeclared(Undeclared::new().limits(vec![
                Limit::new(10, Window::from_secs(60), Algorithm::SlidingWindow),
                Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow),
            ]));
        let error = limiter.check_settings().unwrap_err();
        assert_eq!(
            error.to_string(),
            "`RateLimiter::undeclared(..).limits(..)`: two stacked limits use the same algorithm and window"
        );
        // The refused limits are not in force: the default ones are.
        assert_eq!(limiter.default_policy("GET").limits().len(), 1);
    }

    #[test]
    fn a_later_valid_value_takes_a_refusal_back() {
        let undeclared = Undeclared::new().limits(Vec::new()).limits(vec![Limit::new(
            5,
            Window::from_secs(1),
            Algorithm::Gcra,
        )]);
        let limiter = RateLimiter::new(MemoryStore::new()).undeclared(undeclared);
        assert!(limiter.check_settings().is_ok());
        assert_eq!(limiter.default_policy("GET").limits()[0].max(), 5);
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
        let limiter =
            RateLimiter::new(MemoryStore::new()).undeclared(Undeclared::new().limits(vec![
                Limit::new(10, Window::from_secs(1), Algorithm::Gcra),
                Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow),
            ]));
        assert_eq!(limiter.default_policy("GET").limits().len(), 2);
    }
}

/// The settings groups, for telling one given twice.
#[derive(Debug, Clone, Copy)]
pub(super) enum Group {
    Identity,
    Keys,
    Responses,
    Failure,
    Undeclared,
}

impl Group {
    fn name(self) -> &'static str {
        match self {
            Group::Identity => "identity",
            Group::Keys => "keys",
            Group::Responses => "responses",
            Group::Failure => "failure",
            Group::Undeclared => "undeclared",
        }
    }
}

/// Which groups a limiter was given.
#[derive(Debug, Clone, Copy, Default)]
struct GroupsGiven(u8);

impl GroupsGiven {
    fn has(self, group: Group) -> bool {
        self.0 & (1 << group as u8) != 0
    }

    fn set(&mut self, group: Group) {
        self.0 |= 1 << group as u8;
    }
}
