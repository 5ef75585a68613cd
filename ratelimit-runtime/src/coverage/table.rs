//! The route table: every (method, full pattern) of an App with its declaration, printable
//! as aligned text and as JSON.

use std::fmt;

use actix_web::introspection::{IntrospectionNode, IntrospectionTree, ResourceType};

use crate::{
    middleware::declared_routes::{has_custom_guard, marker_of, scope_guard, Markers},
    overrides::{Overridden, Overrides, Source},
    policy::{Count, Policy, RoutePolicy},
    registry::{self, RouteDeclaration},
};

/// Whether a route is covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteStatus {
    /// A declaration (limits or an exemption) covers the route.
    Declared(&'static RouteDeclaration),
    /// No declaration covers the route.
    Uncovered,
}

/// One route of the App.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRow {
    /// `GET`, `POST`, ... or `*` for a route with no method guard (any method).
    pub method: String,
    /// The full pattern, scope prefixes included.
    pub pattern: String,
    /// The actix resource name (the handler name for attribute routes), when there is one.
    pub resource: Option<String>,
    /// The declaration covering it, if any.
    pub status: RouteStatus,
    /// A custom guard (or a possibly shadowed resource) shares the path, so a request cannot
    /// be told to reach the declared resource before routing: the default policy applies to
    /// the path as well.
    pub shared_path: bool,
    /// An uncovered route's `#[rate_limit]` marker whose declaration is not in this program's
    /// registry: its crate was built against another copy of ratelimit-runtime (two versions
    /// in the dependency tree), or its registration was not linked.
    pub unlinked_marker: Option<String>,
    /// The override in force for every tier, when one is ([`RouteTable::with_overrides`]).
    pub overridden: Option<Overridden>,
    /// The overrides in force for one tier each (the text and JSON forms also list the
    /// tiers the declaration gives limits of its own).
    pub tier_overrides: Vec<(String, Overridden)>,
}

impl RouteRow {
    /// `METHOD /pattern`, as overrides and `RateLimiter::reset` name the route.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.pattern)
    }

    /// The policy in force: the override's, else the declaration's.
    pub fn policy(&self) -> Option<Policy> {
        match &self.overridden {
            Some(overridden) => Some(overridden.policy),
            None => self.declaration().map(|d| d.policy),
        }
    }

    /// Where the policy in force comes from (`None` for an uncovered route).
    pub fn source(&self) -> Option<Source> {
        match &self.overridden {
            Some(overridden) => Some(overridden.source),
            None => self.declaration().map(|d| {
                if d.declared_in_code() {
                    Source::Code
                } else {
                    Source::Declared
                }
            }),
        }
    }

    /// Each tier with limits of its own on the route, with its policy in force: the tier's
    /// override, else its declared limits (declared tiers first, in declaration order).
    fn tiers_in_force(&self) -> Vec<TierInForce<'_>> {
        let declared = self.declaration().and_then(|d| {
            let source = if d.declared_in_code() {
                Source::Code
            } else {
                Source::Declared
            };
            Some((d.policy.limited()?, source))
        });
        let mut tiers: Vec<TierInForce<'_>> = Vec::new();
        if let Some((policy, source)) = declared {
            for tier in policy.tiers() {
                let overridden = self.tier_overrides.iter().find(|(t, _)| t == tier.name());
                tiers.push(match overridden {
                    Some((name, o)) => TierInForce::overridden(name, o),
                    None => TierInForce {
                        name: tier.name(),
                        policy: Policy::Limited(policy.tier(tier.name()).unwrap_or(*policy)),
                        source,
                        text: None,
                    },
                });
            }
        }
        let mut others: Vec<&(String, Overridden)> = self
            .tier_overrides
            .iter()
            .filter(|(name, _)| !tiers.iter().any(|t| t.name == name))
            .collect();
        others.sort_by(|a, b| a.0.cmp(&b.0));
        tiers.extend(
            others
                .into_iter()
                .map(|(name, o)| TierInForce::overridden(name, o)),
        );
        tiers
    }

    /// The declaration, when covered.
    pub fn declaration(&self) -> Option<&'static RouteDeclaration> {
        match self.status {
            RouteStatus::Declared(d) => Some(d),
            RouteStatus::Uncovered => None,
        }
    }

    /// How to declare this route in code.
    fn in_code_hint(&self) -> String {
        format!(
            "declare it on the limiter, `RateLimiter::declare(\"{} {}\", r#\"limit = .., window = \"..\"\"#)`, and check the App with that limiter inside",
            self.method, self.pattern
        )
    }

    /// What to add to cover this route.
    pub fn hint(&self) -> String {
        if let Some(marker) = &self.unlinked_marker {
            return format!(
                "its handler carries a `#[rate_limit]` (`{marker}`), but that declaration is not in this program's registry: the handler's crate was built against another version of ratelimit-runtime than the App's (`cargo tree -d -i ratelimit-runtime` lists both; give every crate one version), or its registration was not linked"
            );
        }
        if self.method == "*" {
            // A route of any method: `#[route]` needs its methods named (actix-web refuses
            // one without), and each method named is counted as its own route.
            let (pattern, named) = (&self.pattern, self.resource.as_deref());
            let whose = named.map_or(String::new(), |name| format!(" (`{name}`)"));
            return format!(
                "it answers any method{whose}; serve it from an attribute handler that names its methods, with `#[rate_limit(..)]` (or `#[rate_limit(exempt = \"<reason>\")]`) directly above `#[get(\"{pattern}\")]`, `#[post(\"{pattern}\")]`, … or `#[route(\"{pattern}\", method = \"GET\", method = \"POST\")]`"
            );
        }
        let attribute = self.method.to_ascii_lowercase();
        match &self.resource {
            Some(name) => format!(
                "add `#[rate_limit(limit = .., window = \"..\")]` (or `#[rate_limit(exempt = \"<reason>\")]`) directly above the `#[{attribute}]` of `{name}`; for a builder route (`web::resource`, `App::route`, `web::route`), {}",
                self.in_code_hint()
            ),
            None => format!(
                "serve it from an attribute handler with `#[rate_limit(..)]` directly above `#[{attribute}(\"{}\")]`, or with `#[rate_limit(exempt = \"<reason>\")]`; or {}",
                self.pattern,
                self.in_code_hint()
            ),
        }
    }
}

/// One tier's policy in force on a route, as the table shows it.
struct TierInForce<'a> {
    name: &'a str,
    policy: Policy,
    source: Source,
    /// The override as written; `None` for declared limits.
    text: Option<&'a str>,
}

impl<'a> TierInForce<'a> {
    fn overridden(name: &'a str, overridden: &'a Overridden) -> Self {
        TierInForce {
            name,
            policy: overridden.policy,
            source: overridden.source,
            text: Some(&overridden.text),
        }
    }
}

/// Every route of one App and the declarations that are mounted nowhere.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    /// The routes, sorted by pattern then method.
    pub routes: Vec<RouteRow>,
    /// Declarations in the registry that this App does not mount.
    pub unmounted: Vec<&'static RouteDeclaration>,
    /// Declared paths whose first registered resource carries no declaration: another
    /// resource with the same pattern may take the declared route's requests (see
    /// [`RouteTable::warnings`]).
    pub first_undeclared: Vec<String>,
    /// Declarations of a method and path that another declaration, registered before at the
    /// same path, also serves: actix-web sends every request to the first, so their limits
    /// never apply (see [`RouteTable::warnings`]).
    pub shadowed: Vec<String>,
    /// Bad settings of the limiters inside the App, each naming its setting (a
    /// [`RateLimiter::declare`](crate::RateLimiter::declare) whose text the attribute would
    /// not compile, or naming no route of the App): the check fails on them, and the
    /// limiter refuses to start.
    pub limiter_problems: Vec<String>,
}

impl RouteTable {
    /// Builds the table from an App's introspection tree (`None`: no routes could be read).
    pub fn from_tree(tree: Option<&IntrospectionTree>) -> Self {
        let markers = Markers::linked();
        let mut table = RouteTable::default();
        let mut mounted = Vec::new();
        if let Some(tree) = tree {
            collect(
                &tree.root,
                &markers,
                false,
                &mut Found {
                    rows: &mut table.routes,
                    mounted: &mut mounted,
                    first_undeclared: &mut table.first_undeclared,
                    shadowed: &mut table.shadowed,
                },
            );
        }
        table
            .routes
            .sort_by(|a, b| (&a.pattern, &a.method).cmp(&(&b.pattern, &b.method)));
        let mut unmounted: Vec<_> = registry::declarations()
            .filter(|d| !mounted.iter().any(|m| std::ptr::eq(*m, *d)))
            .collect();
        unmounted.sort_by_key(|d| (d.module, d.function));
        table.unmounted = unmounted;
        table
    }

    /// The table with the declarations in code and the problems the coverage check found in
    /// the limiters inside the App.
    pub(crate) fn from_tree_checked(
        tree: Option<&IntrospectionTree>,
        checked: crate::middleware::declared_routes::Checked,
    ) -> Self {
        let mut table = RouteTable::from_tree(tree);
        for row in &mut table.routes {
            if row.status != RouteStatus::Uncovered {
                continue;
            }
            let declared = checked.in_code.iter().find(|(pattern, d)| {
                *pattern == row.pattern && d.methods.iter().any(|m| *m == row.method)
            });
            if let Some((_, declaration)) = declared {
                row.status = RouteStatus::Declared(declaration);
            }
        }
        table.limiter_problems = checked.problems;
        table
    }

    /// The table with the overrides `overrides` holds in force on each route: checked
    /// against these routes (as the App's limiter checks them on its first request), and
    /// published for the admin command when they come from Redis.
    pub fn with_overrides(mut self, overrides: &Overrides) -> Self {
        let catalog = self
            .routes
            .iter()
            .filter_map(|row| Some((row.label(), row.declaration()?)))
            .collect();
        overrides.set_routes(catalog);
        let in_force = overrides.in_force();
        for row in &mut self.routes {
            let label = row.label();
            for (selector, overridden) in in_force.iter().filter(|(s, _)| s.route == label) {
                match &selector.tier {
                    None => row.overridden = Some(overridden.clone()),
                    Some(tier) => row.tier_overrides.push((tier.clone(), overridden.clone())),
                }
            }
            // A declared stack with no override of its own still counts a shared budget
            // under the budget's override.
            let Some(declared) = row.declaration().and_then(|d| d.policy.limited().copied()) else {
                continue;
            };
            if row.overridden.is_none() {
                row.overridden = overrides.budgets_on(declared);
            }
            for tier in declared.tiers() {
                let listed = row.tier_overrides.iter().any(|(t, _)| t == tier.name());
                let stack = declared.tier(tier.name());
                if let Some(overridden) = stack
                    .filter(|_| !listed)
                    .and_then(|s| overrides.budgets_on(s))
                {
                    row.tier_overrides
                        .push((tier.name().to_owned(), overridden));
                }
            }
        }
        self
    }

    /// The routes without a declaration.
    pub fn uncovered(&self) -> impl Iterator<Item = &RouteRow> {
        self.routes
            .iter()
            .filter(|r| r.status == RouteStatus::Uncovered)
    }

    /// One warning per declaration that no route mounts, per declared path whose first
    /// registered resource carries no declaration, per declaration another one at the
    /// same method and path shadows, and per tier that looks misspelled (see
    /// [`require_coverage`](super::require_coverage)).
    pub fn warnings(&self) -> Vec<String> {
        self.unmounted_notes()
            .chain(self.first_undeclared.iter().cloned())
            .chain(self.shadowed.iter().cloned())
            .chain(self.tier_warnings())
            .collect()
    }

    /// One line per tier that only one route names while a close name is named by other
    /// routes (`por` beside `pro`): a tier written wrong in one attribute gives no request
    /// those limits, as no request carries it. Which tiers requests carry is the app's to
    /// know, so the check warns and does not refuse.
    pub(crate) fn tier_warnings(&self) -> Vec<String> {
        // Each tier with the routes naming it, each route once (a route of two methods is
        // one declaration).
        let mut named: std::collections::BTreeMap<&str, Vec<&'static RouteDeclaration>> =
            std::collections::BTreeMap::new();
        for declaration in self.routes.iter().filter_map(RouteRow::declaration) {
            for tier in declaration.policy.limited().map_or(&[][..], |p| p.tiers()) {
                let routes = named.entry(tier.name()).or_default();
                if !routes.iter().any(|d| std::ptr::eq(*d, declaration)) {
                    routes.push(declaration);
                }
            }
        }
        let mut warnings = Vec::new();
        for (tier, routes) in &named {
            let [declaration] = routes.as_slice() else {
                continue;
            };
            let others: Vec<&str> = named.keys().copied().filter(|t| t != tier).collect();
            let Some(near) = ratelimit_grammar::suggest::closest(tier, &others) else {
                continue;
            };
            let near_routes = named[near].len();
            // Two tiers named once each, close to each other: one warning for the pair.
            if near_routes == 1 && near < *tier {
                continue;
            }
            warnings.push(format!(
                "tier `{tier}` is named by `{}` ({}) alone, and `{near}` by {near_routes} other route{}: did you mean `{near}`? Requests of tier `{near}` get the route's default limits there",
                declaration.handler(),
                declaration.location,
                if near_routes == 1 { "" } else { "s" },
            ));
        }
        warnings
    }

    /// One line per declaration that no route of this App mounts (a handlers crate shared by
    /// several binaries declares the others' routes too): no route of this App goes unlimited
    /// for it, so [`require_coverage`](super::require_coverage) logs these at `info`.
    pub fn unmounted_notes(&self) -> impl Iterator<Item = String> + '_ {
        self.unmounted.iter().map(|d| {
            format!(
                "`{}` declares a rate limit for `{}` ({}) but is not mounted in this App",
                d.handler(),
                d.route(),
                d.location
            )
        })
    }

    /// The table as aligned text: method, pattern, handler, policy, identity, fail mode.
    pub fn to_text(&self) -> String {
        let header = [
            "METHOD", "PATTERN", "HANDLER", "POLICY", "IDENTITY", "FAIL", "SOURCE", "NOTE",
        ];
        let rows: Vec<[String; 8]> = self.routes.iter().map(row_cells).collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[&str]| {
            let mut text = String::new();
            for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
                if i + 1 == cells.len() {
                    text.push_str(cell);
                } else {
                    text.push_str(&format!("{cell:<width$}  "));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&header);
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(&cells);
        }
        out
    }

    /// The table as JSON: an array of routes, each with its limits or exemption.
    pub fn to_json(&self) -> String {
        let routes: Vec<serde_json::Value> = self.routes.iter().map(row_json).collect();
        let unmounted: Vec<String> = self.unmounted.iter().map(|d| d.handler()).collect();
        serde_json::to_string_pretty(&serde_json::json!({
            "routes": routes,
            "unmounted": unmounted,
        }))
        .expect("json values serialize")
    }
}

impl fmt::Display for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// What [`collect`] finds in the tree.
struct Found<'a> {
    rows: &'a mut Vec<RouteRow>,
    /// Every declaration whose marker some resource carries.
    mounted: &'a mut Vec<&'static RouteDeclaration>,
    first_undeclared: &'a mut Vec<String>,
    shadowed: &'a mut Vec<String>,
}

fn collect(
    node: &IntrospectionNode,
    markers: &Markers,
    guarded_above: bool,
    found: &mut Found<'_>,
) {
    if matches!(node.kind, ResourceType::Resource) {
        let shared_path = guarded_above || node.potentially_unreachable || has_custom_guard(node);
        let declared: Vec<&'static RouteDeclaration> = node
            .guards
            .iter()
            .filter_map(|g| marker_of(g).and_then(|m| markers.get(m)))
            .collect();
        // actix-web reports one entry per full path, pooling the methods and guards of every
        // resource registered there, and keeps the first name it sees: when that is not a
        // declared handler, an undeclared handler registered before the declared one may
        // take its requests, which the pooled entry cannot show. A declared handler renamed
        // with `name = ".."` reads the same, so this is a warning, not a refusal; an unnamed
        // builder route registered first leaves no trace at all.
        let first_declared = node
            .resource_name
            .as_deref()
            .is_some_and(|name| declared.iter().any(|d| d.function == name));
        found.mounted.extend(declared.iter().copied());
        if !first_declared {
            for d in &declared {
                found.first_undeclared.push(format!(
                    "{} {}: the first resource registered at this path ({}) is not `{}`, which declares its limit; if it answers {}, it takes those requests and only the default policy limits them: register `{}` first, or remove the other resource",
                    d.methods.join("|"),
                    node.full_path,
                    node.resource_name
                        .as_deref()
                        .map_or_else(|| "an unnamed resource".to_owned(), |name| format!("`{name}`")),
                    d.handler(),
                    d.methods.join("/"),
                    d.function,
                ));
            }
        }
        let methods: Vec<String> = if node.methods.is_empty() {
            vec!["*".to_owned()]
        } else {
            node.methods.iter().map(|m| m.as_str().to_owned()).collect()
        };
        for method in methods {
            // actix-web reports guards in the order their resources were registered, and
            // routes a request to the first resource whose guards pass: without custom
            // guards, the first declaration of a method is the one that serves it.
            let mut serving = declared
                .iter()
                .filter(|d| d.methods.iter().any(|m| *m == method));
            let first = serving.next();
            if !shared_path {
                if let Some(first) = first {
                    for other in serving {
                        found.shadowed.push(format!(
                            "`{}` declares a rate limit for `{method} {}` ({}), but `{}`, registered before it at this path, declares that route too and serves all its requests: `{}`'s limit never applies; remove one of the two",
                            other.handler(),
                            node.full_path,
                            other.location,
                            first.handler(),
                            other.function,
                        ));
                    }
                }
            }
            let status = first.map_or(RouteStatus::Uncovered, |d| RouteStatus::Declared(d));
            // A marker the registry does not know: declared with another copy of the runtime
            // (two versions in one workspace), which must not read as a missing declaration.
            let unlinked_marker = (status == RouteStatus::Uncovered)
                .then(|| {
                    node.guards
                        .iter()
                        .filter_map(|g| marker_of(g))
                        .find(|m| markers.get(m).is_none())
                        .map(str::to_owned)
                })
                .flatten();
            // The pooled entry's name is the first resource's at this path: for a method
            // that resource's declaration does not take, it names another handler, so the
            // row names none rather than send the reader to the wrong function.
            let resource = node.resource_name.clone().filter(|name| {
                !declared
                    .iter()
                    .any(|d| d.function == name && !d.methods.iter().any(|m| *m == method))
            });
            found.rows.push(RouteRow {
                method,
                pattern: node.full_path.clone(),
                resource,
                status,
                shared_path,
                unlinked_marker,
                overridden: None,
                tier_overrides: Vec::new(),
            });
        }
    }
    for child in &node.children {
        collect(child, markers, guarded_above || scope_guard(node), found);
    }
}

/// Limits as the table shows them: `10/5m sliding_log failures block 15m cost 2 by username +
/// ...`, then `wait 2s` on a route whose requests wait for their turn, `ban 20 in 10m for 1h`
/// on a route with a ban.
fn limits_cell(p: &RoutePolicy) -> String {
    let limits = p
        .limits()
        .iter()
        .map(|l| {
            if l.is_concurrency() {
                let mut cell = format!("{} in flight, lease {}", l.max(), l.window());
                if let Some(identity) = l.identity() {
                    cell.push_str(&format!(" by {identity}"));
                }
                return cell;
            }
            let mut cell = format!("{}/{} {}", l.max(), l.window(), l.algorithm());
            if let Some(budget) = l.budget() {
                cell = format!("budget {budget} {cell}");
            }
            if l.count() == Count::Failures {
                cell.push_str(" failures");
            }
            if let Some(block) = l.block() {
                cell.push_str(&format!(" block {block}"));
            }
            if l.cost() != 1 {
                cell.push_str(&format!(" cost {}", l.cost()));
            }
            if let Some(identity) = l.identity() {
                cell.push_str(&format!(" by {identity}"));
            }
            cell
        })
        .collect::<Vec<_>>()
        .join(" + ");
    let limits = match p.wait() {
        Some(wait) => format!(
            "{limits} wait {}",
            crate::policy::Window::from_millis(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
        ),
        None => limits,
    };
    let limits = match p.ban() {
        Some(ban) => format!("{limits} ban {ban}"),
        None => limits,
    };
    match p.sync() {
        Some(sync) => format!(
            "{limits} sync {}",
            crate::policy::Window::from_millis(u64::try_from(sync.as_millis()).unwrap_or(u64::MAX))
        ),
        None => limits,
    }
}

fn row_cells(row: &RouteRow) -> [String; 8] {
    let declared = row.declaration();
    let (handler, policy, identity, fail, note) = match declared.zip(row.policy()) {
        None => (
            row.resource.clone().unwrap_or_else(|| "-".to_owned()),
            "-".to_owned(),
            "-".to_owned(),
            "-".to_owned(),
            if row.unlinked_marker.is_some() {
                "UNCOVERED (declared with another ratelimit-runtime)".to_owned()
            } else {
                "UNCOVERED".to_owned()
            },
        ),
        Some((d, policy)) => match policy {
            Policy::Exempt { reason } => (
                d.handler(),
                "exempt".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                format!("exempt: {reason}"),
            ),
            Policy::Limited(p) => (
                d.handler(),
                match d.cost_from() {
                    Some(weigh) => format!("{} cost from {weigh}", limits_cell(&p)),
                    None => limits_cell(&p),
                },
                p.identity().to_string(),
                p.fail().to_string(),
                if p.shadow() {
                    "shadow".to_owned()
                } else {
                    String::new()
                },
            ),
        },
    };
    let mut note = note;
    let route_identity = row.policy().and_then(|p| Some(p.limited()?.identity()));
    for tier in row.tiers_in_force() {
        let cell = match &tier.policy {
            Policy::Limited(p) if Some(p.identity()) != route_identity => {
                format!("{} by {}", limits_cell(p), p.identity())
            }
            Policy::Limited(p) => limits_cell(p),
            Policy::Exempt { .. } => "exempt".to_owned(),
        };
        let separator = if note.is_empty() { "" } else { "; " };
        note.push_str(&format!(
            "{separator}tier {}: {cell} ({})",
            tier.name,
            tier.source.as_str()
        ));
    }
    let note = if row.shared_path && row.declaration().is_some() {
        let extra = "custom guard on the path: the default policy applies too";
        if note.is_empty() {
            extra.to_owned()
        } else {
            format!("{note}; {extra}")
        }
    } else {
        note
    };
    [
        row.method.clone(),
        row.pattern.clone(),
        handler,
        policy,
        identity,
        fail,
        row.source().map_or("-", Source::as_str).to_owned(),
        note,
    ]
}

fn row_json(row: &RouteRow) -> serde_json::Value {
    let mut value = serde_json::json!({
        "method": row.method,
        "pattern": row.pattern,
    });
    let Some(d) = row.declaration() else {
        value["handler"] = serde_json::json!(row.resource);
        value["covered"] = serde_json::json!(false);
        return value;
    };
    value["covered"] = serde_json::json!(true);
    value["handler"] = serde_json::json!(d.handler());
    value["source"] = serde_json::json!(row.source().map(Source::as_str));
    value["cost_from"] = serde_json::json!(d.cost_from());
    let tiers = row.tiers_in_force();
    if !tiers.is_empty() {
        value["tiers"] = tiers
            .iter()
            .map(|tier| {
                let text = tier.text.map_or_else(
                    || crate::overrides::declaration_text(&tier.policy),
                    str::to_owned,
                );
                let mut entry = serde_json::json!({
                    "policy": text,
                    "source": tier.source.as_str(),
                });
                policy_json(&tier.policy, &mut entry);
                (tier.name.to_owned(), entry)
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    policy_json(&row.policy().unwrap_or(d.policy), &mut value);
    value
}

/// A policy's exemption, or its limits, identity, fail mode and shadow flag, into `value`.
fn policy_json(policy: &Policy, value: &mut serde_json::Value) {
    match policy {
        Policy::Exempt { reason } => value["exempt"] = serde_json::json!(reason),
        Policy::Limited(p) => {
            value["limits"] = p
                .limits()
                .iter()
                .map(|l| {
                    serde_json::json!({
                        "limit": l.max(),
                        "window": l.window().to_string(),
                        "window_ms": l.window().as_millis(),
                        "algorithm": l.algorithm().as_str(),
                        "count": l.count().as_str(),
                        "block_ms": l.block().map(|b| b.as_millis()),
                        "cost": l.cost(),
                        "budget": l.budget(),
                        "concurrency": l.is_concurrency(),
                        "identity": p.identity_of(l).to_string(),
                    })
                })
                .collect();
            value["identity"] = serde_json::json!(p.identity().to_string());
            value["fail"] = serde_json::json!(p.fail().as_str());
            value["shadow"] = serde_json::json!(p.shadow());
            value["wait_ms"] = serde_json::json!(p.wait().map(|w| w.as_millis() as u64));
            value["ban"] = serde_json::json!(p.ban().map(|b| serde_json::json!({
                "times": b.times(),
                "within_ms": b.within().as_millis(),
                "for_ms": b.duration().as_millis(),
            })));
            value["sync_ms"] = serde_json::json!(p.sync().map(|s| s.as_millis() as u64));
        }
    }
}

/// The App has routes without a declaration (or no routes could be read at all).
///
/// Its `Debug` is its `Display` (every uncovered route, then the table), so that a test's
/// `.unwrap()` and a `main` returning `Result` print the list, not the structure.
#[derive(Clone)]
pub struct CoverageError {
    /// The whole table, covered routes included.
    pub table: RouteTable,
}

impl fmt::Display for CoverageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problems = &self.table.limiter_problems;
        if !problems.is_empty() {
            let noun = if problems.len() == 1 {
                "setting is"
            } else {
                "settings are"
            };
            writeln!(f, "{} rate-limiter {noun} wrong:", problems.len())?;
            for problem in problems {
                writeln!(f, "  {problem}")?;
            }
            if self.table.uncovered().next().is_none() && !self.table.routes.is_empty() {
                writeln!(f)?;
                return write!(f, "{}", self.table.to_text());
            }
        }
        if self.table.routes.is_empty() {
            return f.write_str("rate-limit coverage check found no routes: the App's route introspection was empty or unavailable, so nothing can be shown to be limited");
        }
        let uncovered: Vec<&RouteRow> = self.table.uncovered().collect();
        let count = uncovered.len();
        let noun = if count == 1 {
            "route has"
        } else {
            "routes have"
        };
        writeln!(f, "{count} {noun} no rate-limit declaration:")?;
        for row in &uncovered {
            writeln!(f, "  {} {}: {}", row.method, row.pattern, row.hint())?;
        }
        writeln!(f)?;
        write!(f, "{}", self.table.to_text())
    }
}

impl fmt::Debug for CoverageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for CoverageError {}
