//! The policy in force on one request: the deny list first, then the route's policy (its
//! tier's, when the request has a tier the route or an override gives limits of its own),
//! then the allow list by the policy in force, all decided before any store call.

use std::{net::IpAddr, rc::Rc};

use actix_web::{dev::ServiceRequest, HttpMessage as _, HttpResponse};

use super::{
    attempt::Unlimited,
    limiter::{Limiter, LimiterHandle},
    route_info::RouteInfo,
};
use crate::{
    overrides::{api_key_fingerprint, RouteAt, Table, Tier},
    policy::Policy,
};

/// How a route is matched against the allow list.
fn route_at(route: &RouteInfo) -> RouteAt<'_> {
    RouteAt::Route {
        label: &route.label,
        counts_username: route.policy.reads_username(),
    }
}

fn record_listed(route: &RouteInfo, list: &'static str, kind: &'static str) {
    metrics::counter!(
        super::telemetry::LISTED,
        "route" => route.label.clone(),
        "list" => list,
        "kind" => kind,
    )
    .increment(1);
}

/// What the overrides say about a request.
pub(crate) enum Resolved {
    /// Limited as `route` says (no override, or the route's own policy).
    AsIs,
    /// Limited under an override's policy.
    Route(Rc<RouteInfo>),
    /// Not limited: the client is on the allow list, or an override exempts the route
    /// (which of the two, for the handler's `Budget`).
    Pass(Unlimited),
    /// Refused: the client is on the deny list.
    Deny(HttpResponse),
}

impl Limiter {
    /// What the overrides in force say about `req` on `route`; `client`, its address. The
    /// deny list first, then the route's override, then the allow list (an allow entry opens
    /// a route by the policy in force on it: one that counts a username only when the entry
    /// names the route).
    pub(crate) fn resolve(
        &self,
        req: &ServiceRequest,
        route: &RouteInfo,
        handle: &LimiterHandle,
    ) -> Resolved {
        let Some(shared) = &self.overrides else {
            if route.policy.tiers().is_empty() {
                return Resolved::AsIs;
            }
            let extensions = req.extensions();
            return Self::resolve_route(None, route, extensions.get::<Tier>());
        };
        let table = shared.table.load();
        let listed = table.has_lists().then(|| {
            let client = handle.resolve_client(req);
            let api_key = self.listed_api_key(&table, req);
            let user_id = (table.deny.names_users() || table.allow.names_users())
                .then(|| self.sources.user_id.read(req))
                .flatten();
            (client, api_key, user_id)
        });
        if let Some((client, api_key, user_id)) = &listed {
            let key = api_key.as_ref().map(|(p, k)| (p.as_str(), k.as_str()));
            if let Some(kind) = table
                .deny
                .matches(*client, key, user_id.as_deref(), self.deny_at())
            {
                record_listed(route, "deny", kind);
                tracing::debug!(target: "ratelimit", route = %route.label, kind, "refused: on the deny list");
                return Resolved::Deny(self.denied(route));
            }
        }
        let resolved = if route.is_default_policy() && !table.names_overridden_budget(&route.policy)
        {
            Resolved::AsIs
        } else {
            let extensions = req.extensions();
            Self::resolve_route(Some(&table), route, extensions.get::<Tier>())
        };
        if let Some((client, api_key, user_id)) = &listed {
            let in_force = match &resolved {
                Resolved::Route(built) => &**built,
                Resolved::Pass(_) | Resolved::Deny(_) => return resolved,
                Resolved::AsIs => route,
            };
            let key = api_key.as_ref().map(|(p, k)| (p.as_str(), k.as_str()));
            if let Some(kind) =
                table
                    .allow
                    .matches(*client, key, user_id.as_deref(), route_at(in_force))
            {
                record_listed(route, "allow", kind);
                return Resolved::Pass(Unlimited::AllowList);
            }
        }
        resolved
    }

    /// What the overrides say about a request answered before its route's guard saw it, by
    /// its address: denied clients first; allowed clients (on a route their entry opens) are
    /// not counted; a route's override counts it.
    pub(crate) fn resolve_answered(
        &self,
        route: &RouteInfo,
        client: Option<IpAddr>,
        tier: Option<&Tier>,
    ) -> Resolved {
        let Some(shared) = &self.overrides else {
            return Self::resolve_route(None, route, tier);
        };
        let table = shared.table.load();
        if table
            .deny
            .matches(client, None, None, self.deny_at())
            .is_some()
        {
            record_listed(route, "deny", "ip");
            return Resolved::Deny(self.denied(route));
        }
        let resolved = if route.is_default_policy() && !table.names_overridden_budget(&route.policy)
        {
            Resolved::AsIs
        } else {
            Self::resolve_route(Some(&table), route, tier)
        };
        let in_force = match &resolved {
            Resolved::Route(built) => &**built,
            Resolved::Pass(_) | Resolved::Deny(_) => return resolved,
            Resolved::AsIs => route,
        };
        if table
            .allow
            .matches(client, None, None, route_at(in_force))
            .is_some()
        {
            return Resolved::Pass(Unlimited::AllowList);
        }
        resolved
    }

    /// How the deny list is matched: on every route, an IPv6 client with its group.
    fn deny_at(&self) -> RouteAt<'static> {
        RouteAt::Any {
            ipv6_group: self.sources.trusted_proxies.ipv6_bucket(),
        }
    }

    /// The API key `req` sends, with its fingerprint, when a list names keys.
    fn listed_api_key(&self, table: &Table, req: &ServiceRequest) -> Option<(String, String)> {
        if !(table.deny.names_keys() || table.allow.names_keys()) {
            return None;
        }
        let key = self.sources.api_key.read(req)?;
        Some((api_key_fingerprint(&key, self.secret.as_ref()), key))
    }

    /// The policy in force on `route` for a request of `tier`: the tier's override, else the
    /// tier's declared limits, else the route's override (for every request of no tier, or
    /// of a tier the route gives no limits of its own), else the declaration; each with the
    /// shared budgets' overrides in force. A tier's policy counts in keys of its own. The
    /// per-worker route is built once per change of the overrides, and kept on `route`.
    fn resolve_route(table: Option<&Table>, route: &RouteInfo, tier: Option<&Tier>) -> Resolved {
        let tier = tier.map(Tier::as_str);
        let declared = tier.and_then(|name| Some((name, route.policy.tier(name)?)));
        let overridden = table.and_then(|table| table.route(&route.label, tier));
        let (policy, tier) = match (overridden, declared) {
            (Some((own, true)), _) => (own.policy, tier),
            (_, Some((name, policy))) => (Policy::Limited(policy), Some(name)),
            (Some((all, false)), None) => (all.policy, None),
            (None, None) if table.is_some_and(|t| t.names_overridden_budget(&route.policy)) => {
                (Policy::Limited(route.policy), None)
            }
            (None, None) => return Resolved::AsIs,
        };
        let policy = match policy {
            Policy::Exempt { .. } => return Resolved::Pass(Unlimited::Exempt),
            Policy::Limited(policy) => policy,
        };
        let generation = table.map_or(0, |table| table.generation);
        let mut cache = route.overrides.borrow_mut();
        let cached = cache.iter_mut().find(|(t, _, _)| t.as_deref() == tier);
        if let Some((_, built_from, built)) = &cached {
            if *built_from == generation {
                return Resolved::Route(Rc::clone(built));
            }
        }
        let policy = table.map_or(policy, |table| table.with_budgets(policy));
        let built = Rc::new(route.overridden(policy, tier));
        match cached {
            Some(entry) => *entry = (tier.map(str::to_owned), generation, Rc::clone(&built)),
            None => cache.push((tier.map(str::to_owned), generation, Rc::clone(&built))),
        }
        Resolved::Route(built)
    }
}
