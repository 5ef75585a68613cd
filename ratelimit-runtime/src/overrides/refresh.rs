//! The thread that reads the sources (one per [`Overrides`], not per worker), and what it
//! keeps between reads.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use super::{
    rules::{ListKind, RouteSelector},
    table::{
        budget_text, check_budget_names, check_routes, declaration_text, declared_budgets,
        known_tiers, Catalog, Source, Table,
    },
    version_key, Overrides, RedisSource, RuleSet, Shared, BUDGET_WORD, MAX_ENTRIES,
    ROUTES_SEEN_SUFFIX, ROUTES_SUFFIX, TIERS_FIELD,
};
use crate::{
    middleware::telemetry::{OVERRIDES_APPLIED, OVERRIDES_REFUSED},
    store::RedisSentinelStore,
};

/// How often the declared routes are published to Redis again, whatever happened (the admin
/// command takes a route not published for [`super::ROUTES_FRESH_FOR`] as gone).
const REPUBLISH_EVERY: Duration = Duration::from_secs(60);

/// How long one read of the Redis hash may take.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// How many fields one `HSCAN` of the overrides hash asks for: about a millisecond of Redis
/// time (an `HSCAN` costs Redis about 1.2 µs a field), so that checks are never held long
/// behind a long list being read; one `HGETALL` of 100,000 fields holds Redis 25 to 40 ms.
const SCAN_COUNT: usize = 1_000;

/// The most fields of a hash read whole at every refresh, whatever its version and length
/// say (less than a millisecond of Redis time): a change written by hand applies within a
/// refresh. A longer hash is read again only when its version or length changed.
const READ_WHOLE_UP_TO: u64 = 1_000;

/// How long a changed file must read the same before it is applied.
const FILE_SETTLE: Duration = Duration::from_millis(100);

/// One source between reads.
#[derive(Default)]
pub(crate) struct SourceState {
    /// The content last applied or refused.
    seen: Option<String>,
    /// A changed file's content, read once, waiting to read the same again.
    pending: Option<String>,
    /// The rules in force from this source.
    accepted: Option<RuleSet>,
    /// Whether the last read failed (logged once per failure streak).
    failing: bool,
    /// Whether the file was missing at the last read (warned of once per streak).
    missing: bool,
    /// The file's length and modification time at its last read.
    file_stamp: Option<(u64, Option<std::time::SystemTime>)>,
    /// The Redis hash's version and length at its last full read: it is read again only
    /// when either changed.
    stamp: Option<(Option<String>, u64)>,
    /// Why the last content read was refused, until one is accepted.
    pub(crate) refused: Vec<String>,
}

/// What the thread and the workers share about the sources.
#[derive(Default)]
pub(crate) struct State {
    /// The App's declared routes, once a worker has read them.
    catalog: Option<Arc<Catalog>>,
    /// The tiers overrides may name: those the declared routes give limits of their own, and
    /// those `Overrides::tiers` lists.
    tiers: BTreeSet<String>,
    file: SourceState,
    redis: SourceState,
    generation: u64,
    /// Whether the declared routes were published to Redis.
    published: bool,
}

impl Shared {
    /// Sets the App's declared routes (on the first request) and the tiers `listed` beside
    /// those they declare: rules are checked against them from now on, and rules in force
    /// naming none of them are dropped.
    pub(crate) fn set_routes(&self, catalog: Catalog, listed: &BTreeSet<String>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.catalog.as_deref() == Some(&catalog) {
            return;
        }
        let tiers = known_tiers(&catalog, listed);
        let catalog = Arc::new(catalog);
        state.catalog = Some(Arc::clone(&catalog));
        state.tiers = tiers.clone();
        state.published = false;
        for source in [Source::File, Source::Redis] {
            let slot = state.source_mut(source);
            if let Some(set) = &slot.accepted {
                let problems = check_routes(set, &catalog, &tiers);
                if !problems.is_empty() {
                    refused(
                        source,
                        &problems,
                        "none from this source is in force (read before the App's routes were known, they name routes it does not declare)",
                    );
                    slot.accepted = None;
                    slot.refused = problems;
                }
            }
        }
        self.rebuild(&mut state);
    }

    /// Has the declared routes published to Redis again at the next read.
    fn republish(&self) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .published = false;
    }

    fn rebuild(&self, state: &mut State) {
        state.generation += 1;
        let empty = Catalog::new();
        let catalog = state.catalog.as_deref().unwrap_or(&empty);
        let mut sets = Vec::new();
        if let Some(set) = &state.file.accepted {
            sets.push((Source::File, set));
        }
        if let Some(set) = &state.redis.accepted {
            sets.push((Source::Redis, set));
        }
        self.table
            .store(Arc::new(Table::build(state.generation, &sets, catalog)));
    }

    /// A source's content as read now (`None`: could not be read; the rules stay).
    fn offer(
        &self,
        config: &Overrides,
        source: Source,
        content: String,
        parse: impl FnOnce(&str) -> (RuleSet, Vec<String>),
    ) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.source_mut(source).seen.as_deref() == Some(content.as_str()) {
            return;
        }
        // Every problem is named at once: the routes of the rules that read are checked
        // even when others do not read.
        let (set, mut problems) = parse(&content);
        let fields = set.len();
        if fields > MAX_ENTRIES {
            problems.push(too_many(fields));
        }
        problems.extend(set.list_problems(config.widest, config.plain_api_keys));
        problems.extend(check_budget_names(&set));
        // Checked against the App's routes now, or only once they are known.
        let routes_checked = state.catalog.is_some();
        if let Some(catalog) = state.catalog.as_deref() {
            problems.extend(check_routes(&set, catalog, &state.tiers));
        }
        let checked = if problems.is_empty() {
            Ok(set)
        } else {
            Err(problems)
        };
        let slot = state.source_mut(source);
        slot.seen = Some(content);
        match checked {
            Ok(set) => {
                if emptied(source, slot.accepted.as_ref(), &set) {
                    tracing::warn!(
                        target: "ratelimit",
                        source = source.as_str(),
                        "the overrides hash is gone or empty (cleared, or lost: a Redis restarted without its data, FLUSHALL, an allkeys eviction policy): the declared policies and no allow or deny list are in force again"
                    );
                }
                tracing::info!(
                    target: "ratelimit",
                    source = source.as_str(),
                    routes = set.routes.len(),
                    budgets = set.budgets.len(),
                    entries = set.lists.len(),
                    routes_checked,
                    "overrides in force{}",
                    if routes_checked {
                        ""
                    } else {
                        " (their routes are checked once the App's are known: on its first request, or by RouteTable::with_overrides)"
                    }
                );
                metrics::counter!(OVERRIDES_APPLIED, "source" => source.as_str()).increment(1);
                log_changes(source, slot.accepted.as_ref(), &set);
                if self.raw_api_keys.load(std::sync::atomic::Ordering::Relaxed) {
                    warn_raw_api_keys(&set);
                }
                slot.accepted = Some(set);
                slot.refused.clear();
                self.rebuild(&mut state);
            }
            Err(problems) => {
                refused(source, &problems, "the previous ones stay in force");
                slot.refused = problems;
            }
        }
    }

    pub(crate) fn wait_loaded(&self, timeout: Duration) -> bool {
        let (loaded, ready) = &self.loaded;
        let guard = loaded.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = ready
            .wait_timeout_while(guard, timeout, |loaded| !*loaded)
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }

    fn mark_loaded(&self) {
        let (loaded, ready) = &self.loaded;
        *loaded.lock().unwrap_or_else(|e| e.into_inner()) = true;
        ready.notify_all();
    }
}

impl State {
    /// Why each source's last content was refused, for those whose was.
    pub(crate) fn refusals(&self) -> Vec<(Source, Vec<String>)> {
        [(Source::File, &self.file), (Source::Redis, &self.redis)]
            .into_iter()
            .filter(|(_, slot)| !slot.refused.is_empty())
            .map(|(source, slot)| (source, slot.refused.clone()))
            .collect()
    }

    fn source_mut(&mut self, source: Source) -> &mut SourceState {
        match source {
            Source::File => &mut self.file,
            _ => &mut self.redis,
        }
    }
}

/// The refusal of a source with `fields` fields.
fn too_many(fields: usize) -> String {
    format!(
        "{fields} fields: a source holds at most {MAX_ENTRIES} (overrides::MAX_ENTRIES); list ranges rather than single addresses, or keep long blocklists at the edge"
    )
}

/// The most entries added or removed that one change logs by name; the rest are counted.
const CHANGES_LOGGED: usize = 100;

/// Logs each route override and list entry `now` adds to or removes from `before` (API keys
/// by fingerprint, as they are written), at most [`CHANGES_LOGGED`] of each by name.
fn log_changes(source: Source, before: Option<&RuleSet>, now: &RuleSet) {
    let empty = RuleSet::default();
    let before = before.unwrap_or(&empty);
    let entry_text = |set: &RuleSet, kind: ListKind, entry: &super::ListEntry| {
        let field = super::list_field(kind, entry, set.allow_routes.get(entry));
        super::redacted_field(&field, &field)
            .replacen(kind.as_str(), "", 1)
            .trim()
            .to_owned()
    };
    let lists = |set: &RuleSet| -> std::collections::BTreeSet<(ListKind, String)> {
        set.lists
            .keys()
            .map(|(kind, entry)| (*kind, entry_text(set, *kind, entry)))
            .collect()
    };
    let (old, new) = (lists(before), lists(now));
    let routes = |set: &RuleSet| -> std::collections::BTreeSet<(RouteSelector, String)> {
        set.routes
            .iter()
            .map(|(selector, (text, _))| (selector.clone(), text.clone()))
            .collect()
    };
    let (old_routes, new_routes) = (routes(before), routes(now));
    let mut logged = 0;
    let mut unlogged = 0;
    let mut log = |line: &dyn Fn()| {
        if logged < CHANGES_LOGGED {
            logged += 1;
            line();
        } else {
            unlogged += 1;
        }
    };
    for (kind, entry) in new.difference(&old) {
        log(
            &|| tracing::info!(target: "ratelimit", source = source.as_str(), list = kind.as_str(), entry = %entry, "list entry added"),
        );
    }
    for (kind, entry) in old.difference(&new) {
        log(
            &|| tracing::info!(target: "ratelimit", source = source.as_str(), list = kind.as_str(), entry = %entry, "list entry removed"),
        );
    }
    for (selector, text) in new_routes.difference(&old_routes) {
        log(
            &|| tracing::info!(target: "ratelimit", source = source.as_str(), route = %selector, declarations = %text, "route override set"),
        );
    }
    for (selector, _) in old_routes
        .iter()
        .filter(|(selector, _)| !now.routes.contains_key(selector))
    {
        log(
            &|| tracing::info!(target: "ratelimit", source = source.as_str(), route = %selector, "route override removed"),
        );
    }
    for (name, (text, _)) in &now.budgets {
        if before.budgets.get(name).map(|(t, _)| t) != Some(text) {
            log(
                &|| tracing::info!(target: "ratelimit", source = source.as_str(), budget = %name, declarations = %text, "shared budget override set"),
            );
        }
    }
    for name in before
        .budgets
        .keys()
        .filter(|name| !now.budgets.contains_key(*name))
    {
        log(
            &|| tracing::info!(target: "ratelimit", source = source.as_str(), budget = %name, "shared budget override removed"),
        );
    }
    if unlogged > 0 {
        tracing::info!(
            target: "ratelimit",
            source = source.as_str(),
            more = unlogged,
            "{unlogged} more changes of the overrides, not logged one by one"
        );
    }
}

/// Warns when `set` allows API keys while the limiter reads keys from a header as sent:
/// anyone who learns a listed key passes with it.
fn warn_raw_api_keys(set: &RuleSet) {
    let allowed = set
        .lists
        .keys()
        .filter(|(kind, entry)| *kind == ListKind::Allow && entry.kind() == "api_key")
        .count();
    if allowed > 0 {
        tracing::warn!(
            target: "ratelimit",
            entries = allowed,
            "the allow list names API keys while the limiter reads the API key from a header as the client sends it: anyone who sends a listed key is not limited; give the limiter `ApiKeySource::from_fn` returning only keys your app validated"
        );
    }
}

/// Whether `source`'s rules in force, `before`, give way to none at all in the Redis hash:
/// Redis drops a hash with its last field, so this reads the same whether the overrides
/// were cleared one by one or lost with the data (a restart without it, `FLUSHALL`, an
/// `allkeys-*` eviction), which an operator is told of.
fn emptied(source: Source, before: Option<&RuleSet>, now: &RuleSet) -> bool {
    let holds = |set: &RuleSet| !set.is_empty();
    source == Source::Redis && before.is_some_and(holds) && !holds(now)
}

fn refused(source: Source, problems: &[String], outcome: &str) {
    tracing::error!(
        target: "ratelimit",
        source = source.as_str(),
        problems = %problems.join("; "),
        "overrides refused as a whole; {outcome}"
    );
    metrics::counter!(OVERRIDES_REFUSED, "source" => source.as_str()).increment(1);
}

/// A read failed: logged once per streak of failures.
fn unreadable(shared: &Shared, source: Source, error: &dyn std::fmt::Display) {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let slot = state.source_mut(source);
    if !slot.failing {
        tracing::warn!(
            target: "ratelimit",
            source = source.as_str(),
            %error,
            "overrides cannot be read; the ones in force stay"
        );
    }
    slot.failing = true;
}

fn readable(shared: &Shared, source: Source) {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    state.source_mut(source).failing = false;
}

/// The hash's fields as one text, in field order (to tell a change).
fn hash_content(fields: &BTreeMap<String, String>) -> String {
    fields
        .iter()
        .map(|(f, v)| format!("{f}\u{0}{v}\u{0}"))
        .collect()
}

enum Connection {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
    /// Follows the primary itself: kept through errors. With the primaries named so far
    /// when the routes were last published.
    Sentinel(RedisSentinelStore, Option<u64>),
}

/// `command`'s answer, or a time-out after [`REDIS_TIMEOUT`].
async fn within<T>(
    command: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    crate::store::within(REDIS_TIMEOUT, command)
        .await
        .unwrap_or_else(|_| Err(crate::store::no_answer_within(REDIS_TIMEOUT)))
}

impl Connection {
    async fn open(source: &RedisSource) -> redis::RedisResult<Connection> {
        crate::store::tls::ensure_crypto_provider();
        match source {
            RedisSource::Url(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(REDIS_TIMEOUT))
                    .set_response_timeout(Some(REDIS_TIMEOUT));
                Ok(Connection::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            RedisSource::Cluster(nodes) => {
                let client = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(REDIS_TIMEOUT)
                    .response_timeout(REDIS_TIMEOUT)
                    .build()?;
                Ok(Connection::Cluster(client.get_async_connection().await?))
            }
            // Connections of the refresh thread's own: the App's runtime may be blocked
            // waiting for this very read.
            RedisSource::Sentinel(store) => Ok(Connection::Sentinel(store.detached(), None)),
        }
    }

    /// Whether the connection is made anew after an error (a Sentinel store finds the
    /// primary again itself, and drops a connection that failed).
    fn reopens_after_error(&self) -> bool {
        !matches!(self, Connection::Sentinel(..))
    }

    /// `command`'s answer, within [`REDIS_TIMEOUT`].
    async fn query<T: redis::FromRedisValue>(
        &mut self,
        command: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        match self {
            Connection::Single(c) => within(command.query_async(c)).await,
            Connection::Cluster(c) => within(command.query_async(c)).await,
            Connection::Sentinel(store, _) => store.query(command, REDIS_TIMEOUT).await,
        }
    }

    /// The hash's version (see [`version_key`]) and length.
    async fn stamp(
        &mut self,
        version: &str,
        key: &str,
    ) -> redis::RedisResult<(Option<String>, u64)> {
        let version: Option<String> = self.query(redis::cmd("GET").arg(version)).await?;
        let len: u64 = self.query(redis::cmd("HLEN").arg(key)).await?;
        Ok((version, len))
    }

    /// Every field of the hash at `key`, read in pieces of about [`SCAN_COUNT`] fields.
    async fn hscan_all(&mut self, key: &str) -> redis::RedisResult<BTreeMap<String, String>> {
        let mut fields = BTreeMap::new();
        let mut cursor = 0u64;
        loop {
            let (next, pairs): (u64, Vec<(String, String)>) = self
                .query(
                    redis::cmd("HSCAN")
                        .arg(key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(SCAN_COUNT),
                )
                .await?;
            fields.extend(pairs);
            if next == 0 {
                return Ok(fields);
            }
            cursor = next;
        }
    }

    /// Whether the routes published so far may not be where this connection reads: a
    /// Sentinel deployment's primary changed since they were.
    fn moved(&self) -> bool {
        match self {
            Connection::Sentinel(store, published) => store.primary_generation() != *published,
            _ => false,
        }
    }

    /// Writes `routes` to the hash at `key`, and now as the time each was published to the
    /// hash at `seen` (see [`ROUTES_SEEN_SUFFIX`]), within [`REDIS_TIMEOUT`] each.
    async fn publish(
        &mut self,
        key: &str,
        seen: &str,
        routes: &[(String, String)],
    ) -> redis::RedisResult<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let times: Vec<(&str, u64)> = routes
            .iter()
            .map(|(route, _)| (route.as_str(), now))
            .collect();
        // `HSET` with many fields (not `HMSET`): the one command the guide's ACL grants.
        let primary = match self {
            Connection::Sentinel(store, _) => store.primary_generation(),
            _ => None,
        };
        self.query::<u64>(redis::cmd("HSET").arg(key).arg(routes))
            .await?;
        self.query::<u64>(redis::cmd("HSET").arg(seen).arg(&times))
            .await?;
        if let Connection::Sentinel(_, published) = self {
            *published = primary;
        }
        Ok(())
    }
}

impl Overrides {
    /// Starts the thread that reads the sources, once, and waits up to `wait` for its
    /// first read.
    pub(crate) fn start(&self, wait: Duration) {
        if self.file.is_none() && self.redis.is_none() {
            return;
        }
        let mut spawned = false;
        self.shared.started.get_or_init(|| {
            // The counters alerts watch exist at zero from the start, one per source read.
            for (source, read) in [
                (Source::File, self.file.is_some()),
                (Source::Redis, self.redis.is_some()),
            ] {
                if read {
                    for name in [OVERRIDES_APPLIED, OVERRIDES_REFUSED] {
                        metrics::counter!(name, "source" => source.as_str()).increment(0);
                    }
                }
            }
            let weak = Arc::downgrade(&self.shared);
            let config = self.clone_without_shared();
            // The thread logs where the thread that started it does (an app's scoped
            // subscriber, not only the global one).
            let dispatch = tracing::dispatcher::get_default(Clone::clone);
            let thread = std::thread::Builder::new()
                .name("ratelimit-overrides".to_owned())
                .spawn(move || tracing::dispatcher::with_default(&dispatch, || run(config, weak)));
            if let Err(error) = thread {
                tracing::error!(target: "ratelimit", %error, "cannot start the overrides thread; declared policies stay in force");
            }
            spawned = true;
        });
        if spawned && !self.shared.wait_loaded(wait) {
            tracing::warn!(target: "ratelimit", "overrides not read within {wait:?}; applying them when they are");
        }
    }

    fn clone_without_shared(&self) -> Overrides {
        Overrides {
            shared: Arc::default(),
            ..self.clone()
        }
    }
}

/// The thread's loop: reads each source every `refresh` (a changed file again after
/// [`FILE_SETTLE`]) until the limiter is dropped.
fn run(config: Overrides, shared: Weak<Shared>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(target: "ratelimit", %error, "cannot start the overrides thread's runtime");
            return;
        }
    };
    runtime.block_on(async move {
        let mut connection: Option<Connection> = None;
        let mut next_redis = Instant::now();
        let mut next_publish = Instant::now() + REPUBLISH_EVERY;
        loop {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if Instant::now() >= next_publish {
                // The routes hash may have gone without an error on the way (FLUSHALL, an
                // eviction, a restored backup): written again now and then.
                shared.republish();
                next_publish = Instant::now() + REPUBLISH_EVERY;
            }
            let mut settling = false;
            if let Some(path) = &config.file {
                settling = read_file(&shared, &config, path);
            }
            if let (Some(source), true) = (&config.redis, Instant::now() >= next_redis) {
                next_redis = Instant::now() + config.refresh;
                read_redis(&shared, &config, source, &mut connection).await;
            }
            // The first read of a file that reads differently the second time is still
            // settling: loaded once it reads the same.
            if !settling {
                shared.mark_loaded();
            }
            drop(shared);
            let pause = if settling {
                FILE_SETTLE
            } else {
                config.refresh
            };
            tokio::time::sleep(pause).await;
        }
    });
}

/// Reads the file; whether its content is still settling (changed since the last read). A
/// file whose length and modification time are those of the last read is not read again
/// (a long list would cost every refresh its size).
fn read_file(shared: &Shared, config: &Overrides, path: &std::path::Path) -> bool {
    let stamp = std::fs::metadata(path)
        .ok()
        .map(|meta| (meta.len(), meta.modified().ok()));
    {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let slot = state.source_mut(Source::File);
        if stamp.is_some() && slot.file_stamp == stamp && slot.pending.is_none() {
            return false;
        }
    }
    let content = match std::fs::read_to_string(path) {
        Ok(content) => content,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            let slot = state.source_mut(Source::File);
            if !slot.missing {
                tracing::warn!(
                    target: "ratelimit",
                    path = %path.display(),
                    "the overrides file does not exist: none of its rules is in force (a file named by the configuration or RATELIMIT_OVERRIDES_FILE is read again every refresh, and applied once it exists)"
                );
            }
            slot.missing = true;
            String::new()
        }
        Err(error) => {
            unreadable(shared, Source::File, &error);
            return false;
        }
    };
    readable(shared, Source::File);
    {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let slot = state.source_mut(Source::File);
        slot.file_stamp = stamp;
        if !content.is_empty() || path.exists() {
            slot.missing = false;
        }
        if slot.seen.as_deref() == Some(content.as_str()) {
            slot.pending = None;
            return false;
        }
        if slot.pending.as_deref() != Some(content.as_str()) {
            slot.pending = Some(content);
            return true;
        }
        slot.pending = None;
    }
    shared.offer(config, Source::File, content, RuleSet::read_toml);
    false
}

/// Reads the hash when it is short ([`READ_WHOLE_UP_TO`]) or its version or length changed
/// since the last full read (one small read otherwise), in pieces (`HSCAN`) so that a long
/// list never holds Redis for long, and takes it only when its version did not change while
/// it was read.
async fn read_redis(
    shared: &Shared,
    config: &Overrides,
    source: &RedisSource,
    connection: &mut Option<Connection>,
) {
    if connection.is_none() {
        match tokio::time::timeout(REDIS_TIMEOUT, Connection::open(source)).await {
            Ok(Ok(opened)) => *connection = Some(opened),
            Ok(Err(error)) => return unreadable(shared, Source::Redis, &error),
            Err(_) => return unreadable(shared, Source::Redis, &"connecting timed out"),
        }
    }
    let Some(open) = connection.as_mut() else {
        return;
    };
    let version = version_key(&config.redis_key);
    let read = async {
        let stamp = open.stamp(&version, &config.redis_key).await?;
        let last = shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .redis
            .stamp
            .clone();
        if last.as_ref() == Some(&stamp) && stamp.1 > READ_WHOLE_UP_TO {
            return Ok::<_, redis::RedisError>(None);
        }
        if stamp.1 > MAX_ENTRIES as u64 {
            let problem = too_many(usize::try_from(stamp.1).unwrap_or(usize::MAX));
            return Ok(Some((stamp, Err(problem))));
        }
        let fields = open.hscan_all(&config.redis_key).await?;
        // A write between the stamp and the end of the scan may be seen in part: read again
        // at the next refresh.
        let after = open.stamp(&version, &config.redis_key).await?;
        if after.0 != stamp.0 {
            return Ok(None);
        }
        Ok(Some((stamp, Ok(fields))))
    };
    let fields = match read.await {
        Ok(Some((stamp, fields))) => {
            shared
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .redis
                .stamp = Some(stamp);
            Some(fields)
        }
        Ok(None) => None,
        Err(error) => {
            if open.reopens_after_error() {
                *connection = None;
            }
            // The server that answers next may have lost the published routes (a restart
            // without persistence, a failover): they are published again, and the hash read
            // again whatever its stamp.
            shared.republish();
            shared
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .redis
                .stamp = None;
            return unreadable(shared, Source::Redis, &error);
        }
    };
    readable(shared, Source::Redis);
    match fields {
        Some(Ok(fields)) => {
            let content = hash_content(&fields);
            shared.offer(config, Source::Redis, content, |_| {
                RuleSet::read(fields.iter().map(|(f, v)| (f.as_str(), v.as_str())))
            });
        }
        Some(Err(problem)) => {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            let slot = state.source_mut(Source::Redis);
            if slot.refused != [problem.clone()] {
                refused(
                    Source::Redis,
                    std::slice::from_ref(&problem),
                    "the previous ones stay in force",
                );
                slot.refused = vec![problem];
                slot.seen = None;
            }
        }
        None => {}
    }
    let Some(open) = connection.as_mut() else {
        return;
    };
    if open.moved() {
        shared.republish();
    }
    let routes = {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match (&state.catalog, state.published) {
            (Some(catalog), false) => Some(published_routes(catalog, &state.tiers)),
            _ => None,
        }
    };
    if let Some(routes) = routes.filter(|r| !r.is_empty()) {
        let key = format!("{}{ROUTES_SUFFIX}", config.redis_key);
        let seen = format!("{}{ROUTES_SEEN_SUFFIX}", config.redis_key);
        if open.publish(&key, &seen, &routes).await.is_ok() {
            shared
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .published = true;
        }
    }
}

/// The fields the services publish for the admin command: each declared route with its
/// declared policy, each tier a route gives limits of its own (`GET /search tier "pro"`)
/// with those limits, each shared budget the program declares (`budget API`) with its
/// limit, and [`TIERS_FIELD`] with every tier overrides may name.
fn published_routes(catalog: &Catalog, tiers: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut routes = Vec::new();
    for (route, declaration) in catalog {
        routes.push((route.clone(), declaration_text(&declaration.policy)));
        let Some(policy) = declaration.policy.limited() else {
            continue;
        };
        for tier in policy.tiers() {
            let selector = RouteSelector {
                route: route.clone(),
                tier: Some(tier.name().to_owned()),
            };
            let limits = policy.tier(tier.name()).map(crate::policy::Policy::Limited);
            if let Some(limits) = limits {
                routes.push((selector.to_string(), declaration_text(&limits)));
            }
        }
    }
    for (name, limit) in declared_budgets() {
        routes.push((format!("{BUDGET_WORD}{name}"), budget_text(&limit)));
    }
    let names: Vec<&str> = tiers.iter().map(String::as_str).collect();
    routes.push((TIERS_FIELD.to_owned(), names.join(" ")));
    routes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_hash_that_held_rules_and_holds_none_is_told() {
        let rules = RuleSet::from_fields([("POST /login", r#"limit = 5, window = "5m""#)]).unwrap();
        let none = RuleSet::from_fields(std::iter::empty::<(&str, &str)>()).unwrap();
        assert!(emptied(Source::Redis, Some(&rules), &none));
        assert!(
            !emptied(Source::Redis, Some(&none), &none),
            "nothing was lost"
        );
        assert!(!emptied(Source::Redis, None, &none), "the first read");
        assert!(!emptied(Source::Redis, Some(&rules), &rules));
        assert!(
            !emptied(Source::File, Some(&rules), &none),
            "a file emptied is an edit"
        );
    }

    #[test]
    fn the_file_reads_as_the_hash_does() {
        let (set, problems) = RuleSet::read_toml(
            r#"
            [routes]
            "POST /login" = 'limit = 5, window = "5m", algorithm = "sliding_log"'
            "GET /api/search" = ['limit = 20, window = "1s"', 'limit = 600, window = "1h"']
            'GET /api/search tier "pro"' = 'limit = 200, window = "1s"'
            [allow]
            ips = ["10.0.0.0/8", "2001:db8::/32"]
            api_keys = ["monitoring-key"]
            [deny]
            user_ids = ["42"]
            "#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(set.routes.len(), 3);
        assert_eq!(set.lists.len(), 4);
        let stacked = set
            .routes
            .iter()
            .find(|(s, _)| s.route == "GET /api/search" && s.tier.is_none())
            .unwrap();
        assert_eq!(stacked.1 .1.len(), 2);
        for (bad, expected) in [
            ("[route]\n", "did you mean `routes`?"),
            ("[allow]\nip = [\"10.0.0.0/8\"]\n", "did you mean `ips`?"),
            ("[routes]\n\"POST /login\" = 5\n", "takes a string"),
            (
                "[routes]\n\"POST /login\" = 'limit = 5, window = \"5m\"",
                "not TOML",
            ),
        ] {
            let (_, errors) = RuleSet::read_toml(bad);
            assert!(
                errors.iter().any(|e| e.contains(expected)),
                "{bad}: {errors:?}"
            );
        }
    }
}
