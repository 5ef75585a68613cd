//! The Redis side of the command: the overrides hash, the routes the services publish, and
//! a client's budget.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use ratelimit_runtime::{
    key::KeySecret,
    overrides::{
        policy_with_budgets, shared_budget_from_text, unknown_budget, unknown_tier, version_key,
        ListEntry, ListKind, RouteSelector, RuleSet, WidestRanges, BUDGET_WORD, MAX_ENTRIES,
        ROUTES_FRESH_FOR, ROUTES_SEEN_SUFFIX, ROUTES_SUFFIX, TIERS_FIELD,
    },
    settings::Keys,
    store::LimitState,
    store::{RedisClusterStore, RedisSentinelStore, RedisStore, Store},
    IdentityPart, Limit, Policy, RateLimiter,
};
use redis::IntoConnectionInfo as _;

use crate::ClientArgs;

enum Connection {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// Where the services' Redis is.
pub(crate) enum Target {
    Url(String),
    Cluster(Vec<String>),
    /// The primary these sentinels name `master`.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        password: Option<String>,
    },
}

/// What the services publish: the routes running services declare, with their policies,
/// and the routes of services no longer running, with how many seconds ago they were last
/// published; the tiers routes give limits of their own, and the tiers the services take.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Published {
    /// Each route (`POST /login`) with its declared policy.
    pub(crate) routes: BTreeMap<String, String>,
    /// Each route or tier published before but not lately, with how many seconds ago.
    pub(crate) gone: BTreeMap<String, u64>,
    /// Each tier a route gives limits of its own, by selector (`GET /search tier "pro"`),
    /// with those limits.
    pub(crate) tiers: BTreeMap<String, String>,
    /// The tiers an override may name; `None` from services of a version that publishes
    /// none (they take any tier).
    pub(crate) known_tiers: Option<BTreeSet<String>>,
    /// Each shared budget the services declare, by name (`API`), with its declared limit.
    pub(crate) budgets: BTreeMap<String, String>,
}

/// How long one command or check may take.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// What the services refuse in the lists, as they are configured
/// (`Overrides::widest_ranges`, `Overrides::plain_api_keys`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListBounds {
    pub(crate) widest: WidestRanges,
    pub(crate) plain_api_keys: bool,
}

/// Writes one field (`ARGV[2]` = `ARGV[3]`), removes the fields `ARGV[4..]`, and counts the
/// change in the version key (`KEYS[2]`), at once, unless the version is no longer
/// `ARGV[1]` (the one read before the hash was checked: another writer's change would make
/// the checked hash another one): the services re-read the hash when its version changes,
/// and never see the write without its count.
const WRITE: &str = r"
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[1] then
  return redis.error_reply('the overrides hash changed while this command checked it (another writer): run the command again')
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
for i = 4, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
redis.call('INCR', KEYS[2])
return 1
";

/// Removes the fields `ARGV` and counts the change in the version key: how many were there.
const REMOVE: &str = r"
local removed = 0
for i = 1, #ARGV do removed = removed + redis.call('HDEL', KEYS[1], ARGV[i]) end
if removed > 0 then redis.call('INCR', KEYS[2]) end
return removed
";

/// The overrides hash of one Redis (a Cluster, or the primary of a Sentinel deployment).
pub(crate) struct Admin {
    connection: Connection,
    key: String,
    bounds: ListBounds,
    /// Where a client's budget is read or reset.
    budgets: Budgets,
}

/// The store a client's budget is read or reset through: one is made per command for a URL
/// or a Cluster; a Sentinel deployment's is the one that found the primary.
enum Budgets {
    Url(String),
    Cluster(Vec<String>),
    Sentinel(RedisSentinelStore),
}

fn failed(error: redis::RedisError) -> String {
    format!("Redis: {error}")
}

impl Admin {
    pub(crate) async fn connect(
        target: Target,
        key: &str,
        bounds: ListBounds,
    ) -> Result<Admin, String> {
        let (connection, budgets) = match target {
            Target::Cluster(nodes) => {
                let client = redis::cluster::ClusterClient::new(nodes.clone()).map_err(failed)?;
                let connection = client.get_async_connection().await.map_err(failed)?;
                (Connection::Cluster(connection), Budgets::Cluster(nodes))
            }
            Target::Url(url) => {
                let client = redis::Client::open(url.as_str()).map_err(failed)?;
                (single(client).await?, Budgets::Url(url))
            }
            Target::Sentinel {
                sentinels,
                master,
                password,
            } => {
                let store = sentinel_store(&sentinels, &master, password.as_deref()).await?;
                let address = store
                    .primary_address()
                    .await
                    .map_err(|e| format!("the sentinels: {e}"))?;
                let client = primary_client(&sentinels, &address, password.as_deref())?;
                (single(client).await?, Budgets::Sentinel(store))
            }
        };
        Ok(Admin {
            connection,
            key: key.to_owned(),
            bounds,
            budgets,
        })
    }

    pub(crate) fn routes_key(&self) -> String {
        format!("{}{ROUTES_SUFFIX}", self.key)
    }

    /// Every field of the hash at `key`, read with `HSCAN` in pieces of 1,000 fields (as the
    /// services read it), so that a long list never holds Redis for long.
    async fn hgetall(&self, key: &str) -> Result<BTreeMap<String, String>, String> {
        let mut fields = BTreeMap::new();
        let mut cursor = 0u64;
        loop {
            let mut command = redis::cmd("HSCAN");
            command.arg(key).arg(cursor).arg("COUNT").arg(1000);
            let (next, pairs): (u64, Vec<(String, String)>) = self.invoke(&command).await?;
            fields.extend(pairs);
            if next == 0 {
                return Ok(fields);
            }
            cursor = next;
        }
    }

    /// Every field of the overrides hash.
    pub(crate) async fn fields(&self) -> Result<BTreeMap<String, String>, String> {
        self.hgetall(&self.key).await
    }

    /// The routes running services declare, with their declared policies: see
    /// [`Admin::published`].
    pub(crate) async fn routes(&self) -> Result<BTreeMap<String, String>, String> {
        Ok(self.published().await?.routes)
    }

    /// The routes running services declare, and those published before but not within
    /// [`ROUTES_FRESH_FOR`], with how many seconds ago: the routes of a deploy that no longer
    /// runs. A route published with no time (by a service of a version that writes none) is
    /// taken as declared, and so is every route when none was published within
    /// [`ROUTES_FRESH_FOR`] with a time (services of such a version are running again).
    pub(crate) async fn published(&self) -> Result<Published, String> {
        let routes = self.hgetall(&self.routes_key()).await?;
        let seen = self
            .hgetall(&format!("{}{ROUTES_SEEN_SUFFIX}", self.key))
            .await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        Ok(split_published(routes, &seen, now))
    }

    /// Why the services would refuse the hash as it stands as a whole (they apply all of it
    /// or none): see [`Admin::problems_of`].
    pub(crate) async fn hash_problems(&self) -> Result<Vec<String>, String> {
        let fields = self.fields().await?;
        self.problems_of(&fields).await
    }

    /// Why the services would refuse a hash of `fields` as a whole: fields the grammar
    /// refuses, and route overrides naming a route the services do not declare or declare
    /// exempt.
    async fn problems_of(&self, fields: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
        let (set, mut problems) =
            RuleSet::read(fields.iter().map(|(f, v)| (f.as_str(), v.as_str())));
        problems.extend(set.list_problems(self.bounds.widest, self.bounds.plain_api_keys));
        problems.extend(self.route_problems(&set).await?);
        if fields.len() > MAX_ENTRIES {
            problems.push(format!(
                "{} fields: the services take at most {MAX_ENTRIES}",
                fields.len()
            ));
        }
        Ok(problems)
    }

    /// The route overrides of `set` that name a route the services do not declare, or
    /// declare exempt, or a tier they do not know (none while no service has published its
    /// routes).
    async fn route_problems(&self, set: &RuleSet) -> Result<Vec<String>, String> {
        let published = self.published().await?;
        let routes = &published.routes;
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let tiers = set.routes.keys().filter_map(|selector| {
            let known = published.known_tiers.as_ref()?;
            unknown_tier(&selector.to_string(), selector.tier.as_deref()?, known)
        });
        let opened = set
            .routes_opened()
            .filter(|route| !routes.contains_key(*route))
            .map(|route| format!("an allow entry opens `{route}`, which no service declares"));
        let known: Vec<&str> = published.budgets.keys().map(String::as_str).collect();
        let budgets = set
            .budgets_named()
            .filter_map(|(field, name)| unknown_budget(&field, name, &known))
            .collect::<Vec<_>>();
        Ok(set
            .routes
            .keys()
            .filter_map(|selector| match routes.get(&selector.route) {
                None => Some(format!("`{selector}` names no route the services declare")),
                Some(declared) if declared.starts_with("exempt") => Some(format!(
                    "`{selector}` is declared exempt, so it has no limit to override"
                )),
                Some(_) => None,
            })
            .chain(tiers)
            .chain(budgets)
            .chain(opened)
            .collect())
    }

    /// Each shared budget the services declare with its limit in force: its override in the
    /// hash (`fields`), else in the services' overrides `file`, else its declaration.
    pub(crate) fn budgets_in_force(
        published: &Published,
        fields: &BTreeMap<String, String>,
        file: &RuleSet,
    ) -> Result<BTreeMap<&'static str, Limit>, String> {
        let mut budgets = BTreeMap::new();
        for (name, declared) in &published.budgets {
            let declared =
                shared_budget_from_text(name, declared, None).map_err(|e| e.join("\n"))?;
            let written = fields
                .get(&format!("{BUDGET_WORD}{name}"))
                .or_else(|| file.budgets.get(name).map(|(text, _)| text));
            let limit = match written {
                Some(text) => {
                    shared_budget_from_text(name, text, Some(declared)).map_err(|e| e.join("\n"))?
                }
                None => declared,
            };
            let name = limit.budget().expect("a shared budget's limit names it");
            budgets.insert(name, limit);
        }
        Ok(budgets)
    }

    /// The fields of the hash that name `entry` on `kind`'s list (written with or without
    /// the routes it opens).
    pub(crate) async fn entry_fields(
        &self,
        kind: ListKind,
        entry: &ListEntry,
    ) -> Result<Vec<String>, String> {
        Ok(self
            .fields()
            .await?
            .into_keys()
            .filter(|field| {
                RuleSet::from_fields([(field.as_str(), "")])
                    .is_ok_and(|set| set.lists.contains_key(&(kind, entry.clone())))
            })
            .collect())
    }

    /// Writes `field`, unless the hash would then be one the services refuse as a whole:
    /// the value it replaced, if it was there.
    pub(crate) async fn set(&self, field: &str, value: &str) -> Result<Option<String>, String> {
        self.replace(field, value, &[]).await
    }

    /// Writes `field` in place of the fields `replaced` (the same entry written another
    /// way), unless the hash would then be one the services refuse as a whole: the value
    /// `field` held, if it was there.
    pub(crate) async fn replace(
        &self,
        field: &str,
        value: &str,
        replaced: &[String],
    ) -> Result<Option<String>, String> {
        let Published { routes, gone, .. } = self.published().await?;
        if routes.is_empty() && gone.is_empty() {
            return Err(format!(
                "not written: no service has published its routes to `{}`, so no service reads `{}` on this Redis: give the command the services' Redis (its database included) and overrides key (RATELIMIT_OVERRIDES_KEY, `Overrides::redis_key`), or start a service first",
                self.routes_key(),
                self.key
            ));
        }
        let version: Option<String> = self
            .invoke(redis::cmd("GET").arg(version_key(&self.key)))
            .await?;
        let mut fields = self.fields().await?;
        for other in replaced.iter().filter(|other| *other != field) {
            fields.remove(other);
        }
        let before = fields.insert(field.to_owned(), value.to_owned());
        let problems = self.problems_of(&fields).await?;
        if !problems.is_empty() {
            return Err(format!(
                "not written: the services read `{}` whole and would refuse it, so nothing in it (this change included) would apply:\n  {}\nfix or clear those fields first (`override clear`, `allow remove`, `deny remove`, or HDEL)",
                self.key,
                problems.join("\n  ")
            ));
        }
        let mut script = self.script(WRITE);
        script
            .arg(version.unwrap_or_default())
            .arg(field)
            .arg(value);
        for other in replaced.iter().filter(|other| *other != field) {
            script.arg(other);
        }
        self.invoke::<i64>(&script).await?;
        Ok(before)
    }

    /// Whether the field was there.
    pub(crate) async fn remove(&self, field: &str) -> Result<bool, String> {
        Ok(self.remove_all(&[field.to_owned()]).await? > 0)
    }

    /// Removes `fields`, and counts the change in the version key: how many were there.
    pub(crate) async fn remove_all(&self, fields: &[String]) -> Result<u64, String> {
        if fields.is_empty() {
            return Ok(0);
        }
        let mut script = self.script(REMOVE);
        for field in fields {
            script.arg(field);
        }
        self.invoke(&script).await
    }

    /// `EVAL` of `script` over the hash and its version key (one slot on a Cluster).
    fn script(&self, script: &str) -> redis::Cmd {
        let mut command = redis::cmd("EVAL");
        command
            .arg(script)
            .arg(2)
            .arg(&self.key)
            .arg(version_key(&self.key));
        command
    }

    /// Every key matching `pattern` (a `SCAN` pattern), with its time to live in ms (`PTTL`),
    /// read in pieces of 1,000 keys; on a Cluster, from each of its masters.
    pub(crate) async fn scan(&self, pattern: &str) -> Result<Vec<(String, i64)>, String> {
        match &self.connection {
            Connection::Single(c) => scan_one(c.clone(), pattern).await,
            Connection::Cluster(c) => {
                let Budgets::Cluster(seeds) = &self.budgets else {
                    return Err("a Cluster connection without its nodes".to_owned());
                };
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut c.clone())
                    .await
                    .map_err(failed)?;
                let mut found = Vec::new();
                for address in masters(&nodes) {
                    let client = node_client(seeds, address)?;
                    let Connection::Single(node) = single(client).await? else {
                        unreachable!("a single connection");
                    };
                    found.extend(scan_one(node, pattern).await?);
                }
                Ok(found)
            }
        }
    }

    /// Deletes `keys`, which share one hash tag (one slot on a Cluster): how many existed.
    pub(crate) async fn delete(&self, keys: &[String]) -> Result<u64, String> {
        let mut command = redis::cmd("DEL");
        for key in keys {
            command.arg(key);
        }
        self.invoke(&command).await
    }

    async fn invoke<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, String> {
        match &self.connection {
            Connection::Single(c) => command.query_async(&mut c.clone()).await,
            Connection::Cluster(c) => command.query_async(&mut c.clone()).await,
        }
        .map_err(failed)
    }

    /// Checks `declarations` for `selector` as the services will: the grammar, and a route
    /// the services declare.
    pub(crate) async fn check(
        &self,
        selector: &RouteSelector,
        declarations: &str,
    ) -> Result<(), String> {
        let set = RuleSet::from_fields([(selector.to_string().as_str(), declarations)])
            .map_err(|e| e.join("\n"))?;
        let Published {
            routes,
            gone,
            known_tiers,
            budgets,
            ..
        } = self.published().await?;
        let known: Vec<&str> = budgets.keys().map(String::as_str).collect();
        let unknown = set
            .budgets_named()
            .filter_map(|(field, name)| unknown_budget(&field, name, &known));
        if let Some(problem) = unknown.into_iter().next() {
            return Err(format!(
                "{problem} (the services would refuse the whole hash)"
            ));
        }
        if let Some(ago) = gone.get(&selector.route) {
            return Err(format!(
                "`{}` was last published {} minutes ago, by services that no longer run (running ones publish their routes every minute): no running service declares it, and they would refuse the whole hash over it",
                selector.route,
                ago / 60
            ));
        }
        if routes.is_empty() {
            return Err(format!(
                "no service has published its routes to `{}`, so `{}` cannot be checked against them: start a service that reads overrides from this Redis first",
                self.routes_key(),
                selector.route
            ));
        }
        if routes
            .get(&selector.route)
            .is_some_and(|declared| declared.starts_with("exempt"))
        {
            return Err(format!(
                "`{}` is declared exempt, so it has no limit to override (the services would refuse the whole hash); declare a limit on it, or use the allow and deny lists",
                selector.route
            ));
        }
        if !routes.contains_key(&selector.route) {
            let known: Vec<&str> = routes.keys().map(String::as_str).collect();
            return Err(format!(
                "`{}` names no route the services declare{}; they declare {}",
                selector.route,
                ratelimit_grammar::suggest::did_you_mean_any_case(&selector.route, &known),
                known
                    .iter()
                    .map(|r| format!("`{r}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let unknown = selector
            .tier
            .as_deref()
            .zip(known_tiers.as_ref())
            .and_then(|(tier, known)| unknown_tier(&selector.to_string(), tier, known));
        if let Some(problem) = unknown {
            return Err(format!(
                "{problem} (the services would refuse the whole hash)"
            ));
        }
        Ok(())
    }

    /// The policy in force on `selector`'s route for its tier, and whether the tier has
    /// limits of its own (then it counts in keys of its own): the tier's override, else the
    /// tier's declared limits, else the route's override, each override from the hash, else
    /// from the services' overrides `file` (the hash wins over the file selector by
    /// selector, as in the services), else the declared policy the services published.
    pub(crate) async fn policy(
        &self,
        selector: &RouteSelector,
        fields: &BTreeMap<String, String>,
        file: &RuleSet,
    ) -> Result<(Policy, bool), String> {
        let published = self.published().await?;
        let declared = published.routes.get(&selector.route).ok_or_else(|| {
            format!(
                "`{}` is not among the routes the services published to `{}`",
                selector.route,
                self.routes_key()
            )
        })?;
        let budgets = Self::budgets_in_force(&published, fields, file)?;
        let read = |text: &str| policy_with_budgets(&selector.route, text, None, &budgets);
        let declared = read(declared).map_err(|e| e.join("\n"))?;
        // The tier's own declared limits, which its override keeps what it does not write of.
        let declared_tier = match published.tiers.get(&selector.to_string()) {
            Some(text) if selector.tier.is_some() => Some(read(text).map_err(|e| e.join("\n"))?),
            _ => None,
        };
        let route = RouteSelector {
            route: selector.route.clone(),
            tier: None,
        };
        let written = |selector: &RouteSelector| {
            fields
                .get(&selector.to_string())
                .or_else(|| file.routes.get(selector).map(|(text, _)| text))
        };
        let own = selector.tier.as_ref().and_then(|_| written(selector));
        let with = |text: &str, kept: &Policy| {
            policy_with_budgets(&selector.route, text, Some(kept), &budgets)
        };
        if let Some(text) = own {
            let kept = declared_tier.as_ref().unwrap_or(&declared);
            return with(text, kept)
                .map(|policy| (policy, true))
                .map_err(|e| e.join("\n"));
        }
        if let Some(tier) = declared_tier {
            return Ok((tier, true));
        }
        match written(&route) {
            Some(text) => with(text, &declared)
                .map(|policy| (policy, false))
                .map_err(|e| e.join("\n")),
            None => Ok((declared, false)),
        }
    }

    /// The rules of the services' overrides file at `path`, read as they read it (a missing
    /// file holds none); an error when they would refuse it as a whole, for then they keep
    /// what they last took from it, which this command cannot know.
    pub(crate) async fn overrides_file(&self, path: Option<&Path>) -> Result<RuleSet, String> {
        let Some(path) = path else {
            return Ok(RuleSet::default());
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(format!("the overrides file `{}`: {error}", path.display())),
        };
        let (set, mut problems) = RuleSet::read_toml(&text);
        problems.extend(self.route_problems(&set).await?);
        if problems.is_empty() {
            return Ok(set);
        }
        Err(format!(
            "the services refuse the overrides file `{}` as a whole and keep what they last took from it, which this command cannot know: fix it first:\n  {}",
            path.display(),
            problems.join("\n  ")
        ))
    }

    /// Resets the client `args` names on `selector`'s route (`reset`), or reads its state
    /// (`!reset`): each limit's state as its next request would find it.
    pub(crate) async fn budget(
        &self,
        selector: &RouteSelector,
        args: &ClientArgs,
        file: &RuleSet,
        reset: bool,
    ) -> Result<Vec<(Limit, LimitState)>, String> {
        let fields = self.fields().await?;
        let (policy, own) = self.policy(selector, &fields, file).await?;
        let Policy::Limited(policy) = policy else {
            return Err(format!("`{}` is exempt: it has no budget", selector.route));
        };
        // A tier with no limits of its own counts in the route's keys, as the services
        // count it.
        let tier = selector.tier.as_deref().filter(|_| own);
        let limiter = self.limiter(&args.prefix).await?;
        let headers = header_args(args)?;
        // Every identity the arguments give (an address and a name on a sign-in route: both
        // budgets, the name's lockout included).
        let mut found = None;
        for identity in policy.identities() {
            let Some(given) = identity_values(identity, args, &headers) else {
                continue;
            };
            let done = if reset {
                limiter
                    .reset_under(&selector.route, policy, tier, &given)
                    .await
                    .map(|()| Vec::new())
            } else {
                limiter
                    .state_under(&selector.route, policy, tier, &given)
                    .await
            };
            let states = done.map_err(|error| error.to_string())?;
            found
                .get_or_insert_with(Vec::new)
                .extend(states.into_iter().map(|s| (s.limit, s)));
        }
        found.ok_or_else(|| {
            let wanted: Vec<String> = policy.identities().iter().map(ToString::to_string).collect();
            format!(
                "`{}` counts clients by `{}`: give those parts (`--ip`, `--username`, `--user-id`, `--api-key`, `--header name=value`)",
                selector.route,
                wanted.join("` or `")
            )
        })
    }

    /// A limiter on the services' store, keyed as they key (`prefix`, and the key secret
    /// from RATELIMIT_KEY_SECRET), to read and reset budgets with.
    pub(crate) async fn limiter(&self, prefix: &str) -> Result<RateLimiter, String> {
        let store: std::sync::Arc<dyn Store> = match &self.budgets {
            Budgets::Cluster(nodes) => std::sync::Arc::new(
                RedisClusterStore::builder(nodes.clone())
                    .timeout(TIMEOUT)
                    .build()
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            Budgets::Url(url) => std::sync::Arc::new(
                RedisStore::builder(url.clone())
                    .timeout(TIMEOUT)
                    .build()
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            Budgets::Sentinel(store) => std::sync::Arc::new(store.clone()),
        };
        let mut keys = Keys::new().prefix(prefix);
        if let Ok(secret) = std::env::var("RATELIMIT_KEY_SECRET") {
            let secret =
                KeySecret::new(secret.trim()).map_err(|e| format!("RATELIMIT_KEY_SECRET: {e}"))?;
            keys = keys.secret(secret);
        }
        let limiter = RateLimiter::from_arc(store).keys(keys);
        limiter.check_settings().map_err(|e| e.to_string())?;
        Ok(limiter)
    }
}

/// The `--header name=value` arguments, each name in lower case.
pub(crate) fn header_args(args: &ClientArgs) -> Result<Vec<(String, String)>, String> {
    args.header
        .iter()
        .map(|h| {
            h.split_once('=')
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.to_owned()))
                .ok_or_else(|| format!("`--header {h}`: write `name=value`"))
        })
        .collect()
}

/// The published fields (route or tier, declared policy) split by `seen` (field, Unix
/// seconds) at `now`, and the routes apart from the tiers: see [`Admin::published`].
fn split_published(
    mut routes: BTreeMap<String, String>,
    seen: &BTreeMap<String, String>,
    now: u64,
) -> Published {
    let mut gone = BTreeMap::new();
    let ago = |route: &str| {
        let at = seen.get(route)?.parse::<u64>().ok()?;
        Some(now.saturating_sub(at))
    };
    let fresh = |ago: u64| ago <= ROUTES_FRESH_FOR.as_secs();
    if routes.keys().any(|route| ago(route).is_some_and(fresh)) {
        routes.retain(|route, _| match ago(route) {
            Some(ago) if !fresh(ago) => {
                gone.insert(route.clone(), ago);
                false
            }
            _ => true,
        });
    }
    gone.remove(TIERS_FIELD);
    let known_tiers = routes
        .remove(TIERS_FIELD)
        .map(|names| names.split_whitespace().map(str::to_owned).collect());
    gone.retain(|field, _| !field.starts_with(BUDGET_WORD));
    let (budgets, routes): (BTreeMap<String, String>, _) = routes
        .into_iter()
        .partition(|(field, _)| field.starts_with(BUDGET_WORD));
    let budgets = budgets
        .into_iter()
        .map(|(field, text)| (field[BUDGET_WORD.len()..].to_owned(), text))
        .collect();
    let (tiers, routes) = routes.into_iter().partition(|(field, _)| {
        RouteSelector::parse(field).is_ok_and(|selector| selector.tier.is_some())
    });
    Published {
        routes,
        gone,
        tiers,
        known_tiers,
        budgets,
    }
}

/// A connection to the one server `client` names.
async fn single(client: redis::Client) -> Result<Connection, String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT));
    Ok(Connection::Single(
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(failed)?,
    ))
}

/// Every key matching `pattern` on one node, with its time to live in ms.
async fn scan_one(
    mut connection: redis::aio::MultiplexedConnection,
    pattern: &str,
) -> Result<Vec<(String, i64)>, String> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        for key in found {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .map_err(failed)?;
            keys.push((key, ttl));
        }
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// The addresses (`host:port`) of the masters `CLUSTER NODES` lists; one flagged failing
/// is left out, which standard error says (what it holds is not listed).
fn masters(nodes: &str) -> Vec<&str> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let flags = fields.get(2)?;
            let address = fields.get(1)?.split('@').next()?;
            if !flags.contains("master") {
                return None;
            }
            if flags.contains("fail") {
                eprintln!("warning: the Cluster's master {address} is failing ({flags}): its keys are not read");
                return None;
            }
            Some(address)
        })
        .collect()
}

/// A client of the Cluster node at `address`, with the seeds' scheme and credentials.
fn node_client(seeds: &[String], address: &str) -> Result<redis::Client, String> {
    let seed = seeds
        .first()
        .ok_or("--cluster names no node")?
        .as_str()
        .into_connection_info()
        .map_err(failed)?;
    let url = match seed.addr() {
        redis::ConnectionAddr::TcpTls { insecure: true, .. } => {
            format!("rediss://{address}/#insecure")
        }
        redis::ConnectionAddr::TcpTls { .. } => format!("rediss://{address}"),
        _ => format!("redis://{address}"),
    };
    let info = url
        .into_connection_info()
        .map_err(failed)?
        .set_redis_settings(seed.redis_settings().clone());
    redis::Client::open(info).map_err(failed)
}

/// A store on the primary the `sentinels` name `master`.
async fn sentinel_store(
    sentinels: &[String],
    master: &str,
    password: Option<&str>,
) -> Result<RedisSentinelStore, String> {
    let mut builder = RedisSentinelStore::builder(sentinels.iter().cloned(), master)
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT);
    if let Some(password) = password {
        builder = builder.master_password(password);
    }
    builder
        .build()
        .await
        .map_err(|e| format!("the sentinels: {e}"))
}

/// A client for the primary at `address` (`host:port`), as the services' store reaches it:
/// with the first sentinel URL's TLS settings (`rediss://`, `#insecure`; the store refuses
/// sentinels that differ) and the primary's own password.
fn primary_client(
    sentinels: &[String],
    address: &str,
    password: Option<&str>,
) -> Result<redis::Client, String> {
    let first = sentinels
        .first()
        .ok_or("--sentinel (REDIS_SENTINEL_NODES) names no sentinel")?
        .as_str()
        .into_connection_info()
        .map_err(failed)?;
    let url = match first.addr() {
        redis::ConnectionAddr::TcpTls { insecure: true, .. } => {
            format!("rediss://{address}/#insecure")
        }
        redis::ConnectionAddr::TcpTls { .. } => format!("rediss://{address}"),
        _ => format!("redis://{address}"),
    };
    let mut info = url.into_connection_info().map_err(failed)?;
    if let Some(password) = password {
        info =
            info.set_redis_settings(redis::RedisConnectionInfo::default().set_password(password));
    }
    redis::Client::open(info).map_err(failed)
}

/// The values `args` gives for `identity`'s parts, in its order; `None` when one is
/// missing.
pub(crate) fn identity_values<'a>(
    identity: ratelimit_runtime::Identity,
    args: &'a ClientArgs,
    headers: &'a [(String, String)],
) -> Option<Vec<(IdentityPart, &'a str)>> {
    use ratelimit_runtime::Identity;
    match identity {
        Identity::Parts(parts) => parts
            .iter()
            .map(|part| {
                let value = match part {
                    IdentityPart::Ip => args.ip.as_deref(),
                    IdentityPart::Username => args.username.as_deref(),
                    IdentityPart::UserId => args.user_id.as_deref(),
                    IdentityPart::ApiKey => args.api_key.as_deref(),
                    IdentityPart::Header(name) => headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.as_str()),
                    _ => None,
                }?;
                Some((*part, value))
            })
            .collect(),
        _ => match (&args.user_id, &args.ip) {
            (Some(id), _) => Some(vec![(IdentityPart::UserId, id.as_str())]),
            (None, Some(ip)) => Some(vec![(IdentityPart::Ip, ip.as_str())]),
            (None, None) => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn routes_no_service_published_lately_are_gone() {
        let now = 1_000_000;
        let routes = map(&[("GET /a", "x"), ("GET /b", "x"), ("GET /legacy", "x")]);
        // /a fresh, /b an hour old, /legacy published by a version that writes no time.
        let seen = map(&[("GET /a", "999990"), ("GET /b", "996400")]);
        let Published {
            routes: declared,
            gone,
            ..
        } = split_published(routes.clone(), &seen, now);
        assert_eq!(
            declared.keys().collect::<Vec<_>>(),
            ["GET /a", "GET /legacy"]
        );
        assert_eq!(
            gone.into_iter().collect::<Vec<_>>(),
            [("GET /b".to_owned(), 3600)]
        );
        // Nothing fresh: services of an older version run again (a rollback), and every
        // route is taken as declared.
        let stale = map(&[("GET /a", "900000"), ("GET /b", "900000")]);
        let Published {
            routes: declared,
            gone,
            known_tiers,
            ..
        } = split_published(routes.clone(), &stale, now);
        assert_eq!(declared, routes);
        assert!(gone.is_empty());
        assert_eq!(known_tiers, None, "services that publish no tiers take any");
        // No times at all.
        assert_eq!(
            split_published(routes.clone(), &BTreeMap::new(), now).routes,
            routes
        );
    }

    #[test]
    fn declared_tiers_and_the_tiers_the_services_take_are_told_apart_from_routes() {
        let fields = map(&[
            ("GET /search", r#"limit = 100, window = "1m""#),
            (
                r#"GET /search tier "pro""#,
                r#"limit = 1000, window = "1m""#,
            ),
            (TIERS_FIELD, "pro team"),
        ]);
        let published = split_published(fields, &BTreeMap::new(), 1_000_000);
        assert_eq!(published.routes.keys().collect::<Vec<_>>(), ["GET /search"]);
        assert_eq!(
            published.tiers.keys().collect::<Vec<_>>(),
            [r#"GET /search tier "pro""#]
        );
        let known = published.known_tiers.expect("published");
        assert_eq!(known.iter().collect::<Vec<_>>(), ["pro", "team"]);
        let problem = unknown_tier(r#"GET /search tier "por""#, "por", &known).unwrap();
        assert!(problem.contains("did you mean `pro`?"), "{problem}");
        assert_eq!(
            unknown_tier(r#"GET /search tier "team""#, "team", &known),
            None
        );
    }
}
