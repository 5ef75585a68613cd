//! Changing limits at run time, without a build or a deploy: overrides by route, tiers, and
//! allow and deny lists, from a TOML file and from a Redis hash the fleet shares.
//!
//! An override is written in the attribute's own syntax and checked by the same grammar,
//! with the same messages. It replaces the route's declared limits (its whole stack); a key
//! it does not write takes the attribute's default, except `identity` and `fail`, which
//! keep the declared route's. `exempt = "<reason>"` lifts a route's limits.
//!
//! ```toml
//! [routes]
//! "POST /login" = 'limit = 5, window = "5m", algorithm = "sliding_log"'
//! # Stacked declarations: an array, or one string with `;` between them.
//! "GET /api/search" = ['limit = 20, window = "1s"', 'limit = 600, window = "1h"']
//! # For requests whose tier (the `Tier` your auth layer puts in the request) is "pro".
//! 'GET /api/search tier "pro"' = 'limit = 200, window = "1s"'
//!
//! [allow]               # never limited, no store call
//! ips = ["10.0.0.0/8", "2001:db8::/32"]
//! api_keys = ["monitoring-key"]
//! user_ids = ["ops-bot"]
//!
//! [deny]                # answered 403 (problem+json), no store call
//! ips = ["203.0.113.0/24"]
//! ```
//!
//! The Redis hash (default key `rl:overrides`) holds the same rules, one per field: the
//! route selector as the field and the declarations as the value, or `allow <entry>` /
//! `deny <entry>` with a note as the value (`deny ip 203.0.113.0/24` → `"incident 42"`).
//! The `ratelimit-admin` command writes it, checking every value first.
//!
//! ```no_run
//! use ratelimit_runtime::{overrides::Overrides, store::MemoryStore, RateLimiter};
//!
//! let limiter = RateLimiter::new(MemoryStore::new()).overrides(
//!     Overrides::new()
//!         .file("/etc/myapp/ratelimit.toml")
//!         .redis("redis://127.0.0.1:6379"),
//! );
//! ```
//!
//! # What holds
//!
//! - Each source is read when it changes: the file every [`Overrides::refresh`] (default
//!   500 ms; applied once two reads in a row agree, so a file caught half-written is never
//!   applied: write it elsewhere and rename it over the old one to be sure), the Redis hash
//!   every `refresh` too (one `HGETALL` per process, never per request). A change is in
//!   force on every instance within about a second; within 2 s is tested.
//! - A source with one invalid rule (a misspelled key, a route this App does not declare,
//!   a window out of range, a sliding log above its cap) is refused as a whole: an `error`
//!   log line naming every problem, the counter `ratelimit_overrides_refused_total{source}`,
//!   and the previous rules of that source stay in force.
//! - Redis wins over the file, route by route; lists are the union of both. A client on
//!   the deny list is refused even when it is on the allow list too.
//! - Allowed clients are never limited and denied ones get `403` with an
//!   `application/problem+json` body (counter `ratelimit_listed_total{route, list, kind}`);
//!   neither costs a store call. Addresses are the ones the limiter resolves (trusted
//!   proxies); API keys and user ids are read by its sources.
//! - An App that configures none of this reads nothing and calls nothing more per request.
//!   With overrides, each request reads one shared pointer; a route with an override
//!   builds its headers and keys once per worker and change.
//! - The route table ([`RouteTable::with_overrides`](crate::coverage::RouteTable::with_overrides))
//!   shows every route's policy in force and its source.
//!
//! Policies built from overrides are kept for the process's life (their limits are
//! `'static`, like the attribute's): each distinct (route, text) written costs a few hundred
//! bytes once.

mod refresh;
mod rules;
mod table;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use arc_swap::ArcSwap;

pub use rules::{check_tier, ListEntry, ListKind, RouteSelector, RuleSet, MAX_TIER_LEN};
pub use table::{declaration_text, policy_from_text, Overridden, Source};
pub(crate) use table::{Catalog, Table};

/// The default Redis hash of overrides.
pub const DEFAULT_REDIS_KEY: &str = "rl:overrides";

/// The suffix of the hash where services publish their declared routes (`rl:overrides:routes`),
/// for the admin command to check route names against.
pub const ROUTES_SUFFIX: &str = ":routes";

/// The tier of a request, put into its extensions by the app's auth layer
/// (`req.extensions_mut().insert(Tier::new("pro"))`): overrides written for that tier
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
    pub(crate) shared: Arc<Shared>,
}

/// How to reach the Redis that holds the overrides.
#[derive(Debug, Clone)]
pub(crate) enum RedisSource {
    Url(String),
    Cluster(Vec<String>),
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("file", &self.file)
            .field("redis", &self.redis.is_some())
            .field("redis_key", &self.redis_key)
            .field("refresh", &self.refresh)
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
            shared: Arc::default(),
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

    /// The hash's key (default `rl:overrides`); the same for every instance and for the
    /// admin command.
    pub fn redis_key(mut self, key: &str) -> Self {
        self.redis_key = key.to_owned();
        self
    }

    /// How often each source is read (default 500 ms; at least 50 ms).
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every.max(Duration::from_millis(50));
        self
    }

    /// Every route's override in force now, by selector.
    pub fn in_force(&self) -> Vec<(RouteSelector, Overridden)> {
        let table = self.shared.table.load();
        let mut routes: Vec<(RouteSelector, Overridden)> = table
            .routes()
            .map(|(selector, o)| (selector.clone(), o.clone()))
            .collect();
        routes.sort_by(|a, b| a.0.cmp(&b.0));
        routes
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
    pub(crate) state: Mutex<refresh::State>,
    pub(crate) loaded: (Mutex<bool>, std::sync::Condvar),
    pub(crate) started: OnceLock<()>,
}
