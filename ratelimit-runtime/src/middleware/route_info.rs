//! What the request path knows about one (method, route) ahead of any request: labels,
//! metric labels and header values, built once per route and worker rather than per request.

use std::cell::RefCell;

use actix_web::{
    http::{
        header::{HeaderName, HeaderValue},
        Method,
    },
    web::Bytes,
};

use super::{
    declared_routes::DeclaredRoutes, header_families::HeaderFamilies, telemetry::RouteMetrics,
};
use crate::{
    identity::ClientIdentity,
    key::{KeySecret, RouteKey},
    policy::{Ban, Count, Identity, Limit, Policy, RoutePolicy},
    registry::RouteDeclaration,
};

/// A limited route, ready to answer for.
pub(crate) struct RouteInfo {
    /// The handler's name (or `default`), for the draft headers' policy names.
    name: String,
    /// The method as keys and labels show it.
    pub(crate) method: String,
    /// `METHOD /pattern`, for logs and bodies.
    pub(crate) label: String,
    /// The label as JSON string content (escaped, without quotes).
    pub(crate) label_json: String,
    /// The route's metric keys, labelled with `label`.
    pub(crate) metrics: RouteMetrics,
    /// The matched pattern (`/orders/{id}`), never the raw path.
    pub(crate) pattern: String,
    pub(crate) policy: RoutePolicy,
    /// The policy's limits without their lockouts, when one has a `block`: what the store
    /// counts while the route is in shadow (a would-be refusal must lock nobody out).
    pub(crate) unblocked: Option<Box<[Limit]>>,
    /// When a limit of the policy is a concurrency limit (its requests hold places), the
    /// policy's limits without their concurrency limits, and those without their lockouts
    /// too: what a request answered already counts in (it runs no more), as the route
    /// enforces or in shadow.
    pub(crate) rated: Option<[Box<[Limit]>; 2]>,
    /// Every identity the policy's limits count by, the route's first (usually one).
    pub(crate) identities: Vec<Identity>,
    /// `RateLimit-Policy`, listing every stacked limit.
    pub(crate) policy_header: Option<HeaderValue>,
    /// The quoted draft policy name of each limit (`"login"`, `"get_order.1"`).
    pub(crate) policy_names: Vec<String>,
    /// `X-RateLimit-Limit` of each limit.
    pub(crate) limit_headers: Vec<HeaderValue>,
    /// The last default 429 built, to answer again while its figures hold (an app's own
    /// answer, `RateLimiter::reject_with`, is asked for every time, from this one's parts).
    pub(crate) rejection: RefCell<Option<CachedRejection>>,
    /// Whether this is the App-level default policy rather than a declaration: its keys
    /// then carry [`DEFAULT_POLICY_SEGMENT`].
    default_policy: bool,
    /// What the keys of a declaration that shares its full pattern and method with another
    /// carry after the pattern (`|fn.items_v2`, see `DeclaredRoutes::discriminator`).
    discriminator: Option<String>,
    /// The tier an override of this route is for: its keys carry `|tier.<name>`.
    tier: Option<String>,
    /// This route under the overrides in force, by tier (`None`: every tier), with the
    /// generation of the overrides each was built from (bounded by the tiers overrides name).
    pub(crate) overrides: RefCell<Vec<Overridden>>,
    /// The key prefix and the key stem of this route under it (`rl:{GET:/orders/:id`),
    /// built on first use.
    key_stem: RefCell<Option<(String, String)>>,
    /// The declaration's function that weighs each request (`cost_from`).
    pub(crate) cost_from: Option<crate::registry::CostFrom>,
    /// The limits with the bans first ([`ban_stack`](Self::ban_stack)), as first built, with
    /// the limiter's ban they were built with.
    ban_stack: std::cell::OnceCell<(Option<Ban>, std::rc::Rc<[Limit]>)>,
}

/// A route under an override: for which tier (`None`: every tier), the generation of the
/// overrides it was built from, and the route.
pub(crate) type Overridden = (Option<String>, u64, std::rc::Rc<RouteInfo>);

/// Everything a 429 of one route is made of: equal figures, byte-identical answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RejectionFigures {
    pub(crate) retry_secs: u64,
    /// The binding limit's index, remaining count, reset and effective window in seconds.
    pub(crate) binding: Option<(usize, u32, u64, u64)>,
    pub(crate) families: HeaderFamilies,
    /// The client's `pk`: a cached answer is never another client's.
    pub(crate) partition: Option<crate::key::PartitionKey>,
    /// The limits that refused (bit `i` for limit `i`).
    pub(crate) violated: u8,
}

/// The last 429 a route answered, answered again while its figures hold: a flood repeats
/// the same answer for a second at a time, and building it (a formatted body, five
/// formatted headers) costs more than copying it. The headers are kept as a list and
/// inserted one by one, since a response's header map comes from actix's pool and a cloned
/// map would replace it with a new allocation.
pub(crate) struct CachedRejection {
    pub(crate) figures: RejectionFigures,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Bytes,
}

/// The draft policy name of limit `index` of a route named `name` (stacked limits get a
/// suffix); characters that would break the quoted string become `_`.
pub(crate) fn policy_name(name: &str, index: usize, stacked: bool) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || !c.is_ascii_graphic() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if stacked {
        format!("{clean}.{index}")
    } else {
        clean
    }
}

/// What the default policy's keys carry after the route (`rl:{GET:/feed|default|ip:…}`):
/// where the default policy applies to a path that also has a declared route (a custom
/// guard shares it, or another resource shadows it), the two must count in buckets of their
/// own and never share a flood-shield entry. A pattern cannot produce it (`|` in a pattern
/// is hashed), and identity parts are `kind:value`.
pub(crate) const DEFAULT_POLICY_SEGMENT: &str = "|default";

/// A method as undeclared routes are counted and labelled: the standard methods by name,
/// any other token as `OTHER`, since a client may send any number of made-up methods (each
/// would otherwise get a fresh budget and a fresh metrics series).
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        // The safe QUERY method (draft-ietf-httpbis-safe-method-w-body) has no constant.
        ref other if other.as_str() == "QUERY" => "QUERY",
        _ => "OTHER",
    }
}

/// Describes the limiter's metrics, and registers at zero the counters alerts watch of every
/// limited route in `declared` (an App's declared routes, once they are known), labelled as
/// their requests will be: the series exist before anything is counted in them.
pub(crate) fn register_series(declared: &DeclaredRoutes) {
    super::telemetry::describe_metrics();
    for (method, pattern, declaration) in declared.limited_routes() {
        let (Ok(method), Policy::Limited(policy)) =
            (Method::from_bytes(method.as_bytes()), declaration.policy)
        else {
            continue;
        };
        let route = RouteInfo::declared(
            declaration,
            &method,
            Some(pattern.to_owned()),
            policy,
            Some(declared),
        );
        route.metrics.register_at_zero();
    }
}

impl RouteInfo {
    /// `name` is the handler name (or `default`) used in the draft headers.
    pub(crate) fn new(name: &str, method: &str, pattern: String, policy: RoutePolicy) -> Self {
        let label = format!("{method} {pattern}");
        let quoted = serde_json::to_string(&label).unwrap_or_else(|_| "\"\"".to_owned());
        let label_json = quoted[1..quoted.len() - 1].to_owned();
        let limits = policy.limits();
        let stacked = limits.len() > 1;
        // A shared budget goes by its own name on every route that names it.
        let policy_names: Vec<String> = limits
            .iter()
            .enumerate()
            .map(|(i, limit)| match limit.budget() {
                Some(budget) => format!("\"{}\"", policy_name(budget, 0, false)),
                None => format!("\"{}\"", policy_name(name, i, stacked)),
            })
            .collect();
        let policy_header = limits
            .iter()
            .zip(&policy_names)
            .map(|(l, n)| {
                // A concurrency limit counts requests in flight, over no window.
                if l.is_concurrency() {
                    format!("{n};q={};qu=\"concurrent-requests\"", l.max())
                } else {
                    format!("{n};q={};w={}", l.max(), l.window().as_secs_ceil())
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        RouteInfo {
            name: name.to_owned(),
            method: method.to_owned(),
            metrics: RouteMetrics::new(&label, name, limits, policy.fail()),
            label_json,
            label,
            pattern,
            identities: policy.identities(),
            unblocked: limits
                .iter()
                .any(|l| l.block().is_some())
                .then(|| limits.iter().map(|l| l.without_block()).collect()),
            rated: limits.iter().any(Limit::is_concurrency).then(|| {
                let rated = limits.iter().filter(|l| !l.is_concurrency());
                [
                    rated.clone().copied().collect(),
                    rated.map(|l| l.without_block()).collect(),
                ]
            }),
            policy,
            policy_header: HeaderValue::from_str(&policy_header).ok(),
            policy_names,
            limit_headers: limits.iter().map(|l| HeaderValue::from(l.max())).collect(),
            rejection: RefCell::default(),
            default_policy: false,
            discriminator: None,
            tier: None,
            overrides: RefCell::default(),
            key_stem: RefCell::default(),
            cost_from: None,
            ban_stack: std::cell::OnceCell::new(),
        }
    }

    /// The declared route as a request with `method` reached it: under its full `pattern`,
    /// else the declared path; `declared`, the App's declared routes, tells it apart from
    /// another declaration there.
    pub(crate) fn declared(
        declaration: &'static RouteDeclaration,
        method: &Method,
        pattern: Option<String>,
        policy: RoutePolicy,
        declared: Option<&DeclaredRoutes>,
    ) -> Self {
        let pattern = pattern.unwrap_or_else(|| declaration.path.to_owned());
        let discriminator =
            declared.and_then(|routes| routes.discriminator(declaration, method, &pattern));
        let mut route = RouteInfo::new(declaration.function, method.as_str(), pattern, policy);
        // Same-named handlers declaring one path (one per module) count in keys told apart by
        // a hash of their marker; their metrics are told apart the same way, by a `policy`
        // label of their own.
        if let Some(hash) = discriminator
            .as_deref()
            .and_then(|d| d.strip_prefix("fn."))
            .filter(|d| *d != declaration.function)
        {
            let policy_label = format!("{}.{hash}", declaration.function);
            route.metrics = RouteMetrics::new(
                &route.label,
                &policy_label,
                route.policy.limits(),
                route.policy.fail(),
            );
        }
        route.discriminator = discriminator;
        route.cost_from = declaration.cost_from.map(|(weigh, _)| weigh);
        route
    }

    /// The App-level default policy on `method` and `pattern`.
    pub(crate) fn default_policy(method: &str, pattern: String, policy: RoutePolicy) -> Self {
        RouteInfo {
            default_policy: true,
            ..RouteInfo::new("default", method, pattern, policy)
        }
    }

    /// This route under another policy (an override), for requests of `tier` when the
    /// override is that tier's: keyed as this route, the tier's in keys of their own.
    pub(crate) fn overridden(&self, policy: RoutePolicy, tier: Option<&str>) -> Self {
        let mut route = RouteInfo::new(&self.name, &self.method, self.pattern.clone(), policy);
        route.metrics = RouteMetrics::new(
            &route.label,
            &self.metrics.policy,
            policy.limits(),
            policy.fail(),
        );
        route.default_policy = self.default_policy;
        route.discriminator = self.discriminator.clone();
        route.cost_from = self.cost_from;
        route.tier = tier.map(str::to_owned);
        // An override may make the route fail `local`: its switches exist from here on.
        route.metrics.register_at_zero();
        route
    }

    /// Whether a limit of the policy is a concurrency limit: its requests hold places.
    pub(crate) fn holds_places(&self) -> bool {
        self.rated.is_some()
    }

    /// What a request of the route is checked with when a ban covers it: the route's own
    /// ban, then `limiter`'s, then the route's limits (bans count failures on a route that
    /// counts failures only); `None` when no ban covers it. Built once per limiter ban.
    pub(crate) fn ban_stack(&self, limiter: Option<Ban>) -> Option<std::rc::Rc<[Limit]>> {
        if self.policy.ban().is_none() && limiter.is_none() {
            return None;
        }
        if let Some((built_for, stack)) = self.ban_stack.get() {
            if *built_for == limiter {
                return Some(std::rc::Rc::clone(stack));
            }
        }
        let limits = self.policy.limits();
        let count = if limits.iter().any(|l| l.count() == Count::Failures) {
            Count::Failures
        } else {
            Count::Requests
        };
        let stack: std::rc::Rc<[Limit]> = self
            .policy
            .ban()
            .map(|ban| ban.limit(count))
            .into_iter()
            .chain(limiter.map(|ban| ban.limiter_limit(count)))
            .chain(limits.iter().copied())
            .collect();
        let _ = self.ban_stack.set((limiter, std::rc::Rc::clone(&stack)));
        Some(stack)
    }

    /// Whether this is the App-level default policy rather than a declaration.
    pub(crate) fn is_default_policy(&self) -> bool {
        self.default_policy
    }

    /// The key of `identity` on this route, under `prefix`, personal values hashed under
    /// `secret` when there is one.
    pub(crate) fn key(
        &self,
        prefix: &str,
        secret: Option<&KeySecret>,
        identity: &ClientIdentity,
    ) -> RouteKey {
        let mut cached = self.key_stem.borrow_mut();
        let stem = match &*cached {
            Some((cached_prefix, stem)) if cached_prefix == prefix => stem,
            _ => {
                let mut stem = RouteKey::route_stem(prefix, &self.method, &self.pattern);
                if self.default_policy {
                    stem.push_str(DEFAULT_POLICY_SEGMENT);
                }
                if let Some(discriminator) = &self.discriminator {
                    stem.push('|');
                    stem.push_str(discriminator);
                }
                if let Some(tier) = &self.tier {
                    stem.push_str("|tier.");
                    stem.push_str(tier);
                }
                &cached.insert((prefix.to_owned(), stem)).1
            }
        };
        RouteKey::from_stem(stem, secret, identity.value_parts())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Algorithm, FailMode, Identity, IdentityPart, Limit, Window};

    #[test]
    fn a_route_builds_the_same_keys_as_the_key_scheme_under_any_prefix() {
        const LIMITS: &[Limit] = &[Limit::new(5, Window::from_secs(60), Algorithm::Gcra)];
        let policy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
        let route = RouteInfo::new("get_order", "GET", "/orders/{id}".to_owned(), policy);
        let client = |ip: &str| ClientIdentity {
            parts: vec![(IdentityPart::Ip, ip.to_owned())],
            fell_back_from: None,
        };
        // The stem is kept per prefix: switching prefixes, and back, changes the key.
        for (prefix, ip) in [
            ("rl", "203.0.113.7"),
            ("app2", "203.0.113.8"),
            ("rl", "::1"),
        ] {
            let identity = client(ip);
            assert_eq!(
                route.key(prefix, None, &identity),
                RouteKey::for_client(prefix, "GET", "/orders/{id}", &identity)
            );
        }
        assert_eq!(
            route.key("rl", None, &client("203.0.113.7")).as_str(),
            "rl:{GET:/orders/:id|ip:203.0.113.7}"
        );
    }

    #[test]
    fn the_default_policy_counts_apart_from_a_declaration_on_the_same_path() {
        const LIMITS: &[Limit] = &[Limit::new(
            120,
            Window::from_secs(60),
            Algorithm::SlidingWindow,
        )];
        let policy = RoutePolicy::new(LIMITS, Identity::UserIdElseIp, FailMode::Open, false);
        let declared = RouteInfo::new("feed", "GET", "/feed".to_owned(), policy);
        let default = RouteInfo::default_policy("GET", "/feed".to_owned(), policy);
        let identity = ClientIdentity {
            parts: vec![(IdentityPart::Ip, "203.0.113.7".to_owned())],
            fell_back_from: None,
        };
        let default_key = default.key("rl", None, &identity);
        assert_eq!(
            default_key.as_str(),
            "rl:{GET:/feed|default|ip:203.0.113.7}"
        );
        assert_ne!(default_key, declared.key("rl", None, &identity));
        // Still one hash tag: every key of the check in one Cluster slot.
        assert_eq!(default_key.hash_tag(), "GET:/feed|default|ip:203.0.113.7");
    }
}
