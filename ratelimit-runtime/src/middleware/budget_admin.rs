//! `RateLimiter::reset` and `RateLimiter::give_back`: any client's budget on any declared
//! route, from its plain identity values, keyed exactly as the request path keys it.

use std::{fmt, net::IpAddr};

use actix_web::http::Method;

use super::{declared_routes::DeclaredRoutes, rate_limiter::RateLimiter, route_info::RouteInfo};
use crate::{
    identity::ClientIdentity,
    key::RouteKey,
    policy::{Identity, IdentityPart, Limit, RoutePolicy, SharedBudget},
    registry::{self, RouteDeclaration},
    store::{adjust_within, AdjustRequest, Adjustment, CheckRequest, LimitState, StoreError},
};

/// Why a budget could not be reset or given back from code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetError {
    /// No declared, limited route is labelled so (`POST /login`, with its scope's prefix).
    UnknownRoute(String),
    /// Several declarations answer that label (routes told apart by a guard): their budgets
    /// cannot be named by method and pattern.
    Ambiguous(String),
    /// The label is the path in the route's attribute, but the App mounts the route under a
    /// scope: its requests count under the full patterns given (`POST /api/login`).
    Scoped {
        /// The label given.
        route: String,
        /// The route's labels with their scope's prefix.
        at: Vec<String>,
    },
    /// The identity given is not the one the route counts: the parts it needs, in order.
    Identity {
        /// The route's label.
        route: String,
        /// What the route's limits count by, such as `ip+username`.
        expected: String,
    },
    /// The store failed or did not answer in time.
    Store(StoreError),
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::UnknownRoute(route) => write!(
                f,
                "`{route}` is no declared, limited route: name it as `METHOD /full/pattern`, with its scope's prefix, as the route table shows it"
            ),
            BudgetError::Ambiguous(route) => write!(
                f,
                "`{route}` names several declarations (routes told apart by a guard); their budgets cannot be named by method and pattern"
            ),
            BudgetError::Scoped { route, at } => write!(
                f,
                "`{route}` is mounted under a scope: name it as `{}`",
                at.join("` or `")
            ),
            BudgetError::Identity { route, expected } => write!(
                f,
                "`{route}` counts clients by `{expected}`: give exactly those parts, in that order"
            ),
            BudgetError::Store(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for BudgetError {}

/// Declarations with `method` (as `takes` says) at the full pattern `pattern` in `routes`
/// (an App's, as the limiter read them), else without `routes` those whose route attribute
/// has that path. Named by its attribute's path, a route the App mounts only under a scope,
/// where its requests count under the full pattern, is refused with that full label.
fn declared_at(
    routes: Option<&DeclaredRoutes>,
    route: &str,
    method: &Method,
    pattern: &str,
    takes: impl Fn(&RouteDeclaration) -> bool,
) -> Result<Vec<&'static RouteDeclaration>, BudgetError> {
    let by_attribute = || {
        registry::declarations()
            .filter(|d| d.path == pattern && takes(d))
            .collect::<Vec<_>>()
    };
    let Some(routes) = routes else {
        return Ok(by_attribute());
    };
    let found: Vec<_> = routes
        .declarations_at(pattern)
        .iter()
        .copied()
        .filter(|d| takes(d))
        .collect();
    if !found.is_empty() {
        return Ok(found);
    }
    for declaration in by_attribute() {
        let mut at: Vec<String> = routes
            .mounted_at(declaration)
            .into_iter()
            .map(|full| format!("{method} {full}"))
            .collect();
        if !at.is_empty() {
            at.sort();
            return Err(BudgetError::Scoped {
                route: route.trim().to_owned(),
                at,
            });
        }
    }
    Ok(Vec::new())
}

impl RateLimiter {
    /// Clears the budget of the client identified by `identity` on `route` (`"POST /login"`,
    /// as the route table labels it): the count and lockout of every limit of the route that
    /// counts by that identity (on a route whose limits count different identities, only
    /// those of the identity given), under the policy in force, in one store call; and in
    /// the keys of each tier with limits of its own on the route (declared with
    /// `#[rate_limit(tier = ..)]`, or an override's, [`overrides`](crate::guide::overrides))
    /// that counts by that identity, one call each, since the caller need not know the
    /// client's tier. ([`give_back`](Self::give_back) and
    /// [`state`](Self::state) take the route's keys only: a request's own
    /// [`Budget`](crate::Budget) gives back in its tier's.)
    /// `identity` gives each part the route counts, in order, with its plain value (a
    /// username as submitted: it is put in canonical form, and hashed under the key secret,
    /// as the request path does; an address as an IP address). This instance stops refusing
    /// the client at once, the others within a second.
    ///
    /// Routes are named as the App's route table names them, with their scope's prefix; a
    /// route under a scope named by its attribute's path alone is refused
    /// ([`BudgetError::Scoped`]). The limiter reads the App's routes when the App serves its
    /// first request, or when [`coverage::require_coverage`](crate::coverage::require_coverage)
    /// (or another form of the check) builds the App with this limiter inside. Before
    /// either, it finds routes only by the path in their route attribute, and a route under
    /// a scope is then found by that path alone, whose key none of its requests use. So call
    /// it from a handler, once the App has served, or after the startup coverage check.
    ///
    /// ```
    /// # actix_web::rt::System::new().block_on(async {
    /// use ratelimit_runtime::{store::MemoryStore, IdentityPart, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new());
    /// // No route of this doctest is declared.
    /// let unknown = limiter.reset("POST /login", &[(IdentityPart::Username, "alice")]).await;
    /// assert!(unknown.unwrap_err().to_string().contains("no declared, limited route"));
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`BudgetError`]: no such declared route, an identity that neither the route's limits
    /// nor a tier's own limits on it count by, or the store's error.
    pub async fn reset(
        &self,
        route: &str,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(), BudgetError> {
        self.change(route, identity, Adjustment::Reset)
            .await
            .map(|_| ())
    }

    /// Gives `units` back to every limit of `route` for the client identified by `identity`
    /// (as [`reset`](Self::reset) names them), never past a whole budget: the units given
    /// back, over all limits.
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset).
    pub async fn give_back(
        &self,
        route: &str,
        identity: &[(IdentityPart, &str)],
        units: u32,
    ) -> Result<u64, BudgetError> {
        let change = Adjustment::GiveBack {
            units,
            receipt: None,
        };
        self.change(route, identity, change).await
    }

    /// [`reset`](Self::reset) on a route this program need not declare, under `policy`
    /// (for a tool that serves no route, such as the `ratelimit-admin` command, which reads
    /// the policy the services publish): keyed as a route declared alone at its pattern,
    /// for requests of `tier` when given (a tier's override counts in keys of its own).
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset).
    pub async fn reset_under(
        &self,
        route: &str,
        policy: RoutePolicy,
        tier: Option<&str>,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(), BudgetError> {
        let (key, limits) = self.key_under(route, policy, tier, identity)?;
        self.adjust_key(&key, &limits, Adjustment::Reset)
            .await
            .map(|_| ())
    }

    /// The key and limits of `identity` on `route` under `policy` (for `tier`).
    fn key_under(
        &self,
        route: &str,
        policy: RoutePolicy,
        tier: Option<&str>,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(RouteKey, Vec<Limit>), BudgetError> {
        let unknown = || BudgetError::UnknownRoute(route.to_owned());
        let (method, pattern) = route.trim().split_once(' ').ok_or_else(unknown)?;
        let info = RouteInfo::new("admin", method, pattern.trim().to_owned(), policy);
        let info = match tier {
            Some(tier) => info.overridden(policy, Some(tier)),
            None => info,
        };
        self.keyed(route, &info, policy, identity)
    }

    /// The state of the client identified by `identity` on `route` (named as
    /// [`reset`](Self::reset) names them), counting nothing: each limit as the client's next
    /// request would find it (`allowed` whether it would pass, `remaining` what would be
    /// left after it, `retry_after` while refused or locked out, `reset_after` until the
    /// budget is whole), under the policy in force for requests of no tier with limits of
    /// its own (the route's default, or its override).
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset); a store of your own that does not implement
    /// [`Store::peek`](crate::store::Store::peek) answers a store error (every store of this
    /// crate does).
    pub async fn state(
        &self,
        route: &str,
        identity: &[(IdentityPart, &str)],
    ) -> Result<Vec<LimitState>, BudgetError> {
        let (key, limits) = self.budget_key(route, identity)?;
        self.peek_key(&key, &limits).await
    }

    /// [`state`](Self::state) on a route this program need not declare, under `policy`, as
    /// [`reset_under`](Self::reset_under) names it.
    ///
    /// # Errors
    ///
    /// As [`state`](Self::state).
    pub async fn state_under(
        &self,
        route: &str,
        policy: RoutePolicy,
        tier: Option<&str>,
        identity: &[(IdentityPart, &str)],
    ) -> Result<Vec<LimitState>, BudgetError> {
        let (key, limits) = self.key_under(route, policy, tier, identity)?;
        self.peek_key(&key, &limits).await
    }

    /// The state of `limits` under `key`, one store call per base of their keys (a Cluster
    /// keeps a shared budget's keys in another slot than the route's), in `limits`' order.
    async fn peek_key(
        &self,
        key: &RouteKey,
        limits: &[Limit],
    ) -> Result<Vec<LimitState>, BudgetError> {
        if !key.spans_identities(limits) {
            return self.peek_one(key, limits).await;
        }
        let mut states = Vec::with_capacity(limits.len());
        for (group_key, group) in key.groups(limits) {
            states.extend(self.peek_one(&group_key, &group).await?);
        }
        let mut ordered = Vec::with_capacity(states.len());
        for limit in limits {
            if let Some(at) = states.iter().position(|s| s.limit == *limit) {
                ordered.push(states.swap_remove(at));
            }
        }
        Ok(ordered)
    }

    async fn peek_one(
        &self,
        key: &RouteKey,
        limits: &[Limit],
    ) -> Result<Vec<LimitState>, BudgetError> {
        let request = CheckRequest {
            key,
            limits,
            now_millis: self.clock.now_millis(),
        };
        let timeout = self
            .timeout
            .or_else(|| self.store.timeout())
            .unwrap_or(crate::store::DEFAULT_TIMEOUT);
        match crate::store::within(timeout, self.store.peek(request)).await {
            Ok(Ok(decision)) => Ok(decision.limits),
            Ok(Err(error)) => Err(BudgetError::Store(error)),
            Err(_) => Err(BudgetError::Store(StoreError::timeout(timeout))),
        }
    }

    async fn change(
        &self,
        route: &str,
        identity: &[(IdentityPart, &str)],
        change: Adjustment<'_>,
    ) -> Result<u64, BudgetError> {
        // A reset clears the client's budget in every tier's keys too: the app cannot
        // know the tier the client's requests count in.
        let reset = matches!(change, Adjustment::Reset);
        let mut keys = self.budget_keys(route, identity, reset)?.into_iter();
        let (key, limits) = keys
            .next()
            .ok_or_else(|| BudgetError::UnknownRoute(route.to_owned()))?;
        let changed = self.adjust_key(&key, &limits, change).await?;
        for (key, limits) in keys {
            self.adjust_key(&key, &limits, Adjustment::Reset).await?;
        }
        Ok(changed)
    }

    async fn adjust_key(
        &self,
        key: &RouteKey,
        limits: &[Limit],
        change: Adjustment<'_>,
    ) -> Result<u64, BudgetError> {
        // A route's shared budgets are every route's: changing one client's budget on a route
        // leaves them alone. A concurrency limit's places are its requests' own: a give-back
        // leaves them alone too (a reset clears them with the rest).
        let reset = matches!(change, Adjustment::Reset);
        let limits: Vec<Limit> = limits
            .iter()
            .filter(|limit| limit.budget().is_none() && (reset || !limit.is_concurrency()))
            .copied()
            .collect();
        if limits.is_empty() {
            return Ok(0);
        }
        let request = AdjustRequest::new(key, &limits, self.clock.now_millis(), change);
        let changed = adjust_within(&*self.store, self.timeout, request).await;
        if let Some(shield) = self.shield.get() {
            shield.forget(key.as_str());
        }
        changed.map_err(BudgetError::Store)
    }

    /// The key and limits of `identity` on the declared route labelled `route`.
    fn budget_key(
        &self,
        route: &str,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(RouteKey, Vec<Limit>), BudgetError> {
        let mut keys = self.budget_keys(route, identity, false)?;
        Ok(keys.swap_remove(0))
    }

    /// [`budget_key`](Self::budget_key); with `tiers`, also the key and limits of `identity`
    /// under each tier's own limits on the route (its override, else its declared limits: a
    /// tier's limits count in keys of their own), of every one of these whose limits count
    /// that identity (an error only when none does).
    fn budget_keys(
        &self,
        route: &str,
        identity: &[(IdentityPart, &str)],
        tiers: bool,
    ) -> Result<Vec<(RouteKey, Vec<Limit>)>, BudgetError> {
        let unknown = || BudgetError::UnknownRoute(route.to_owned());
        let (method, pattern) = route.trim().split_once(' ').ok_or_else(unknown)?;
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| unknown())?;
        let pattern = pattern.trim();
        let takes = |d: &RouteDeclaration| {
            d.methods.is_empty() || d.methods.iter().any(|m| *m == method.as_str())
        };
        // The App's own routes once a worker has read them; before, those of the App the
        // coverage check read with this limiter inside, else a declaration at that very
        // path (a route outside any scope).
        let declared = self.declared.get().or(self.checked.get()).cloned();
        let mut found = declared_at(declared.as_deref(), route, &method, pattern, takes)?;
        found.dedup_by(|a, b| std::ptr::eq(*a, *b));
        let declaration = match found.as_slice() {
            [one] => *one,
            [] => return Err(unknown()),
            _ => return Err(BudgetError::Ambiguous(route.trim().to_owned())),
        };
        let declared_policy = *declaration.policy().limited().ok_or_else(unknown)?;
        // The policy in force: an override's, when one holds for every tier.
        let overridden = self.overrides.as_ref().and_then(|o| {
            let table = o.shared.table.load();
            let (found, _) = table.route(route.trim(), None)?;
            found.policy.limited().copied()
        });
        // With the shared budgets' overrides in force, as requests count them.
        let table = self.overrides.as_ref().map(|o| o.shared.table.load());
        let in_force =
            |policy: RoutePolicy| table.as_ref().map_or(policy, |t| t.with_budgets(policy));
        let policy = in_force(overridden.unwrap_or(declared_policy));
        let declared_info = RouteInfo::declared(
            declaration,
            &method,
            Some(pattern.to_owned()),
            declared_policy,
            declared.as_deref(),
        );
        let overridden_info =
            (policy != declared_policy).then(|| declared_info.overridden(policy, None));
        let info = overridden_info.as_ref().unwrap_or(&declared_info);
        let base = self.keyed(route, info, policy, identity);
        if !tiers {
            return base.map(|key| vec![key]);
        }
        let (mut keys, unfit) = match base {
            Ok(key) => (vec![key], None),
            Err(error) => (Vec::new(), Some(error)),
        };
        // Each tier with limits of its own (declared, or an override's) counts in its keys.
        let mut names: Vec<&str> = declared_policy.tiers().iter().map(|t| t.name()).collect();
        for (tier, _) in table.iter().flat_map(|table| table.tiers_of(route.trim())) {
            if !names.contains(&tier) {
                names.push(tier);
            }
        }
        for tier in names {
            let own = table
                .as_ref()
                .and_then(|table| table.route(route.trim(), Some(tier)))
                .filter(|(_, tiered)| *tiered)
                .map(|(own, _)| own.policy.limited().copied());
            let Some(policy) = own.unwrap_or_else(|| declared_policy.tier(tier)) else {
                continue;
            };
            let policy = in_force(policy);
            let info = declared_info.overridden(policy, Some(tier));
            if let Ok(key) = self.keyed(route, &info, policy, identity) {
                keys.push(key);
            }
        }
        match unfit {
            Some(error) if keys.is_empty() => Err(error),
            _ => Ok(keys),
        }
    }

    /// The key and limits of `identity` on `info`, under `policy`.
    fn keyed(
        &self,
        route: &str,
        info: &RouteInfo,
        policy: RoutePolicy,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(RouteKey, Vec<Limit>), BudgetError> {
        // The identity given is one the route's limits count by: those limits change.
        let (counted_by, client) = policy
            .identities()
            .into_iter()
            .find_map(|id| Some((id, self.client_identity(id, identity)?)))
            .ok_or_else(|| BudgetError::Identity {
                route: route.trim().to_owned(),
                expected: policy
                    .identities()
                    .into_iter()
                    .map(expected_identity)
                    .collect::<Vec<_>>()
                    .join("` or `"),
            })?;
        let mut key = info.key(&self.keys.prefix, self.keys.secret.as_ref(), &client);
        let limits: Vec<Limit> = policy
            .limits()
            .iter()
            .filter(|limit| policy.identity_of(limit) == counted_by)
            .copied()
            .collect();
        // A shared budget's state is read in its own key, as requests count it.
        for name in limits.iter().filter_map(Limit::budget) {
            key = key.with_budget(name, self.shared_key(name, &client));
        }
        Ok((key, limits))
    }

    /// The key of shared budget `name` for `client`, as requests count it.
    fn shared_key(&self, name: &str, client: &ClientIdentity) -> RouteKey {
        let stem = RouteKey::budget_stem(&self.keys.prefix, name);
        RouteKey::from_stem(&stem, self.keys.secret.as_ref(), client.value_parts())
    }

    /// The shared budget `budget`'s limit in force (its override's, else its declaration's),
    /// the key of the client `identity` names under it, and that limit.
    fn budget_in_force(
        &self,
        budget: &SharedBudget,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(RouteKey, Limit), BudgetError> {
        let overridden = self.overrides.as_ref().and_then(|o| {
            let table = o.shared.table.load();
            table.budgets.get(budget.name()).map(|b| b.limit)
        });
        let limit = overridden.unwrap_or(budget.limit());
        let counted_by = limit.identity().unwrap_or(Identity::UserIdElseIp);
        let client =
            self.client_identity(counted_by, identity)
                .ok_or_else(|| BudgetError::Identity {
                    route: format!("budget {}", budget.name()),
                    expected: expected_identity(counted_by),
                })?;
        Ok((self.shared_key(budget.name(), &client), limit))
    }

    /// The state of the client identified by `identity` under the shared budget `budget`
    /// (its limit in force: an override's, else its declaration's), counting nothing, as
    /// its next request on any route naming the budget would find it (at cost 1).
    /// `identity` gives each part the budget counts by, as [`reset`](Self::reset) takes them.
    ///
    /// # Errors
    ///
    /// [`BudgetError::Identity`] when `identity` is not what the budget counts by; the
    /// store's error.
    pub async fn budget_state(
        &self,
        budget: &SharedBudget,
        identity: &[(IdentityPart, &str)],
    ) -> Result<Vec<LimitState>, BudgetError> {
        let (key, limit) = self.budget_in_force(budget, identity)?;
        self.peek_key(&key, &[limit]).await
    }

    /// Clears the shared budget `budget` of the client identified by `identity` (as
    /// [`budget_state`](Self::budget_state) names it): every route naming the budget finds
    /// it whole. This instance stops refusing the client at once, the others within a
    /// second. ([`reset`](Self::reset) and [`give_back`](Self::give_back) by route leave
    /// shared budgets alone: they are every route's.)
    ///
    /// ```
    /// # actix_web::rt::System::new().block_on(async {
    /// use ratelimit_runtime::{budget, store::MemoryStore, IdentityPart, RateLimiter};
    ///
    /// budget!(API = limit = 2, window = "1h", identity = "api_key");
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new());
    /// let key = [(IdentityPart::ApiKey, "k-1")];
    /// limiter.reset_budget(&API, &key).await.unwrap();
    /// let state = limiter.budget_state(&API, &key).await.unwrap();
    /// assert!(state[0].allowed && state[0].remaining == 1, "whole: the next request leaves 1");
    /// let wrong = limiter.budget_state(&API, &[(IdentityPart::Ip, "203.0.113.7")]).await;
    /// assert!(wrong.unwrap_err().to_string().contains("api_key"));
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// As [`budget_state`](Self::budget_state).
    pub async fn reset_budget(
        &self,
        budget: &SharedBudget,
        identity: &[(IdentityPart, &str)],
    ) -> Result<(), BudgetError> {
        let (key, limit) = self.budget_in_force(budget, identity)?;
        let limits = [limit];
        let request = AdjustRequest::new(&key, &limits, self.clock.now_millis(), Adjustment::Reset);
        // No flood shield remembers a refusal by a shared budget: nothing to forget here.
        adjust_within(&*self.store, self.timeout, request)
            .await
            .map(|_| ())
            .map_err(BudgetError::Store)
    }

    /// `given` as the request path would extract it for a route counting `identity`: each
    /// part in the route's order, a username in canonical form, an address as the limiter
    /// writes it. `None` when the parts are not the route's.
    fn client_identity(
        &self,
        identity: Identity,
        given: &[(IdentityPart, &str)],
    ) -> Option<ClientIdentity> {
        let fits = match identity {
            Identity::UserIdElseIp => {
                matches!(given, [(IdentityPart::UserId | IdentityPart::Ip, _)])
            }
            Identity::Parts(parts) => {
                parts.len() == given.len()
                    && parts
                        .iter()
                        .zip(given)
                        .all(|(want, (got, _))| same_part(*want, *got))
            }
        };
        if !fits {
            return None;
        }
        let mut parts = Vec::with_capacity(given.len());
        for (part, value) in given {
            let value = match part {
                // A name that is nothing once canonical counts in the unreadable budget of
                // its address, which no name reaches.
                IdentityPart::Username => Some((self.identity.sources.canonical_username)(value))
                    .filter(|n| !n.is_empty())?,
                IdentityPart::Ip => {
                    let ip: IpAddr = value.trim().parse().ok()?;
                    self.identity.sources.trusted_proxies.text(Some(ip))
                }
                // As the request path reads them: header values trimmed, the others as given.
                IdentityPart::Header(_) => value.trim().to_owned(),
                _ => (*value).to_owned(),
            };
            parts.push((*part, value));
        }
        Some(ClientIdentity {
            parts,
            fell_back_from: None,
        })
    }
}

fn same_part(a: IdentityPart, b: IdentityPart) -> bool {
    match (a, b) {
        (IdentityPart::Header(x), IdentityPart::Header(y)) => x.eq_ignore_ascii_case(y),
        (a, b) => a == b,
    }
}

fn expected_identity(identity: Identity) -> String {
    match identity {
        Identity::Parts(parts) => parts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("+"),
        _ => "user_id or ip".to_owned(),
    }
}
