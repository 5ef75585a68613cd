//! Which (method, full pattern) pairs of an App carry a `#[rate_limit]` declaration, read from
//! actix-web's route introspection and the marker guard the attribute adds to each route.

use std::{
    cell::RefCell,
    collections::HashMap,
    sync::{Arc, OnceLock},
};

use actix_web::{
    dev::ResourceDef,
    http::Method,
    introspection::{IntrospectionNode, IntrospectionTree, ResourceType},
};

use super::rollout_state::Rollout;
use crate::registry::{self, RouteDeclaration};

/// A declaration found on a mounted route.
#[derive(Debug, Clone)]
pub struct MountedDeclaration {
    /// The full pattern, scope prefixes included (`/api/orders/{id}`).
    pub full_path: String,
    /// The declaration.
    pub declaration: &'static RouteDeclaration,
}

/// Where the coverage check's build of an App, on this thread, collects the limiters in it:
/// where each one's view of the App's routes goes, and its rollout (declarations in code).
type Checking = Vec<(Arc<OnceLock<Arc<DeclaredRoutes>>>, Rollout)>;

thread_local! {
    static CHECKING: RefCell<Option<Checking>> = const { RefCell::new(None) };
}

/// The coverage check starts building an App on this thread: the limiters built meanwhile
/// ([`limiter_built`]) are given its routes by [`checking_ends`].
pub(crate) fn checking_begins() {
    CHECKING.with(|checking| *checking.borrow_mut() = Some(Vec::new()));
}

/// A limiter's service was built: inside the App being checked, if one is, it records
/// `slot`, where that App's routes go, and `rollout`, and says so (`true`).
pub(crate) fn limiter_built(slot: &Arc<OnceLock<Arc<DeclaredRoutes>>>, rollout: &Rollout) -> bool {
    CHECKING.with(|checking| match checking.borrow_mut().as_mut() {
        Some(built) => {
            built.push((Arc::clone(slot), rollout.clone()));
            true
        }
        None => false,
    })
}

/// What the coverage check learned from the limiters inside the App it checked.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Declarations in code mounted in the App, by full pattern.
    pub(crate) in_code: Vec<(String, &'static RouteDeclaration)>,
    /// The limiters' problems, each naming its setting: the check fails on them.
    pub(crate) problems: Vec<String>,
}

/// The coverage check read `tree` off the App it built: each limiter built inside it learns
/// the App's declared routes (the first App checked with it, if several are), and records the
/// problems its declarations in code have against them, which refuse its startup later.
pub(crate) fn checking_ends(tree: Option<&IntrospectionTree>) -> Checked {
    let built = CHECKING.with(|checking| checking.borrow_mut().take());
    let mut checked = Checked::default();
    let Some(built) = built else {
        return checked;
    };
    for (slot, rollout) in built {
        let Some(tree) = tree else {
            checked.problems.extend(rollout.problems());
            continue;
        };
        let (routes, mut problems) = DeclaredRoutes::from_tree_with(tree, &rollout.declared);
        problems.extend(unknown_cost_routes(&routes, &rollout.costs));
        rollout.found(&problems);
        checked.problems.extend(rollout.problems());
        for (pattern, declaration) in routes.in_code() {
            if !checked
                .in_code
                .iter()
                .any(|(_, d)| std::ptr::eq(*d, declaration))
            {
                checked.in_code.push((pattern.to_owned(), declaration));
            }
        }
        let _ = slot.set(Arc::new(routes));
    }
    checked.problems.dedup();
    checked
}

/// The declared routes of one App.
#[derive(Debug, Clone, Default)]
pub struct DeclaredRoutes {
    by_path: HashMap<String, Vec<&'static RouteDeclaration>, foldhash::fast::RandomState>,
    /// The declared full patterns, to match a path against.
    patterns: Vec<(ResourceDef, String)>,
    /// The methods the resources at each full path answer (from their method guards);
    /// `None`: any method.
    served: HashMap<String, Option<Vec<Method>>>,
    /// Every declaration mounted at each full path, those behind custom guards included.
    all_at: HashMap<String, Vec<&'static RouteDeclaration>>,
}

impl DeclaredRoutes {
    /// Reads the declarations off an App's introspection tree.
    pub fn from_tree(tree: &IntrospectionTree) -> Self {
        let mut routes = DeclaredRoutes::default();
        for mounted in mounted_declarations(tree) {
            let declarations = routes
                .by_path
                .entry(mounted.full_path)
                .or_insert_with_key(|path| {
                    routes
                        .patterns
                        .push((ResourceDef::new(path.as_str()), path.clone()));
                    Vec::new()
                });
            declarations.push(mounted.declaration);
        }
        collect_served(&tree.root, &mut routes.served);
        let markers = Markers::linked();
        collect_all(&tree.root, &markers, &mut routes.all_at);
        routes
    }

    /// What tells `declaration`'s keys apart from those of another declaration mounted at
    /// the same full pattern with a method in common (two routes the router tells apart by
    /// a guard: a custom guard, or scopes for virtual hosts), which would otherwise count in
    /// the same keys: its handler's name (`fn.items_v2`), hashed when that name is not unique
    /// among them. `None` for a declaration alone there, whose keys carry no such segment.
    pub fn discriminator(
        &self,
        declaration: &'static RouteDeclaration,
        method: &Method,
        full_path: &str,
    ) -> Option<String> {
        let takes = |d: &RouteDeclaration| {
            d.methods.is_empty() || d.methods.iter().any(|m| *m == method.as_str())
        };
        let others: Vec<_> = self
            .all_at
            .get(full_path)?
            .iter()
            .filter(|other| !std::ptr::eq(**other, declaration) && takes(other))
            .collect();
        if others.is_empty() {
            return None;
        }
        // Same-named handlers (in two modules) by a hash of their module path and name,
        // which editing a handler's body does not change (a hash of the marker, made from
        // the handler's text, would be one for two identical handlers, which would then
        // share their keys, and would change with every edit of either). The marker only
        // where that is one too (handlers defined in function bodies of one module).
        let handler = declaration.handler();
        Some(
            if others
                .iter()
                .all(|other| other.function != declaration.function)
            {
                format!("fn.{}", declaration.function)
            } else if others.iter().all(|other| other.handler() != handler) {
                format!("fn.{}", crate::key::short_hash(&handler))
            } else {
                format!("fn.{}", crate::key::short_hash(declaration.marker_name()))
            },
        )
    }

    /// The declared route a request with `method` to `path` reaches when the first pattern
    /// the path matches, `first`, has no resource answering `method`: actix's router passes
    /// over resources whose method guards refuse a request and tries the next pattern, so
    /// the first pattern alone (`HttpRequest::match_pattern`) does not name the route. Its
    /// full pattern and declaration; none when `first` answers `method` or no declared
    /// pattern takes the request.
    pub fn past<'a>(
        &'a self,
        method: &Method,
        first: &str,
        path: &str,
    ) -> Option<(&'a str, &'static RouteDeclaration)> {
        let answers = match self.served.get(first) {
            Some(Some(methods)) => methods.contains(method),
            // Any method, or nothing known: the first pattern's resource takes it.
            Some(None) | None => true,
        };
        if answers {
            return None;
        }
        self.patterns
            .iter()
            .filter(|(def, pattern)| pattern != first && def.is_match(path))
            .find_map(|(_, pattern)| Some((pattern.as_str(), self.declaration(method, pattern)?)))
    }

    /// The App's declared routes with `in_code`, the limiter's declarations in code, added
    /// where the App serves them; a problem for each that names no route of it (or a route
    /// an attribute declares).
    pub(crate) fn from_tree_with(
        tree: &IntrospectionTree,
        in_code: &[&'static RouteDeclaration],
    ) -> (Self, Vec<String>) {
        let mut routes = DeclaredRoutes::from_tree(tree);
        let (mounted, problems) = mount_in_code(tree, in_code);
        for (pattern, declaration) in mounted {
            let declarations = routes.by_path.entry(pattern).or_insert_with_key(|path| {
                routes
                    .patterns
                    .push((ResourceDef::new(path.as_str()), path.clone()));
                Vec::new()
            });
            declarations.push(declaration);
        }
        (routes, problems)
    }

    /// The declarations in code among these routes, with their full patterns.
    pub(crate) fn in_code(&self) -> impl Iterator<Item = (&str, &'static RouteDeclaration)> {
        self.by_path.iter().flat_map(|(path, declarations)| {
            declarations
                .iter()
                .filter(|d| d.declared_in_code())
                .map(move |d| (path.as_str(), *d))
        })
    }

    /// Every declaration mounted at the full pattern `pattern`, those behind custom guards
    /// included.
    pub fn declarations_at(&self, pattern: &str) -> &[&'static RouteDeclaration] {
        self.all_at.get(pattern).map_or(&[], Vec::as_slice)
    }

    /// The full patterns `declaration` is mounted at in this App.
    pub(crate) fn mounted_at(&self, declaration: &'static RouteDeclaration) -> Vec<&str> {
        self.all_at
            .iter()
            .filter(|(_, declarations)| declarations.iter().any(|d| std::ptr::eq(*d, declaration)))
            .map(|(pattern, _)| pattern.as_str())
            .collect()
    }

    /// Every declared route by label (`POST /api/login`), for overrides to name.
    pub(crate) fn catalog(&self) -> crate::overrides::Catalog {
        self.by_path
            .iter()
            .flat_map(|(path, declarations)| {
                declarations
                    .iter()
                    .flat_map(move |d| d.methods.iter().map(move |m| (format!("{m} {path}"), *d)))
            })
            .collect()
    }

    /// Every limited route the declarations name, as `(method, full pattern, declaration)`:
    /// one per method a declaration names (a declaration naming none takes any method, and
    /// is left out: its routes are known by the requests that reach them).
    pub(crate) fn limited_routes(
        &self,
    ) -> impl Iterator<Item = (&str, &str, &'static RouteDeclaration)> + '_ {
        self.by_path.iter().flat_map(|(path, declarations)| {
            declarations
                .iter()
                .filter(|d| matches!(d.policy, crate::policy::Policy::Limited(_)))
                .flat_map(move |d| d.methods.iter().map(move |m| (*m, path.as_str(), *d)))
        })
    }

    /// The declaration that covers `method` on `pattern`.
    pub fn declaration(&self, method: &Method, pattern: &str) -> Option<&'static RouteDeclaration> {
        self.by_path
            .get(pattern)?
            .iter()
            .copied()
            .find(|d| d.methods.is_empty() || d.methods.iter().any(|m| *m == method.as_str()))
    }
}

/// The methods of every resource node's full path: merged across nodes, `None` when one of
/// them has no method guard.
fn collect_served(node: &IntrospectionNode, served: &mut HashMap<String, Option<Vec<Method>>>) {
    if matches!(node.kind, ResourceType::Resource) {
        let methods = (!node.methods.is_empty()).then(|| node.methods.clone());
        match (served.get_mut(&node.full_path), methods) {
            (Some(Some(known)), Some(more)) => known.extend(more),
            (Some(known), _) => *known = None,
            (None, methods) => {
                served.insert(node.full_path.clone(), methods);
            }
        }
    }
    for child in &node.children {
        collect_served(child, served);
    }
}

/// Every declaration linked into the program, found by the marker guard actix's
/// introspection names.
pub(crate) struct Markers(HashMap<&'static str, Vec<&'static RouteDeclaration>>);

impl Markers {
    pub(crate) fn linked() -> Self {
        let mut by_name: HashMap<_, Vec<_>> = HashMap::new();
        for d in registry::declarations() {
            by_name.entry(d.marker_name()).or_default().push(d);
        }
        Markers(by_name)
    }

    /// The declaration of the marker guard named `guard` (a marker path, [`marker_of`]).
    /// Identical declarations of handlers with one name in two modules share a marker name
    /// (it is made from the handler's name and text); the guard's path, which starts with
    /// its module, tells them apart, so neither names the other's route.
    pub(crate) fn get(&self, guard: &str) -> Option<&'static RouteDeclaration> {
        let named = self.0.get(marker_name(guard))?;
        if let [only] = named.as_slice() {
            return Some(*only);
        }
        named
            .iter()
            .filter(|d| {
                guard
                    .strip_prefix(d.module)
                    .is_some_and(|rest| rest.starts_with("::"))
            })
            .max_by_key(|d| d.module.len())
            .copied()
    }
}

/// Every declaration whose marker guards a node, by the node's full path.
fn collect_all(
    node: &IntrospectionNode,
    markers: &Markers,
    all_at: &mut HashMap<String, Vec<&'static RouteDeclaration>>,
) {
    for guard in &node.guards {
        if let Some(declaration) = marker_of(guard).and_then(|m| markers.get(m)) {
            let at = all_at.entry(node.full_path.clone()).or_default();
            if !at.iter().any(|d| std::ptr::eq(*d, declaration)) {
                at.push(declaration);
            }
        }
    }
    for child in &node.children {
        collect_all(child, markers, all_at);
    }
}

/// Every declaration mounted in the tree, with the full path it is mounted at.
pub fn mounted_declarations(tree: &IntrospectionTree) -> Vec<MountedDeclaration> {
    let markers = Markers::linked();
    let mut found = Vec::new();
    walk(&tree.root, &markers, false, &mut found);
    found
}

fn walk(
    node: &IntrospectionNode,
    markers: &Markers,
    guarded_above: bool,
    found: &mut Vec<MountedDeclaration>,
) {
    // Where a custom guard decides between resources on one path (on the resource, or on a
    // scope above it: virtual hosts), or actix reports a resource there as possibly
    // shadowed, the path alone does not say which resource serves a request: none of its
    // declarations counts, so the App-level middleware applies the default policy there
    // too (twice limited is the safe side of unlimited).
    let ambiguous = guarded_above || has_custom_guard(node) || node.potentially_unreachable;
    for guard in node.guards.iter().filter(|_| !ambiguous) {
        if let Some(declaration) = marker_of(guard).and_then(|m| markers.get(m)) {
            let already = found
                .iter()
                .any(|f| f.full_path == node.full_path && std::ptr::eq(f.declaration, declaration));
            if !already {
                found.push(MountedDeclaration {
                    full_path: node.full_path.clone(),
                    declaration,
                });
            }
        }
    }
    for child in &node.children {
        walk(child, markers, guarded_above || scope_guard(node), found);
    }
}

/// Whether a guard other than a method guard or a declaration's marker decides at `node`.
pub(crate) fn has_custom_guard(node: &IntrospectionNode) -> bool {
    node.guards.iter().any(|g| !is_benign(g, &node.methods))
}

/// Whether `node` is a scope with a custom guard, which decides for every route under it.
/// (actix's introspection files a scope without a path prefix, `web::scope("")`, under `/`
/// rather than above its routes, so its guard is not seen here.)
pub(crate) fn scope_guard(node: &IntrospectionNode) -> bool {
    !matches!(node.kind, ResourceType::Resource) && has_custom_guard(node)
}

/// The last path segment of a marker path: the marker function's unique name. A handler
/// defined inside a function body has extra segments (`app::main::__ratelimit_marker_…`)
/// that its declaration's `module_path!()` does not show.
pub(crate) fn marker_name(path: &str) -> &str {
    path.rsplit("::").next().unwrap_or(path)
}

/// Whether a guard only selects methods (`methods`: those the node's method guards
/// select) or marks a declaration.
fn is_benign(guard_name: &str, methods: &[Method]) -> bool {
    // actix names a method guard after its method (`GET`); a custom guard may be named
    // like one (`ADMIN`), but only a method guard adds its method to the node's methods.
    let method = |name: &str| methods.iter().any(|m| m.as_str() == name);
    if marker_of(guard_name).is_some() || method(guard_name) {
        return true;
    }
    guard_name
        .strip_prefix("AnyGuard(")
        .and_then(|rest| rest.strip_suffix(')'))
        .is_some_and(|list| list.split(", ").all(method))
}

/// The marker path inside a guard name: actix names a function guard
/// `actix_web::guard::FnGuard<my_app::__ratelimit_marker_login>`.
pub(crate) fn marker_of(guard_name: &str) -> Option<&str> {
    let inner = guard_name
        .strip_suffix('>')
        .and_then(|rest| rest.split_once('<'))
        .map_or(guard_name, |(_, inner)| inner);
    inner
        .rsplit("::")
        .next()
        .is_some_and(|last| last.starts_with("__ratelimit_marker_"))
        .then_some(inner)
}

/// The declarations in code mounted in the App `tree` describes, by full pattern, and a
/// problem for each that names no route of it, a route an attribute declares already, or a
/// pattern and method more than one resource (or a custom guard) shares.
fn mount_in_code(
    tree: &IntrospectionTree,
    declared: &[&'static RouteDeclaration],
) -> (Vec<(String, &'static RouteDeclaration)>, Vec<String>) {
    let mut resources = Vec::new();
    collect_resources(&tree.root, &mut resources);
    let attributes = mounted_declarations(tree);
    let mut mounted = Vec::new();
    let mut problems = Vec::new();
    for declaration in declared {
        let method = declaration.methods[0];
        let pattern = declaration.path;
        let setting = declaration.location;
        let at: Vec<&&IntrospectionNode> = resources
            .iter()
            .filter(|node| node.full_path == pattern)
            .collect();
        if at.is_empty() {
            let patterns: Vec<&str> = resources.iter().map(|n| n.full_path.as_str()).collect();
            let hint = ratelimit_grammar::suggest::did_you_mean(pattern, &patterns);
            problems.push(format!(
                "`{setting}`: the App serves no route `{pattern}`; name it as `METHOD /full/pattern`, with its scope's prefix{hint}"
            ));
            continue;
        }
        let methods: Vec<&str> = at
            .iter()
            .flat_map(|node| node.methods.iter().map(|m| m.as_str()))
            .collect();
        if !methods.contains(&method) {
            let served = if methods.is_empty() {
                "any method (no method guard): route it with `web::get()`, `web::post()`, … so it has one".to_owned()
            } else {
                format!("`{}`", methods.join("`, `"))
            };
            problems.push(format!(
                "`{setting}`: `{pattern}` is not served with `{method}`; it answers {served}"
            ));
            continue;
        }
        // The middleware finds a request's declaration by its pattern alone: where a custom
        // guard picks between resources, or several serve the method, the declaration would
        // limit (or exempt) every one of them.
        let serving: Vec<&&&IntrospectionNode> = at
            .iter()
            .filter(|node| node.methods.is_empty() || node.methods.iter().any(|m| m == method))
            .collect();
        if serving.len() > 1 || serving.iter().any(|node| has_custom_guard(node)) {
            problems.push(format!(
                "`{setting}`: `{method} {pattern}` is served by {} behind a custom guard (a host, a header); a declaration in code names a pattern and a method only, so it would apply to each: give each handler its own `#[rate_limit]`, or its own pattern",
                if serving.len() > 1 { "more than one resource, or one" } else { "a resource" }
            ));
            continue;
        }
        let by_attribute = attributes
            .iter()
            .find(|m| m.full_path == pattern && m.declaration.methods.contains(&method));
        if let Some(by_attribute) = by_attribute {
            problems.push(format!(
                "`{setting}`: `{method} {pattern}` carries `#[rate_limit]` on `{}` already; remove one of the two",
                by_attribute.declaration.handler()
            ));
            continue;
        }
        mounted.push((pattern.to_owned(), *declaration));
    }
    (mounted, problems)
}

fn collect_resources<'a>(node: &'a IntrospectionNode, found: &mut Vec<&'a IntrospectionNode>) {
    if matches!(node.kind, ResourceType::Resource) {
        found.push(node);
    }
    for child in &node.children {
        collect_resources(child, found);
    }
}

/// A problem for each route `costs` names that `routes` does not declare.
pub(crate) fn unknown_cost_routes(
    routes: &DeclaredRoutes,
    costs: &[(String, super::rollout_state::CostFn)],
) -> Vec<String> {
    if costs.is_empty() {
        return Vec::new();
    }
    let catalog = routes.catalog();
    let labels: Vec<&str> = catalog.keys().map(String::as_str).collect();
    costs
        .iter()
        .filter(|(label, _)| !catalog.contains_key(label))
        .map(|(label, _)| {
            format!(
                "`RateLimiter::cost_of({label:?}, ..)`: the App declares no route `{label}`; name a declared route as the route table shows it{}",
                ratelimit_grammar::suggest::did_you_mean_any_case(label, &labels)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_guards_and_markers_are_benign_other_guards_are_not() {
        let methods = [Method::GET, Method::POST];
        let benign = |name: &str| is_benign(name, &methods);
        assert!(benign("GET"));
        assert!(benign("AnyGuard(GET, POST)"));
        assert!(benign(
            "actix_web::guard::FnGuard<app::__ratelimit_marker_login>"
        ));
        assert!(!benign("actix_web::guard::FnGuard<app::is_v2>"));
        assert!(!benign("actix_web::guard::Header"));
        assert!(!benign("AnyGuard(GET, app::Custom)"));
        // A custom guard named like a method is not one.
        assert!(!benign("ADMIN"));
        assert!(!benign("AnyGuard(GET, ADMIN)"));
        assert!(!is_benign("GET", &[]));
    }

    #[test]
    fn marker_names_are_read_from_function_guards() {
        assert_eq!(
            marker_of("actix_web::guard::FnGuard<app::__ratelimit_marker_login>"),
            Some("app::__ratelimit_marker_login")
        );
        assert_eq!(
            marker_of("app::__ratelimit_marker_login"),
            Some("app::__ratelimit_marker_login")
        );
        assert_eq!(marker_of("actix_web::guard::Header"), None);
    }
}
