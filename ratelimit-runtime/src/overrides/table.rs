//! The overrides in force: every source's accepted rules, checked against the App's declared
//! routes and turned into policies, as requests read them.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    sync::{LazyLock, Mutex},
};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use prefix_trie::PrefixMap;
use ratelimit_grammar::{Declaration, FailMode, ParsedPart};

use super::rules::{ListEntry, ListKind, RouteSelector, RuleSet};
use crate::{
    policy::{
        shared_budgets, Identity, IdentityPart, Limit, Policy, RouteHeaders, RoutePolicy, Window,
    },
    registry::RouteDeclaration,
};

/// Where a route's policy in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The `#[rate_limit]` attribute.
    Declared,
    /// A declaration in code, [`RateLimiter::declare`](crate::RateLimiter::declare).
    Code,
    /// The overrides file.
    File,
    /// The Redis hash.
    Redis,
}

impl Source {
    /// `declared`, `code`, `file` or `redis`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::Declared => "declared",
            Source::Code => "code",
            Source::File => "file",
            Source::Redis => "redis",
        }
    }
}

/// A route's declared routes by label (`POST /login`), as the App mounts them.
pub(crate) type Catalog = BTreeMap<String, &'static RouteDeclaration>;

/// Shared budgets' limits in force, by name: an override's, else the declaration's.
pub(crate) type BudgetLimits = BTreeMap<&'static str, Limit>;

/// Every shared budget linked into the program, by name, as declared.
pub(crate) fn declared_budgets() -> BudgetLimits {
    shared_budgets().map(|b| (b.name(), b.limit())).collect()
}

/// An override of a shared budget in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BudgetOverride {
    /// The limit in force.
    pub(crate) limit: Limit,
    /// Where it comes from.
    pub(crate) source: Source,
    /// The declaration as written.
    pub(crate) text: String,
}

/// An override in force on one route (and tier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overridden {
    /// The policy in force.
    pub policy: Policy,
    /// Where it comes from.
    pub source: Source,
    /// The declarations as written.
    pub text: String,
}

/// Which routes an allow entry opens: every route that counts no username (an entry
/// written without `routes`), the routes it names, or both (the same entry written both ways
/// in the file and the hash).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    unscoped: bool,
    routes: BTreeSet<String>,
}

impl Scope {
    fn add(&mut self, routes: Option<&BTreeSet<String>>) {
        match routes {
            Some(routes) => self.routes.extend(routes.iter().cloned()),
            None => self.unscoped = true,
        }
    }

    /// Whether an allow entry of this scope opens `route`.
    fn opens(&self, route: &RouteAt<'_>) -> bool {
        match route {
            RouteAt::Any { .. } => true,
            RouteAt::Route {
                label,
                counts_username,
            } => (self.unscoped && !counts_username) || self.routes.contains(*label),
        }
    }
}

/// The route a list is matched on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RouteAt<'a> {
    /// Any route (deny entries apply on every route). An IPv6 client is one with every
    /// address of its group (`TrustedProxies::ipv6_prefix`, a /64 by default), as it is
    /// counted: an entry naming any address of the group names the client.
    Any { ipv6_group: u8 },
    /// A route by its label (`POST /login`), and whether its policy counts a username.
    Route {
        label: &'a str,
        counts_username: bool,
    },
}

/// Allow or deny entries of one kind of list. Address ranges sit in a prefix trie per
/// family, so a lookup walks the ranges that contain the address (at most its prefix
/// length), whatever the list's size.
#[derive(Default)]
pub(crate) struct List {
    v4: PrefixMap<Ipv4Net, Scope>,
    v6: PrefixMap<Ipv6Net, Scope>,
    /// By fingerprint (`fp:…`), or by the key itself where plain keys are taken.
    api_keys: HashMap<String, Scope>,
    /// Whether any key is listed in plain text.
    plain_keys: bool,
    user_ids: HashMap<String, Scope>,
    len: usize,
}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("List")
            .field("ranges", &(self.v4.len() + self.v6.len()))
            .field("api_keys", &self.api_keys.len())
            .field("user_ids", &self.user_ids.len())
            .finish()
    }
}

impl List {
    fn add(&mut self, entry: &ListEntry, routes: Option<&BTreeSet<String>>) {
        self.len += 1;
        let scope = match entry {
            ListEntry::Ip(IpNet::V4(net)) => self.v4.entry(*net).or_default(),
            ListEntry::Ip(IpNet::V6(net)) => self.v6.entry(*net).or_default(),
            ListEntry::ApiKey(key) => {
                self.plain_keys |= entry.is_plain_api_key();
                self.api_keys.entry(key.clone()).or_default()
            }
            ListEntry::UserId(id) => self.user_ids.entry(id.clone()).or_default(),
        };
        scope.add(routes);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn names_keys(&self) -> bool {
        !self.api_keys.is_empty()
    }

    pub(crate) fn names_users(&self) -> bool {
        !self.user_ids.is_empty()
    }

    /// The kind of the first entry naming a client with this address, API key (its
    /// fingerprint, `key_print`, and the key itself) and user id whose scope opens `route`.
    pub(crate) fn matches(
        &self,
        ip: Option<IpAddr>,
        api_key: Option<(&str, &str)>,
        user_id: Option<&str>,
        route: RouteAt<'_>,
    ) -> Option<&'static str> {
        // An IPv4 client on an IPv6 socket (`::ffff:203.0.113.7`) is matched as IPv4, as
        // its keys count it.
        let opened = match ip.map(|ip| ip.to_canonical()) {
            Some(IpAddr::V4(v4)) if !self.v4.is_empty() => self
                .v4
                .cover_values(&Ipv4Net::from(v4))
                .any(|scope| scope.opens(&route)),
            Some(IpAddr::V6(v6)) if !self.v6.is_empty() => {
                let within_group = match route {
                    RouteAt::Any { ipv6_group } => Ipv6Net::new(v6, ipv6_group)
                        .map(|group| group.trunc())
                        .is_ok_and(|group| self.v6.children(&group).next().is_some()),
                    RouteAt::Route { .. } => false,
                };
                within_group
                    || self
                        .v6
                        .cover_values(&Ipv6Net::from(v6))
                        .any(|scope| scope.opens(&route))
            }
            _ => false,
        };
        if opened {
            return Some("ip");
        }
        if let Some((print, key)) = api_key {
            let listed = self
                .api_keys
                .get(print)
                .or_else(|| self.plain_keys.then(|| self.api_keys.get(key)).flatten());
            if listed.is_some_and(|scope| scope.opens(&route)) {
                return Some("api_key");
            }
        }
        if user_id
            .and_then(|id| self.user_ids.get(id))
            .is_some_and(|scope| scope.opens(&route))
        {
            return Some("user_id");
        }
        None
    }
}

/// The overrides of one route: for every tier, and for some tiers.
#[derive(Debug, Default)]
struct RouteOverrides {
    all: Option<Overridden>,
    tiers: HashMap<String, Overridden>,
}

/// The overrides in force.
#[derive(Debug, Default)]
pub(crate) struct Table {
    /// Changes whenever the table does, so per-worker routes built from it are rebuilt.
    pub(crate) generation: u64,
    /// By route label (`POST /login`), looked up by `&str` on every request.
    routes: HashMap<String, RouteOverrides>,
    /// Shared budgets' overrides, by name.
    pub(crate) budgets: BTreeMap<&'static str, BudgetOverride>,
    /// Every shared budget's limit in force, by name.
    budget_limits: BudgetLimits,
    pub(crate) allow: List,
    pub(crate) deny: List,
}

impl Table {
    /// The override of `route` (`POST /login`) for `tier`, else for every tier; whether it
    /// is the tier's.
    pub(crate) fn route(&self, route: &str, tier: Option<&str>) -> Option<(&Overridden, bool)> {
        let found = self.routes.get(route)?;
        if let Some(own) = tier.and_then(|tier| found.tiers.get(tier)) {
            return Some((own, true));
        }
        found.all.as_ref().map(|all| (all, false))
    }

    /// The overrides of `route` (`POST /login`) written for one tier each: tier, override.
    pub(crate) fn tiers_of(&self, route: &str) -> impl Iterator<Item = (&str, &Overridden)> {
        self.routes
            .get(route)
            .into_iter()
            .flat_map(|found| found.tiers.iter().map(|(tier, o)| (tier.as_str(), o)))
    }

    /// Every override in force, by selector.
    pub(crate) fn routes(&self) -> impl Iterator<Item = (RouteSelector, &Overridden)> {
        self.routes.iter().flat_map(|(route, found)| {
            let all = found.all.iter().map(move |o| {
                let selector = RouteSelector {
                    route: route.clone(),
                    tier: None,
                };
                (selector, o)
            });
            let tiers = found.tiers.iter().map(move |(tier, o)| {
                let selector = RouteSelector {
                    route: route.clone(),
                    tier: Some(tier.clone()),
                };
                (selector, o)
            });
            all.chain(tiers)
        })
    }

    /// Whether requests need to read anything for the lists.
    pub(crate) fn has_lists(&self) -> bool {
        !self.allow.is_empty() || !self.deny.is_empty()
    }

    /// Builds the table from each source's accepted rules (Redis over the file, route by
    /// route and budget by budget; lists from both). A shared budget's override is in force
    /// on every route that names it, beside the route's own limits or their override.
    pub(crate) fn build(generation: u64, sets: &[(Source, &RuleSet)], catalog: &Catalog) -> Table {
        let mut table = Table {
            generation,
            ..Table::default()
        };
        let declared = declared_budgets();
        let mut budgets = declared.clone();
        for (source, set) in sets {
            for (name, (text, declaration)) in &set.budgets {
                // What the override does not write is the declaration's, whatever another
                // source wrote.
                let Some((&name, &declared)) = declared.get_key_value(name.as_str()) else {
                    continue;
                };
                let limit = budget_limit(name, declaration, Some(declared));
                budgets.insert(name, limit);
                let text = text.clone();
                let source = *source;
                table.budgets.insert(
                    name,
                    BudgetOverride {
                        limit,
                        source,
                        text,
                    },
                );
            }
        }
        for (source, set) in sets {
            for (selector, (text, stack)) in &set.routes {
                let Some(declaration) = catalog.get(&selector.route) else {
                    continue;
                };
                // A tier's override keeps what its declared limits keep (their identity, the
                // cost at each place, the shared budgets), else the route's default's.
                let declared = match &selector.tier {
                    Some(tier) => declaration.policy.for_tier(tier),
                    None => declaration.policy.limited().copied(),
                };
                let policy = match to_policy(stack, declared, &selector.route, &budgets) {
                    Ok(policy) => policy,
                    Err(problems) => {
                        // Refused when the source was checked; kept out all the same.
                        tracing::error!(target: "ratelimit", route = %selector, problems = %problems.join("; "), "an override that cannot be built is not in force");
                        continue;
                    }
                };
                let overridden = Overridden {
                    policy,
                    source: *source,
                    text: text.clone(),
                };
                let entry = table.routes.entry(selector.route.clone()).or_default();
                match &selector.tier {
                    Some(tier) => {
                        entry.tiers.insert(tier.clone(), overridden);
                    }
                    None => entry.all = Some(overridden),
                }
            }
            for (kind, entry) in set.lists.keys() {
                match kind {
                    ListKind::Allow => table.allow.add(entry, set.allow_routes.get(entry)),
                    ListKind::Deny => table.deny.add(entry, None),
                }
            }
        }
        table.budget_limits = budgets;
        table
    }

    /// `policy` with the shared budgets' overrides in force, when it names one: every
    /// route's stack as requests count it, whatever the route's override.
    pub(crate) fn with_budgets(&self, policy: RoutePolicy) -> RoutePolicy {
        if self.names_overridden_budget(&policy) {
            rebudgeted(policy, &self.budget_limits)
        } else {
            policy
        }
    }

    /// Whether `policy` names a shared budget an override changes (no allocation: asked on
    /// every request of a route with no override of its own).
    pub(crate) fn names_overridden_budget(&self, policy: &RoutePolicy) -> bool {
        !self.budgets.is_empty()
            && policy.limits().iter().any(|l| {
                l.budget()
                    .is_some_and(|name| self.budgets.contains_key(name))
            })
    }
}

/// The limit shared budget `name` is under the override `declaration` (the keys `budget!`
/// takes); its identity, when the override writes none, is the declared budget's.
pub(crate) fn budget_limit(
    name: &'static str,
    declaration: &Declaration,
    declared: Option<Limit>,
) -> Limit {
    let limit = Limit::new(
        declaration.limit.unwrap_or(1),
        Window::from_millis(declaration.window.unwrap_or(1)),
        declaration
            .algorithm
            .unwrap_or(ratelimit_grammar::Algorithm::SlidingWindow),
    );
    let identity = match &declaration.identity {
        Some(parts) => identity_of(parts),
        None => declared
            .and_then(|l| l.identity())
            .unwrap_or(Identity::UserIdElseIp),
    };
    limit.identified_by(identity).in_budget(name)
}

/// The limit shared budget `name` is under the declaration `text` (as its override is
/// written: the keys `budget!` takes), its identity, when `text` writes none, `declared`'s:
/// for a tool that reads the budgets the services publish.
///
/// ```
/// use ratelimit_runtime::overrides::shared_budget_from_text;
///
/// let limit = shared_budget_from_text("API", r#"limit = 500, window = "1d", identity = "api_key""#, None).unwrap();
/// assert_eq!((limit.max(), limit.budget()), (500, Some("API")));
/// assert!(shared_budget_from_text("API", r#"limit = 5, window = "1m", cost = 2"#, None).is_err());
/// ```
///
/// # Errors
///
/// Every problem, in the attribute's words.
// Hidden from the docs: ratelimit-admin's plumbing.
#[doc(hidden)]
pub fn shared_budget_from_text(
    name: &str,
    text: &str,
    declared: Option<Limit>,
) -> Result<Limit, Vec<String>> {
    let field = format!("{}{name}", super::BUDGET_WORD);
    let set = RuleSet::from_fields([(field.as_str(), text)])?;
    let (_, declaration) = set
        .budgets
        .get(name)
        .ok_or_else(|| vec![format!("`{field}` names no shared budget")])?;
    let declared = declared.or_else(|| declared_budgets().get(name).copied());
    Ok(budget_limit(interned_name(name), declaration, declared))
}

/// `name` as a `'static` str, made once per name.
fn interned_name(name: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<BTreeSet<&'static str>>> = LazyLock::new(Mutex::default);
    if let Some(declared) = shared_budgets().find(|b| b.name() == name) {
        return declared.name();
    }
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = names.get(name) {
        return found;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// `stack` with each shared budget it names as `budgets` has it in force, each at the
/// route's cost for it (at most the whole budget).
fn rebudgeted(stack: RoutePolicy, budgets: &BudgetLimits) -> RoutePolicy {
    let limits: Vec<Limit> = stack
        .limits()
        .iter()
        .map(|limit| in_force(*limit, budgets))
        .collect();
    if limits == stack.limits() {
        return stack;
    }
    stack.with_limits(interned_limits(limits))
}

/// `limit` as in force: a shared budget as `budgets` has it, at `limit`'s cost.
fn in_force(limit: Limit, budgets: &BudgetLimits) -> Limit {
    match limit.budget().and_then(|name| budgets.get(name)) {
        Some(budget) => budget.costing(limit.cost().min(budget.max())),
        None => limit,
    }
}

/// Stacks of limits built at run time, kept for the process's life (a policy's limits are
/// `'static`): each distinct one is made once.
static INTERNED_LIMITS: LazyLock<Mutex<HashMap<Vec<Limit>, &'static [Limit]>>> =
    LazyLock::new(Mutex::default);

fn interned_limits(limits: Vec<Limit>) -> &'static [Limit] {
    let mut interned = INTERNED_LIMITS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = interned.get(&limits) {
        return found;
    }
    let leaked = leak(limits.clone());
    interned.insert(limits, leaked);
    leaked
}

/// The tiers overrides may name: every tier a declaration of the App gives limits of its
/// own (`#[rate_limit(tier = "pro", ..)]`), and those listed with `Overrides::tiers`.
pub(crate) fn known_tiers(catalog: &Catalog, listed: &BTreeSet<String>) -> BTreeSet<String> {
    let declared = catalog
        .values()
        .filter_map(|d| d.policy.limited())
        .flat_map(|p| p.tiers().iter().map(|t| t.name().to_owned()));
    listed.iter().cloned().chain(declared).collect()
}

/// The problem of an override for `tier` (written as `selector`) when the App knows no such
/// tier (`known`): a likely misspelling of a known one, or a tier no request carries.
// Hidden from the docs: ratelimit-admin's plumbing (it refuses what the services would, in
// their words); nothing a user builds on.
#[doc(hidden)]
pub fn unknown_tier(selector: &str, tier: &str, known: &BTreeSet<String>) -> Option<String> {
    if known.contains(tier) {
        return None;
    }
    if known.is_empty() {
        return Some(format!(
            "`{selector}` names tier `{tier}`, and this App knows no tier: give the tier limits of its own with `#[rate_limit(tier = \"{tier}\", ..)]`, or list the tiers its requests carry with `Overrides::tiers([\"{tier}\"])`"
        ));
    }
    let names: Vec<&str> = known.iter().map(String::as_str).collect();
    Some(format!(
        "`{selector}` names tier `{tier}`, which no declaration of this App and no `Overrides::tiers` names{}; its tiers are {}",
        ratelimit_grammar::suggest::did_you_mean(tier, &names),
        ratelimit_grammar::suggest::list(&names)
    ))
}

/// The problems of `set` against the App's routes and tiers (`tiers`, [`known_tiers`]):
/// every route it names must be declared, every tier known.
pub(crate) fn check_routes(
    set: &RuleSet,
    catalog: &Catalog,
    tiers: &BTreeSet<String>,
) -> Vec<String> {
    let exempt = set.routes.keys().filter_map(|selector| {
        let declaration = catalog.get(&selector.route)?;
        let Policy::Exempt { reason } = declaration.policy else {
            return None;
        };
        Some(format!(
            "`{selector}` is declared exempt (\"{reason}\"), so it has no limit to override; declare a limit on it, or leave its clients to the allow and deny lists"
        ))
    });
    let unknown = set
        .routes
        .keys()
        .filter(|selector| !catalog.contains_key(&selector.route))
        .map(|selector| {
            let known: Vec<&str> = catalog.keys().map(String::as_str).collect();
            let hint = ratelimit_grammar::suggest::did_you_mean_any_case(&selector.route, &known);
            format!(
                "`{selector}` names no declared route of this App{hint}; name it as the route table shows it (`METHOD /full/pattern`)"
            )
        });
    let known = || catalog.keys().map(String::as_str).collect::<Vec<_>>();
    let opened = set
        .allow_routes
        .iter()
        .flat_map(|(entry, routes)| routes.iter().map(move |route| (entry, route)))
        .filter(|(_, route)| !catalog.contains_key(*route))
        .map(|(entry, route)| {
            let hint = ratelimit_grammar::suggest::did_you_mean_any_case(route, &known());
            format!(
                "`allow {}` opens `{route}`, which names no declared route of this App{hint}; name it as the route table shows it (`METHOD /full/pattern`)",
                entry.redacted()
            )
        });
    let unknown_tiers = set.routes.keys().filter_map(|selector| {
        let tier = selector.tier.as_deref()?;
        unknown_tier(&selector.to_string(), tier, tiers)
    });
    // A stack the grammar takes may still not make a policy on its route: past 8 limits
    // with the declared shared budgets it keeps, say.
    let budgets = declared_budgets();
    let unbuildable = set.routes.iter().filter_map(|(selector, (_, stack))| {
        let declaration = catalog.get(&selector.route)?;
        let named_known = stack
            .iter()
            .filter_map(|d| d.budget.as_deref())
            .all(|name| budgets.contains_key(name));
        let declared = match &selector.tier {
            Some(tier) => declaration.policy.for_tier(tier),
            None => declaration.policy.limited().copied(),
        };
        let problems = to_policy(stack, declared, &selector.route, &budgets)
            .err()
            .filter(|_| named_known)?;
        Some(format!("`{selector}`: {}", problems.join("; ")))
    });
    unknown
        .chain(exempt)
        .chain(unknown_tiers)
        .chain(opened)
        .chain(unbuildable)
        .collect()
}

/// The problems of `set` naming a shared budget the program does not declare: a budget's
/// override, or a route's naming one (`budget = API`). Checked whether or not the App's
/// routes are known yet.
pub(crate) fn check_budget_names(set: &RuleSet) -> Vec<String> {
    let budgets = declared_budgets();
    let known: Vec<&str> = budgets.keys().copied().collect();
    set.budgets_named()
        .filter_map(|(field, name)| unknown_budget(&field, name, &known))
        .collect()
}

/// The problem of `field` naming shared budget `name` when the program declares no budget of
/// that name (`known`).
// Hidden from the docs: ratelimit-admin's plumbing (it refuses what the services would, in
// their words); nothing a user builds on.
#[doc(hidden)]
pub fn unknown_budget(field: &str, name: &str, known: &[&str]) -> Option<String> {
    if known.contains(&name) {
        return None;
    }
    if known.is_empty() {
        return Some(format!(
            "`{field}` names the shared budget `{name}`, and this App declares none: declare it with `budget!({name} = limit = .., window = \"..\")`"
        ));
    }
    Some(format!(
        "`{field}` names the shared budget `{name}`, which this App does not declare{}; its budgets are {}",
        ratelimit_grammar::suggest::did_you_mean_any_case(name, known),
        ratelimit_grammar::suggest::list(known)
    ))
}

/// Policies built from overrides, kept for the process's life: a policy's limits are
/// `'static` (as the attribute's are), so each distinct one is made once.
static INTERNED: LazyLock<Mutex<HashMap<(String, String), Policy>>> = LazyLock::new(Mutex::default);

/// The policy `stack` declares on the route `route`, declared as `declaration`, with the
/// shared budgets in force `budgets`: a key the override does not write keeps the
/// attribute's default, except `identity`, `fail` and `headers`, which keep the declared
/// route's (an override changes a budget, not who is counted, what an outage does or what
/// clients are told, unless it says so). An override that names no shared budget keeps the
/// route's: it changes the route's own limits.
///
/// # Errors
///
/// A shared budget `budgets` does not hold.
pub(crate) fn to_policy(
    stack: &[Declaration],
    declared: Option<RoutePolicy>,
    route: &str,
    budgets: &BudgetLimits,
) -> Result<Policy, Vec<String>> {
    let text = format!("{stack:?} {declared:?} {budgets:?}");
    let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    let key = (route.to_owned(), text);
    if let Some(policy) = interned.get(&key) {
        return Ok(*policy);
    }
    let policy = build_policy(stack, declared, route, budgets)?;
    interned.insert(key, policy);
    Ok(policy)
}

/// The policy `text` (declarations in the attribute's syntax) puts on `route`
/// (`POST /login`) declared as `declared`, as a service applies an override: for a tool
/// that reads policies rather than declaring them. A shared budget it names
/// (`budget = API`) is the one this program declares with `budget!`.
///
/// ```
/// use ratelimit_runtime::{overrides::policy_from_text, Policy};
///
/// let policy = policy_from_text("POST /login", r#"limit = 5, window = "5m", identity = "ip""#, None).unwrap();
/// let Policy::Limited(limited) = policy else { panic!() };
/// assert_eq!(limited.limits()[0].max(), 5);
/// let errors = policy_from_text("POST /login", r#"limit = 5"#, None).unwrap_err();
/// assert!(errors[0].starts_with("missing `window`"));
/// ```
///
/// # Errors
///
/// Every problem, in the attribute's words; a shared budget the program does not declare.
pub fn policy_from_text(
    route: &str,
    text: &str,
    declared: Option<&Policy>,
) -> Result<Policy, Vec<String>> {
    policy_with_budgets(route, text, declared, &declared_budgets())
}

/// [`policy_from_text`] with the shared budgets `budgets` (by name, each its limit in force)
/// rather than the program's: for a tool that reads the budgets the services publish.
// Hidden from the docs: ratelimit-admin's plumbing.
#[doc(hidden)]
pub fn policy_with_budgets(
    route: &str,
    text: &str,
    declared: Option<&Policy>,
    budgets: &BTreeMap<&'static str, Limit>,
) -> Result<Policy, Vec<String>> {
    let stack = ratelimit_grammar::parse_stack(text)?;
    let declared = declared.and_then(Policy::limited).copied();
    to_policy(&stack, declared, route, budgets)
}

fn leak<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

fn identity_of(parts: &[ParsedPart]) -> Identity {
    let parts = parts
        .iter()
        .map(|part| match part {
            ParsedPart::Ip => IdentityPart::Ip,
            ParsedPart::Username => IdentityPart::Username,
            ParsedPart::UserId => IdentityPart::UserId,
            ParsedPart::ApiKey => IdentityPart::ApiKey,
            ParsedPart::Header(name) => IdentityPart::Header(Box::leak(name.clone().into())),
        })
        .collect();
    Identity::Parts(leak(parts))
}

fn build_policy(
    stack: &[Declaration],
    declared: Option<RoutePolicy>,
    route: &str,
    budgets: &BudgetLimits,
) -> Result<Policy, Vec<String>> {
    if let Some(reason) = stack.first().and_then(|d| d.exempt.as_ref()) {
        return Ok(Policy::exempt(Box::leak(reason.clone().into_boxed_str())));
    }
    // The route's own limits; the shared budgets come after them.
    let (named, own): (Vec<&Declaration>, Vec<&Declaration>) =
        stack.iter().partition(|d| d.budget.is_some());
    let written: Vec<&Vec<ParsedPart>> = own.iter().filter_map(|d| d.identity.as_ref()).collect();
    let identity = match written.first() {
        Some(first) => identity_of(
            own.first()
                .and_then(|d| d.identity.as_ref())
                .unwrap_or(first),
        ),
        // A stack of shared budgets alone counts nothing by the route's identity.
        None if own.is_empty() => Identity::UserIdElseIp,
        None => declared.map_or(Identity::UserIdElseIp, |p| p.identity()),
    };
    let first_parts = own.first().and_then(|d| d.identity.clone());
    let differ = written.iter().any(|w| *w != written[0]);
    // The declared rate limits, in order: a concurrency limit has no cost to keep.
    let declared_own: Vec<Limit> = declared
        .iter()
        .flat_map(|p| p.limits())
        .filter(|l| l.budget().is_none() && !l.is_concurrency())
        .copied()
        .collect();
    let mut rate_limits = 0;
    let mut limits: Vec<Limit> = own
        .iter()
        .map(|d| {
            if let Some(max) = d.concurrency {
                let lease = d.lease.unwrap_or(ratelimit_grammar::DEFAULT_LEASE_MILLIS);
                let limit = Limit::concurrent(max, Window::from_millis(lease));
                return match &d.identity {
                    Some(own) if differ && Some(own) != first_parts.as_ref() => {
                        limit.identified_by(identity_of(own))
                    }
                    _ => limit,
                };
            }
            let mut limit = Limit::new(
                d.limit.unwrap_or(1),
                Window::from_millis(d.window.unwrap_or(1)),
                d.algorithm
                    .unwrap_or(ratelimit_grammar::Algorithm::SlidingWindow),
            );
            if let Some(count) = d.count {
                limit = limit.counting(count);
            }
            if let Some(block) = d.block {
                limit = limit.blocking(Window::from_millis(block));
            }
            // A cost not written is the declared limit's at the same place in the stack (an
            // override that lowers an export's limit keeps its weight), at most the whole
            // budget: the strict side.
            let cost = d
                .cost
                .unwrap_or_else(|| declared_own.get(rate_limits).map_or(1, Limit::cost));
            rate_limits += 1;
            limit = limit.costing(cost.min(limit.max()));
            match &d.identity {
                Some(own) if differ && Some(own) != first_parts.as_ref() => {
                    limit.identified_by(identity_of(own))
                }
                _ => limit,
            }
        })
        .collect();
    let declared_budgets = declared
        .iter()
        .flat_map(|p| p.limits())
        .filter(|l| l.budget().is_some());
    if named.is_empty() {
        limits.extend(declared_budgets.map(|limit| in_force(*limit, budgets)));
    } else {
        let mut unknown = Vec::new();
        for d in named {
            let name = d.budget.as_deref().unwrap_or_default();
            let Some(budget) = budgets.get(name) else {
                let known: Vec<&str> = budgets.keys().copied().collect();
                unknown.extend(unknown_budget(route, name, &known));
                continue;
            };
            // A cost not written is the one the declared route gives that budget.
            let cost = d.cost.unwrap_or_else(|| {
                declared_budgets
                    .clone()
                    .find(|l| l.budget() == Some(name))
                    .map_or(1, Limit::cost)
            });
            limits.push(budget.costing(cost.min(budget.max())));
        }
        if !unknown.is_empty() {
            return Err(unknown);
        }
    }
    let shadow = stack.iter().any(|d| d.shadow == Some(true));
    let method = route.split(' ').next().unwrap_or_default();
    let fail = match stack.iter().find_map(|d| d.fail) {
        Some(fail) => fail,
        None if shadow => FailMode::Open,
        None => declared.map_or_else(|| FailMode::default_for_methods([method]), |p| p.fail()),
    };
    let fail = if shadow && fail != FailMode::Open && stack.iter().all(|d| d.fail.is_none()) {
        FailMode::Open
    } else {
        fail
    };
    // An override that does not say keeps the declaration's: new limits on a route that hides
    // its thresholds must not start telling them.
    let headers = stack
        .iter()
        .find_map(|d| d.headers)
        .or_else(|| declared.map(|p| p.headers()))
        .unwrap_or_default();
    if let Some(problem) = crate::policy::limits_problem(&limits) {
        return Err(vec![problem.to_owned()]);
    }
    if shadow && matches!(fail, FailMode::Closed | FailMode::Local) {
        return Err(vec![ratelimit_grammar::messages::fail_with_shadow(fail)]);
    }
    let policy = RoutePolicy::new(leak(limits), identity, fail, shadow).with_headers(headers);
    // `enforce` as written, else the declaration's (as `identity` and `fail`): an override
    // that changes a limit does not change whether the route refuses. A shadow limit has none.
    let enforce = stack
        .iter()
        .find_map(|d| d.enforce)
        .or_else(|| declared.and_then(|p| p.enforce()))
        .filter(|_| !shadow);
    let policy = match enforce {
        Some(enforce) => policy.enforcing(enforce),
        None => policy,
    };
    // `ban` as written, else the declaration's unless the override waits or only logs
    // (neither refuses; the grammar refuses `ban` written beside them).
    let written_wait = stack.iter().any(|d| d.wait.is_some());
    let written_sync = stack.iter().find_map(|d| d.sync).map(Window::from_millis);
    let ban = match stack.iter().find_map(|d| d.ban) {
        Some(spec) => Some(crate::policy::Ban::from_spec(spec)),
        None => declared
            .and_then(|p| p.ban())
            .filter(|_| !written_wait && written_sync.is_none()),
    }
    .filter(|_| !shadow);
    let policy = match ban {
        Some(ban) => policy.banning(ban),
        None => policy,
    };
    // `sync` as written (refused where the stack cannot be decided from shares), else the
    // declaration's where the stack can: an override whose limit is too small for shares,
    // or that adds what only the store decides, is checked per request.
    let sync = match written_sync {
        Some(sync) => match crate::policy::why_cannot_sync(policy.limits(), sync) {
            Some(why) => return Err(vec![why.to_owned()]),
            None => Some(sync),
        },
        None => declared
            .and_then(|p| p.sync())
            .map(|sync| Window::from_millis(sync.as_millis() as u64))
            .filter(|sync| {
                !written_wait
                    && policy.ban().is_none()
                    && crate::policy::why_cannot_sync(policy.limits(), *sync).is_none()
            }),
    };
    let policy = match sync {
        Some(sync) => policy.syncing(sync),
        None => policy,
    };
    // `wait` as written, else the declaration's, where the stack can wait: an override
    // that adds a lockout, counts failures only, holds places, bans or only logs makes the
    // route refuse at once (the grammar refuses `wait` written beside those).
    let wait = stack
        .iter()
        .find_map(|d| d.wait)
        .map(Window::from_millis)
        .or_else(|| {
            declared
                .and_then(|p| p.wait())
                .map(|wait| Window::from_millis(wait.as_millis() as u64))
        })
        .filter(|_| can_wait(&policy));
    Ok(Policy::Limited(match wait {
        Some(wait) => policy.waiting(wait),
        None => policy,
    }))
}

/// Whether `policy` can be given a `wait` ([`RoutePolicy::waiting`] would not panic).
fn can_wait(policy: &RoutePolicy) -> bool {
    !policy.shadow()
        && policy.ban().is_none()
        && policy.sync().is_none()
        && crate::policy::why_cannot_wait(policy.limits()).is_none()
        && policy.tiers().is_empty()
}

/// A policy in the attribute's syntax (stacked declarations joined by `; `), as the admin
/// command shows declared policies and an override would write them.
// Hidden from the docs: the form the services publish their declared routes in, for
// ratelimit-admin to show; nothing a user builds on.
#[doc(hidden)]
pub fn declaration_text(policy: &Policy) -> String {
    let limited = match policy {
        Policy::Exempt { reason } => return format!("exempt = {reason:?}"),
        Policy::Limited(limited) => limited,
    };
    let window = |w: Window| {
        humantime::format_duration(w.as_duration())
            .to_string()
            .replace(' ', "")
    };
    let mixed = limited
        .limits()
        .iter()
        .any(|l| l.identity().is_some() && l.budget().is_none());
    let first_own = limited.limits().iter().position(|l| l.budget().is_none());
    limited
        .limits()
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            let mut keys = Vec::new();
            if let Some(name) = limit.budget() {
                keys.push(format!("budget = {name}"));
                if limit.cost() != 1 {
                    keys.push(format!("cost = {}", limit.cost()));
                }
            } else if limit.is_concurrency() {
                keys.push(format!("concurrency = {}", limit.max()));
                keys.push(format!("lease = \"{}\"", window(limit.window())));
            } else {
                keys.push(format!("limit = {}", limit.max()));
                keys.push(format!("window = \"{}\"", window(limit.window())));
                keys.push(format!("algorithm = \"{}\"", limit.algorithm().as_str()));
            }
            if limit.budget().is_none() {
                // A stack whose limits count different identities names one on each; the
                // route's identity goes on its first own limit.
                let identity = match (Some(i) == first_own, limit.identity()) {
                    (_, Some(own)) => Some(own),
                    (true, None) => Some(limited.identity()),
                    _ if mixed => Some(limited.identity()),
                    _ => None,
                };
                if let Some(Identity::Parts(_)) = identity {
                    keys.push(format!("identity = \"{}\"", identity.expect("some")));
                }
                if limit.count() != ratelimit_grammar::Count::Requests {
                    keys.push(format!("count = \"{}\"", limit.count().as_str()));
                }
                if let Some(block) = limit.block() {
                    keys.push(format!("block = \"{}\"", window(block)));
                }
                if limit.cost() != 1 {
                    keys.push(format!("cost = {}", limit.cost()));
                }
            }
            if i == 0 {
                keys.push(format!("fail = \"{}\"", limited.fail()));
                if limited.shadow() {
                    keys.push("shadow = true".to_owned());
                }
                if limited.headers() != RouteHeaders::All {
                    keys.push(format!("headers = \"{}\"", limited.headers()));
                }
                if let Some(enforce) = limited.enforce() {
                    keys.push(format!("enforce = {enforce}"));
                }
                if let Some(wait) = limited.wait() {
                    keys.push(format!("wait = \"{}ms\"", wait.as_millis()));
                }
                if let Some(ban) = limited.ban() {
                    keys.push(format!(
                        "ban = \"{} in {}ms for {}ms\"",
                        ban.times(),
                        ban.within().as_millis(),
                        ban.duration().as_millis()
                    ));
                }
                if let Some(sync) = limited.sync() {
                    keys.push(format!("sync = \"{}ms\"", sync.as_millis()));
                }
            }
            keys.join(", ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A shared budget's limit in the syntax its override is written in (the keys `budget!`
/// takes), as the services publish it: `limit = 1000, window = "1h", algorithm = "…",
/// identity = "api_key"`.
pub(crate) fn budget_text(limit: &Limit) -> String {
    let window = humantime::format_duration(limit.window().as_duration())
        .to_string()
        .replace(' ', "");
    let mut text = format!(
        "limit = {}, window = \"{window}\", algorithm = \"{}\"",
        limit.max(),
        limit.algorithm().as_str()
    );
    if let Some(identity @ Identity::Parts(_)) = limit.identity() {
        text.push_str(&format!(", identity = \"{identity}\""));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_sets_headers_or_keeps_the_declared_routes() {
        let limited = |policy: Policy| *policy.limited().expect("limited");
        let hidden = limited(
            policy_from_text(
                "POST /login",
                r#"limit = 5, window = "5m", headers = "none""#,
                None,
            )
            .unwrap(),
        );
        assert_eq!(hidden.headers(), RouteHeaders::Hidden);
        let text = declaration_text(&Policy::Limited(hidden));
        assert!(text.ends_with(r#"headers = "none""#), "{text}");
        // New limits on a hidden route stay hidden, unless the override says otherwise.
        let declared = Policy::Limited(hidden);
        let kept = policy_from_text(
            "POST /login",
            r#"limit = 3, window = "5m""#,
            Some(&declared),
        );
        assert_eq!(limited(kept.unwrap()).headers(), RouteHeaders::Hidden);
        let shown = policy_from_text(
            "POST /login",
            r#"limit = 3, window = "5m", headers = "all""#,
            Some(&declared),
        );
        assert_eq!(limited(shown.unwrap()).headers(), RouteHeaders::All);
        assert!(policy_from_text(
            "POST /login",
            r#"limit = 3, window = "5m", headers = "off""#,
            None
        )
        .unwrap_err()[0]
            .starts_with("unknown headers `off`"));
    }

    #[test]
    fn a_shared_budget_reads_and_writes_by_name_and_stays_under_a_route_override() {
        let api = shared_budget_from_text(
            "API",
            r#"limit = 1000, window = "1h", identity = "api_key""#,
            None,
        )
        .unwrap();
        let budgets: BudgetLimits = [("API", api)].into();
        let read = |text: &str, declared: Option<&Policy>| {
            policy_with_budgets("GET /x", text, declared, &budgets).unwrap()
        };
        let declared = read(
            r#"limit = 5, window = "1m", identity = "ip"; budget = API, cost = 4"#,
            None,
        );
        let text = declaration_text(&declared);
        assert_eq!(
            text,
            r#"limit = 5, window = "1m", algorithm = "sliding_window", identity = "ip", fail = "open"; budget = API, cost = 4"#
        );
        assert_eq!(read(&text, None), declared, "it reads back as written");
        // An override of the route's own limit keeps the budget at the declared cost.
        let kept = read(r#"limit = 9, window = "1m""#, Some(&declared));
        let limits = kept.limited().unwrap().limits();
        assert_eq!(limits.len(), 2);
        assert_eq!((limits[1].budget(), limits[1].cost()), (Some("API"), 4));
        // One naming budgets has those (the declared cost unless it writes one).
        let named = read(r#"limit = 9, window = "1m"; budget = API"#, Some(&declared));
        assert_eq!(named.limited().unwrap().limits()[1].cost(), 4);
        let alone = read(r#"budget = API, cost = 2000"#, Some(&declared));
        let limits = alone.limited().unwrap().limits();
        assert_eq!(
            (limits.len(), limits[0].cost()),
            (1, 1000),
            "at most the whole budget"
        );
        let unknown = policy_with_budgets("GET /x", "budget = APX", None, &budgets).unwrap_err();
        assert!(unknown[0].contains("did you mean `API`?"), "{unknown:?}");
    }

    #[test]
    fn a_wait_reads_and_writes_as_the_attribute_writes_it_and_is_kept_where_it_can_be() {
        let policy = policy_from_text(
            "GET /items",
            r#"limit = 10, window = "1s", algorithm = "gcra", wait = "2s""#,
            None,
        )
        .unwrap();
        let limited = policy.limited().unwrap();
        assert_eq!(limited.wait(), Some(std::time::Duration::from_secs(2)));
        let text = declaration_text(&policy);
        assert!(text.ends_with(r#"wait = "2000ms""#), "{text}");
        assert_eq!(policy_from_text("GET /items", &text, None).unwrap(), policy);
        // An override that writes none keeps the declared wait ...
        let lowered = policy_from_text("GET /items", r#"limit = 5, window = "1s""#, Some(&policy));
        assert_eq!(lowered.unwrap().limited().unwrap().wait(), limited.wait());
        // ... unless its stack cannot wait: it then refuses at once.
        let locked = policy_from_text(
            "GET /items",
            r#"limit = 5, window = "1s", block = "1m""#,
            Some(&policy),
        );
        assert_eq!(locked.unwrap().limited().unwrap().wait(), None);
        // A stack of two on one identity, as the services publish it, reads back.
        let stacked = policy_from_text(
            "GET /items",
            r#"limit = 10, window = "1s", identity = "api_key", wait = "2s"; limit = 100, window = "1h", identity = "api_key""#,
            None,
        )
        .unwrap();
        let text = declaration_text(&stacked);
        assert_eq!(
            policy_from_text("GET /items", &text, None).unwrap(),
            stacked,
            "{text}"
        );
        let beside = policy_from_text(
            "GET /items",
            r#"limit = 5, window = "1s", wait = "1s", block = "1m""#,
            None,
        );
        assert!(beside.unwrap_err()[0].starts_with("`wait` does not go with `block`"));
    }

    #[test]
    fn a_concurrency_limit_reads_and_writes_as_the_attribute_writes_it() {
        let policy = policy_from_text(
            "POST /export",
            r#"concurrency = 2, lease = "30s", identity = "api_key"; limit = 60, window = "1h""#,
            None,
        )
        .unwrap();
        let limits = policy.limited().unwrap().limits();
        assert_eq!(limits[0], Limit::concurrent(2, Window::from_secs(30)));
        assert!(!limits[1].is_concurrency());
        let text = declaration_text(&policy);
        assert_eq!(
            text,
            r#"concurrency = 2, lease = "30s", identity = "api_key", fail = "closed"; limit = 60, window = "1h", algorithm = "sliding_window""#
        );
        assert_eq!(
            policy_from_text("POST /export", &text, None).unwrap(),
            policy,
            "it reads back as written"
        );
        let beside = policy_from_text("POST /export", r#"concurrency = 2, block = "1m""#, None);
        assert!(beside.unwrap_err()[0].starts_with("`block` does not go with `concurrency`"));
        // An override of the rate limit keeps the declared rate limit's cost, the
        // concurrency limit before it notwithstanding.
        let declared = policy_from_text(
            "POST /export",
            r#"concurrency = 2; limit = 600, window = "1h", cost = 10"#,
            None,
        )
        .unwrap();
        let lowered = policy_from_text(
            "POST /export",
            r#"limit = 300, window = "1h""#,
            Some(&declared),
        );
        assert_eq!(lowered.unwrap().limited().unwrap().limits()[0].cost(), 10);
    }

    #[test]
    fn lists_match_ranges_keys_and_ids_and_mapped_addresses_as_ipv4() {
        let mut list = List::default();
        for entry in [
            "ip 203.0.113.0/24",
            "ip 2001:db8::/32",
            "api_key fp:0123456789abcdef",
            "user_id 42",
        ] {
            list.add(&ListEntry::parse(entry).unwrap(), None);
        }
        let any = RouteAt::Any { ipv6_group: 64 };
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        assert_eq!(list.matches(ip("203.0.113.9"), None, None, any), Some("ip"));
        assert_eq!(
            list.matches(ip("::ffff:203.0.113.9"), None, None, any),
            Some("ip")
        );
        assert_eq!(
            list.matches(ip("2001:db8:1::1"), None, None, any),
            Some("ip")
        );
        let key = Some(("fp:0123456789abcdef", "the key"));
        assert_eq!(
            list.matches(ip("198.51.100.1"), key, None, any),
            Some("api_key")
        );
        // A key listed by fingerprint is not matched by the fingerprint sent as a key.
        let sent_as_key = Some(("fp:fedcba9876543210", "fp:0123456789abcdef"));
        assert_eq!(list.matches(None, sent_as_key, None, any), None);
        assert_eq!(list.matches(None, None, Some("42"), any), Some("user_id"));
        assert_eq!(list.matches(ip("2001:db9::1"), None, Some("43"), any), None);
    }

    #[test]
    fn an_allow_entry_opens_routes_that_count_a_username_only_when_it_names_them() {
        let mut list = List::default();
        let login: BTreeSet<String> = ["POST /login".to_owned()].into();
        list.add(&ListEntry::parse("ip 10.0.0.0/8").unwrap(), None);
        list.add(&ListEntry::parse("ip 10.1.0.0/16").unwrap(), Some(&login));
        list.add(&ListEntry::parse("user_id ops").unwrap(), Some(&login));
        let route = |label, counts_username| RouteAt::Route {
            label,
            counts_username,
        };
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        let search = route("GET /search", false);
        let sign_in = route("POST /login", true);
        let reset = route("POST /password-reset", true);
        assert_eq!(list.matches(ip("10.9.9.9"), None, None, search), Some("ip"));
        assert_eq!(list.matches(ip("10.9.9.9"), None, None, sign_in), None);
        // A narrower range scoped to the sign-in route opens it; the wider one still opens
        // every route that counts no username.
        assert_eq!(
            list.matches(ip("10.1.2.3"), None, None, sign_in),
            Some("ip")
        );
        assert_eq!(list.matches(ip("10.1.2.3"), None, None, search), Some("ip"));
        assert_eq!(list.matches(ip("10.1.2.3"), None, None, reset), None);
        // A scoped entry opens its routes only.
        assert_eq!(
            list.matches(None, None, Some("ops"), sign_in),
            Some("user_id")
        );
        assert_eq!(list.matches(None, None, Some("ops"), search), None);
    }

    #[test]
    fn a_deny_entry_for_one_ipv6_address_names_its_group_as_counting_does() {
        let mut list = List::default();
        list.add(&ListEntry::parse("ip 2001:db8:0:1::7").unwrap(), None);
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        let deny = |group| RouteAt::Any { ipv6_group: group };
        assert_eq!(
            list.matches(ip("2001:db8:0:1::7"), None, None, deny(64)),
            Some("ip")
        );
        // Another address of the same /64: the same client as the limiter counts it.
        assert_eq!(
            list.matches(ip("2001:db8:0:1:ffff::1"), None, None, deny(64)),
            Some("ip")
        );
        assert_eq!(
            list.matches(ip("2001:db8:0:2::7"), None, None, deny(64)),
            None
        );
        assert_eq!(
            list.matches(ip("2001:db8:0:2::7"), None, None, deny(48)),
            Some("ip")
        );
        assert_eq!(
            list.matches(ip("2001:db8:0:1::8"), None, None, deny(128)),
            None
        );
        // An allow entry names the address it names.
        let route = RouteAt::Route {
            label: "GET /x",
            counts_username: false,
        };
        assert_eq!(list.matches(ip("2001:db8:0:1::8"), None, None, route), None);
    }

    #[test]
    fn a_hundred_thousand_ranges_match_as_one_does() {
        let mut list = List::default();
        for i in 0..100_000u32 {
            let net = Ipv4Net::new(std::net::Ipv4Addr::from(0x0b00_0000 + (i << 8)), 24).unwrap();
            list.add(&ListEntry::Ip(IpNet::V4(net)), None);
        }
        let any = RouteAt::Any { ipv6_group: 64 };
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        assert_eq!(list.matches(ip("11.0.0.1"), None, None, any), Some("ip"));
        // The last range: 11.0.0.0 + 99,999 × 256.
        assert_eq!(
            list.matches(ip("12.134.159.9"), None, None, any),
            Some("ip")
        );
        assert_eq!(list.matches(ip("12.134.160.1"), None, None, any), None);
        assert_eq!(list.matches(ip("10.255.255.255"), None, None, any), None);
    }
}
