//! The overrides in force on one request: the allow and deny lists first, then the route's
//! policy (its tier's, when it has one), all decided before any store call.

use std::{net::IpAddr, rc::Rc};

use actix_web::{dev::ServiceRequest, HttpMessage as _, HttpResponse};

use super::{
    answer,
    budget::Unlimited,
    limiter::{Limiter, LimiterHandle},
    route_info::RouteInfo,
};
use crate::{
    overrides::{Table, Tier},
    policy::Policy,
};

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
    /// What the overrides in force say about `req` on `route`; `client`, its address.
    pub(crate) fn resolve(
        &self,
        req: &ServiceRequest,
        route: &RouteInfo,
        handle: &LimiterHandle,
    ) -> Resolved {
        let Some(shared) = &self.overrides else {
            return Resolved::AsIs;
        };
        let table = shared.table.load();
        if table.has_lists() {
            let client = handle.resolve_client(req);
            if let Some(listed) = self.listed(&table, req, route, client) {
                return listed;
            }
        }
        if route.is_default_policy() {
            return Resolved::AsIs;
        }
        let extensions = req.extensions();
        Self::resolve_route(&table, route, extensions.get::<Tier>())
    }

    /// What the overrides say about a request answered before its route's guard saw it:
    /// allowed clients (by address) are not counted; a route's override counts it.
    pub(crate) fn resolve_answered(
        &self,
        route: &RouteInfo,
        client: Option<IpAddr>,
        tier: Option<&Tier>,
    ) -> Resolved {
        let Some(shared) = &self.overrides else {
            return Resolved::AsIs;
        };
        let table = shared.table.load();
        if table.allow.matches(client, None, None).is_some() {
            return Resolved::Pass(Unlimited::AllowList);
        }
        if route.is_default_policy() {
            return Resolved::AsIs;
        }
        Self::resolve_route(&table, route, tier)
    }

    fn listed(
        &self,
        table: &Table,
        req: &ServiceRequest,
        route: &RouteInfo,
        client: Option<IpAddr>,
    ) -> Option<Resolved> {
        let reads_keys = table.deny.names_keys() || table.allow.names_keys();
        let reads_users = table.deny.names_users() || table.allow.names_users();
        let api_key = reads_keys.then(|| self.sources.api_key.read(req)).flatten();
        let user_id = reads_users
            .then(|| self.sources.user_id.read(req))
            .flatten();
        let record = |list: &'static str, kind: &'static str| {
            metrics::counter!(
                "ratelimit_listed_total",
                "route" => route.label.clone(),
                "list" => list,
                "kind" => kind,
            )
            .increment(1);
        };
        // Deny first: a client on both lists is refused.
        if let Some(kind) = table
            .deny
            .matches(client, api_key.as_deref(), user_id.as_deref())
        {
            record("deny", kind);
            tracing::debug!(target: "ratelimit", route = %route.label, kind, "refused: on the deny list");
            return Some(Resolved::Deny(answer::denied(route)));
        }
        if let Some(kind) = table
            .allow
            .matches(client, api_key.as_deref(), user_id.as_deref())
        {
            record("allow", kind);
            return Some(Resolved::Pass(Unlimited::AllowList));
        }
        None
    }

    /// The route's override for `tier`, else for every tier; its per-worker route is built
    /// once per change of the overrides, and kept on `route`.
    fn resolve_route(table: &Table, route: &RouteInfo, tier: Option<&Tier>) -> Resolved {
        let Some((overridden, tiered)) = table.route(&route.label, tier.map(Tier::as_str)) else {
            return Resolved::AsIs;
        };
        let policy = match overridden.policy {
            Policy::Exempt { .. } => return Resolved::Pass(Unlimited::Exempt),
            Policy::Limited(policy) => policy,
        };
        let tier = tier.filter(|_| tiered).map(Tier::as_str);
        let mut cache = route.overrides.borrow_mut();
        let cached = cache.iter_mut().find(|(t, _, _)| t.as_deref() == tier);
        if let Some((_, generation, built)) = &cached {
            if *generation == table.generation {
                return Resolved::Route(Rc::clone(built));
            }
        }
        let built = Rc::new(route.overridden(policy, tier));
        match cached {
            Some(entry) => *entry = (tier.map(str::to_owned), table.generation, Rc::clone(&built)),
            None => cache.push((tier.map(str::to_owned), table.generation, Rc::clone(&built))),
        }
        Resolved::Route(built)
    }
}
