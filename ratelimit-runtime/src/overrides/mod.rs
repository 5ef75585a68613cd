//! Changing limits while the App runs, without a build or a deploy: overrides by route and
//! tier, and allow and deny lists, from a TOML file and from a Redis hash the fleet shares.
//! The guide's chapter [`guide::overrides`](crate::guide::overrides) has the formats, what
//! holds and the admin command.
//!
//! An override is written in the attribute's syntax and checked by its grammar, with its
//! messages ([`policy_from_text`]); a source with one invalid rule is refused whole and the
//! rules it had before stay ([`Overrides::refused`] says why).
//!
//! ```
//! # actix_web::rt::System::new().block_on(async {
//! use actix_web::{get, test, App, HttpResponse};
//! use ratelimit_runtime::{overrides::Overrides, rate_limit, store::MemoryStore, RateLimiter};
//!
//! #[rate_limit(limit = 100, window = "1m", identity = "ip")]
//! #[get("/search")]
//! async fn search() -> HttpResponse {
//!     HttpResponse::Ok().finish()
//! }
//!
//! let dir = std::env::temp_dir().join(format!("overrides-doctest-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("ratelimit.toml");
//! std::fs::write(&path, "[routes]\n\"GET /search\" = 'limit = 1, window = \"1m\"'\n").unwrap();
//!
//! // Build the limiter once and clone it into `HttpServer::new`'s closure.
//! let limiter = RateLimiter::new(MemoryStore::new()).overrides(Overrides::new().file(&path));
//! let app = test::init_service(App::new().service(search).wrap(limiter)).await;
//! let call = || test::TestRequest::get().uri("/search").peer_addr("203.0.113.7:1".parse().unwrap()).to_request();
//! assert_eq!(test::call_service(&app, call()).await.status(), 200);
//! assert_eq!(test::call_service(&app, call()).await.status(), 429, "the file's limit of 1");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # });
//! ```

mod refresh;
mod rules;
mod table;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use arc_swap::ArcSwap;

use crate::store::RedisSentinelStore;

pub use rules::{
    api_key_fingerprint, check_tier, is_fingerprint, list_field, redacted_field, ListEntry,
    ListKind, RouteSelector, RuleSet, WidestRanges, BUDGET_WORD, FINGERPRINT_PREFIX, MAX_FIELD_LEN,
    MAX_TIER_LEN, MAX_VALUE_LEN,
};
pub use table::{
    declaration_text, policy_from_text, policy_with_budgets, shared_budget_from_text,
    unknown_budget, unknown_tier, Overridden, Source,
};
pub(crate) use table::{Catalog, RouteAt, Table};

/// The default Redis hash of overrides.
pub const DEFAULT_REDIS_KEY: &str = "rl:overrides";

/// The most fields a source may hold (route overrides and list entries together, in the
/// file or the hash): past it the source is refused as a whole, with an error naming the
/// count (the hash by its length, before it is read). Reading a source is linear in its
/// size, and every instance holds it in memory; the admin command refuses to write past it.
pub const MAX_ENTRIES: usize = 200_000;

/// The key that counts the changes written to the overrides hash `hash_key`: the services
/// read a hash of more than 1,000 fields again only when it or the hash's length changed
/// since their last read (a shorter hash, at every refresh), and `ratelimit-admin`
/// increments it with every write (in one script with the write). A change made by hand to
/// such a hash that keeps its length (a value rewritten with `HSET`) must increment it too
/// (`INCR`), or the services keep the rules they read last. It shares the hash's slot on a
/// Cluster: `{rl:overrides}:version` for `rl:overrides`, or the hash's own tag with
/// `:version` when its name has one.
///
/// ```
/// use ratelimit_runtime::overrides::version_key;
///
/// assert_eq!(version_key("rl:overrides"), "{rl:overrides}:version");
/// assert_eq!(version_key("{app}:overrides"), "{app}:overrides:version");
/// ```
pub fn version_key(hash_key: &str) -> String {
    let tagged = hash_key
        .find('{')
        .is_some_and(|open| hash_key[open + 1..].find('}').is_some_and(|len| len > 0));
    if tagged {
        format!("{hash_key}:version")
    } else {
        format!("{{{hash_key}}}:version")
    }
}

/// The suffix of the hash where services publish their declared routes (`rl:overrides:routes`),
/// for the admin command to check route names against.
pub const ROUTES_SUFFIX: &str = ":routes";

/// The suffix of the hash where services write, beside each route they publish, when they
/// last published it (Unix seconds, their clock): `rl:overrides:routes:seen`. The routes of
/// a deploy that no longer runs stay in [`ROUTES_SUFFIX`]'s hash; the admin command takes a
/// route as declared only when it was published within [`ROUTES_FRESH_FOR`].
pub const ROUTES_SEEN_SUFFIX: &str = ":routes:seen";

/// The field of the published routes' hash ([`ROUTES_SUFFIX`]) that lists, separated by
/// spaces, every tier the services take in an override's selector: the tiers their
/// declarations give limits of their own, and those [`Overrides::tiers`] lists. Each tier a
/// route declares limits for is published beside the route, as `METHOD /pattern tier "name"`.
pub const TIERS_FIELD: &str = "tiers";

/// How long a published route counts as declared by a running service: ten times the
/// minute at which every service publishes its routes again, so that a service busy or cut
/// off for a while is not taken for gone, and a route a deploy removed is known gone within
/// minutes.
pub const ROUTES_FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// The tier of a request, put into its extensions by the app's auth layer
/// (`req.extensions_mut().insert(Tier::new("pro"))`): a route's limits for that tier
/// (`#[rate_limit(tier = "pro", ..)]`) and overrides written for it
/// (`GET /api/search tier "pro"`) apply to it, in keys of their own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tier(String);

impl Tier {
    /// The tier `name`.
    ///
    /// # Panics
    ///
    /// When `name` cannot be a tier (1 to 32 of lower-case letters, digits, `_`, `-`): use
    /// [`Tier::try_new`] for names that come from data.
    pub fn new(name: &str) -> Self {
        Tier::try_new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The tier `name`, if it can be one.
    ///
    /// # Errors
    ///
    /// When it cannot: 1 to 32 of lower-case letters, digits, `_` and `-`.
    pub fn try_new(name: &str) -> Result<Self, String> {
        check_tier(name)?;
        Ok(Tier(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where a limiter reads overrides from; given to
/// [`RateLimiter::overrides`](crate::RateLimiter::overrides).
#[derive(Clone)]
pub struct Overrides {
    pub(crate) file: Option<PathBuf>,
    pub(crate) redis: Option<RedisSource>,
    pub(crate) redis_key: String,
    pub(crate) refresh: Duration,
    pub(crate) widest: WidestRanges,
    pub(crate) plain_api_keys: bool,
    /// Tiers overrides may name beside those the declarations name.
    pub(crate) tiers: std::collections::BTreeSet<String>,
    pub(crate) shared: Arc<Shared>,
    /// Values refused, for `RateLimiter::check_settings`.
    problems: crate::settings::Problems,
}

/// How to reach the Redis that holds the overrides (no `Debug`: a URL may hold a password).
#[derive(Clone)]
pub(crate) enum RedisSource {
    Url(String),
    Cluster(Vec<String>),
    Sentinel(RedisSentinelStore),
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("file", &self.file)
            .field("redis", &self.redis.is_some())
            .field("redis_key", &self.redis_key)
            .field("refresh", &self.refresh)
            .field("widest", &self.widest)
            .field("plain_api_keys", &self.plain_api_keys)
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides::new()
    }
}

impl Overrides {
    /// No source yet.
    pub fn new() -> Self {
        Overrides {
            file: None,
            redis: None,
            redis_key: DEFAULT_REDIS_KEY.to_owned(),
            refresh: Duration::from_millis(500),
            widest: WidestRanges::default(),
            plain_api_keys: false,
            tiers: std::collections::BTreeSet::new(),
            shared: Arc::default(),
            problems: crate::settings::Problems::default(),
        }
    }

    /// Reads overrides from the TOML file at `path` (a missing file is no overrides).
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Reads the file named by the environment variable `var`, when it is set.
    pub fn file_from_env(self, var: &str) -> Self {
        match std::env::var_os(var) {
            Some(path) if !path.is_empty() => self.file(path),
            _ => self,
        }
    }

    /// Reads overrides from the hash at [`redis_key`](Self::redis_key) on the Redis at
    /// `url` (`redis://` or `rediss://`).
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.redis = Some(RedisSource::Url(url.into()));
        self
    }

    /// Reads overrides from a Redis Cluster (any of its nodes).
    pub fn redis_cluster(mut self, nodes: Vec<String>) -> Self {
        self.redis = Some(RedisSource::Cluster(nodes));
        self
    }

    /// Reads overrides from the primary a Redis Sentinel deployment names, through `store`
    /// (a clone of it: the same sentinels, credentials, TLS and connection to the primary),
    /// so they follow the primary through failovers as the store's checks do, and the
    /// routes are published again to a primary the sentinels newly name. One read takes at
    /// most 1 s; a read that does not answer in time drops the primary's connection, and
    /// the next read makes one anew.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), ratelimit_runtime::store::StoreConfigError> {
    /// use ratelimit_runtime::{overrides::Overrides, store::RedisSentinelStore, RateLimiter};
    ///
    /// let store = RedisSentinelStore::builder(["redis://10.0.0.5:26379"], "limiter")
    ///     .master_password("secret")
    ///     .build()
    ///     .await?;
    /// let overrides = Overrides::new().redis_sentinel(&store);
    /// let limiter = RateLimiter::new(store).overrides(overrides);
    /// # Ok(())
    /// # }
    /// ```
    pub fn redis_sentinel(mut self, store: &RedisSentinelStore) -> Self {
        self.redis = Some(RedisSource::Sentinel(store.clone()));
        self
    }

    /// The hash's key (default `rl:overrides`); the same for every instance and for the
    /// admin command.
    pub fn redis_key(mut self, key: &str) -> Self {
        self.redis_key = key.to_owned();
        self
    }

    /// How often each source is read (default 500 ms; at least 50 ms, at most a minute:
    /// the routes the admin command checks names against are published with the reads,
    /// and one not published for [`ROUTES_FRESH_FOR`] is taken as gone). A period outside
    /// those bounds is refused
    /// ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings)), and the
    /// sources are read at the default period.
    pub fn refresh(mut self, every: Duration) -> Self {
        let setting = "`Overrides::refresh(..)`";
        if (Duration::from_millis(50)..=Duration::from_secs(60)).contains(&every) {
            self.refresh = every;
            self.problems.record(setting, Ok(()));
        } else {
            let line = format!(
                "`Overrides::refresh({every:?})`: overrides are read at most every 50 ms and at least every minute"
            );
            self.problems.record(setting, Err(line));
        }
        self
    }

    /// The widest address ranges the lists may name (default: IPv4 /8, IPv6 /32; `0, 0`
    /// takes any range, `/0` included). A source naming a wider one is refused as a whole,
    /// with an error naming the entry: a deny entry of every address would answer every
    /// client `403`, an allow entry would lift every limit. Give the admin command the same
    /// bounds (`--widest-ipv4`, `--widest-ipv6`). An `ipv4` over 32 or `ipv6` over 128 is
    /// refused ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings)), and
    /// the default bounds stay.
    pub fn widest_ranges(mut self, ipv4: u8, ipv6: u8) -> Self {
        let setting = "`Overrides::widest_ranges(..)`";
        if ipv4 <= 32 && ipv6 <= 128 {
            self.widest = WidestRanges { ipv4, ipv6 };
            self.problems.record(setting, Ok(()));
        } else {
            let line = format!(
                "`Overrides::widest_ranges({ipv4}, {ipv6})`: an IPv4 prefix is at most 32, an IPv6 one at most 128"
            );
            self.problems.record(setting, Err(line));
        }
        self
    }

    /// Takes API keys written in plain text in the lists (default: refused, the source as a
    /// whole, naming the entry): lists name keys by fingerprint
    /// ([`api_key_fingerprint`]), so that the file, the hash and the admin command's output
    /// never hold a key. For lists written before fingerprints, while they are rewritten.
    pub fn plain_api_keys(mut self, take: bool) -> Self {
        self.plain_api_keys = take;
        self
    }

    /// The tiers requests may carry that no declaration gives limits of its own, for
    /// overrides to name (`'GET /api/search tier "team"'`). An override may name a tier a
    /// declaration names (`#[rate_limit(tier = "pro", ..)]`) or this list does; any other is
    /// refused with its source, naming the nearest known tier (`tier "por"`: did you mean
    /// `pro`?). Given again, the list replaces the earlier one. A name that cannot be a tier
    /// (1 to 32 of lower-case letters, digits, `_` and `-`) is refused
    /// ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings)), and the list
    /// stays as it was.
    ///
    /// ```
    /// use ratelimit_runtime::overrides::Overrides;
    ///
    /// // The auth layer puts `Tier::new("team")` in some requests; no route declares limits
    /// // for it, and operators may still give it an override during an incident.
    /// let overrides = Overrides::new().file("ratelimit.toml").tiers(["team"]);
    /// # let _ = overrides;
    /// ```
    pub fn tiers<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let setting = "`Overrides::tiers(..)`";
        let mut tiers = std::collections::BTreeSet::new();
        let mut refused = Vec::new();
        for name in names {
            let name = name.as_ref();
            match check_tier(name) {
                Ok(()) => {
                    tiers.insert(name.to_owned());
                }
                Err(problem) => refused.push(problem),
            }
        }
        if refused.is_empty() {
            self.tiers = tiers;
            self.problems.record(setting, Ok(()));
        } else {
            let line = format!("{setting}: {}", refused.join("; "));
            self.problems.record(setting, Err(line));
        }
        self
    }

    /// Takes `tiers` (the limiter's, [`RateLimiter::tiers`](crate::RateLimiter::tiers)) as
    /// tiers its selectors may name, beside those it lists itself.
    pub(crate) fn take_tiers(&mut self, tiers: &std::collections::BTreeSet<String>) {
        self.tiers.extend(tiers.iter().cloned());
    }

    /// Gives the App's declared routes to the overrides in force, with the tiers this
    /// configuration lists: rules are checked against both from now on.
    pub(crate) fn set_routes(&self, catalog: Catalog) {
        self.shared.set_routes(catalog, &self.tiers);
    }

    /// The values refused, one line each.
    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.problems.lines()
    }

    /// Every route's override in force now, by selector.
    pub fn in_force(&self) -> Vec<(RouteSelector, Overridden)> {
        let table = self.shared.table.load();
        let mut routes: Vec<(RouteSelector, Overridden)> = table
            .routes()
            .map(|(selector, o)| (selector, o.clone()))
            .collect();
        routes.sort_by(|a, b| a.0.cmp(&b.0));
        routes
    }

    /// The limit an override gives the shared budget `name` (`budget API` in the hash,
    /// `[budgets]` in the file), when one is in force: every route that names the budget
    /// counts under it, at the route's cost.
    pub fn budget_in_force(&self, name: &str) -> Option<crate::Limit> {
        let table = self.shared.table.load();
        table.budgets.get(name).map(|b| b.limit)
    }

    /// `policy` under the shared budgets' overrides in force, when it names an overridden
    /// budget: as the route table shows a declared stack the overrides change only there.
    pub(crate) fn budgets_on(&self, policy: crate::RoutePolicy) -> Option<Overridden> {
        let table = self.shared.table.load();
        let (name, budget) = policy
            .limits()
            .iter()
            .filter_map(|l| l.budget())
            .find_map(|name| Some((name, table.budgets.get(name)?)))?;
        Some(Overridden {
            policy: crate::Policy::Limited(table.with_budgets(policy)),
            source: budget.source,
            text: format!("{BUDGET_WORD}{name} = '{}'", budget.text),
        })
    }

    /// Why each source's last content was refused (every problem, in the attribute's
    /// words), for the sources whose last content was; the rules in force are the ones
    /// accepted before.
    pub fn refused(&self) -> Vec<(Source, Vec<String>)> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .refusals()
    }

    /// Waits (up to `timeout`) until every source has been read once: whether it has. For a
    /// startup that should serve its first request under the overrides in force
    /// ([`RateLimiter::overrides`](crate::RateLimiter::overrides) waits up to 2 s itself).
    pub fn wait_loaded(&self, timeout: Duration) -> bool {
        self.shared.wait_loaded(timeout)
    }
}

/// What the limiter's workers, the refresh thread and the route table share.
#[derive(Default)]
pub(crate) struct Shared {
    /// The overrides in force, read by every request.
    pub(crate) table: ArcSwap<Table>,
    /// Whether a limiter reading these overrides takes API keys from a header as sent (any
    /// client can send a listed key): allow entries naming keys are then warned of.
    pub(crate) raw_api_keys: std::sync::atomic::AtomicBool,
    pub(crate) state: Mutex<refresh::State>,
    pub(crate) loaded: (Mutex<bool>, std::sync::Condvar),
    pub(crate) started: OnceLock<()>,
}
