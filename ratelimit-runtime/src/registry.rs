//! Every `#[rate_limit]` declaration linked into the program, collected through `inventory`.

use std::fmt;

use actix_web::dev::ServiceRequest;

use crate::policy::{FailMode, Policy};

/// A function that weighs one request of a route (`cost_from = "path::to::fn"`): the units
/// every limit of the route counts for it.
pub type CostFrom = fn(&ServiceRequest) -> u32;

/// One handler's declaration, registered by the `#[rate_limit]` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteDeclaration {
    /// `module_path!()` of the handler.
    pub(crate) module: &'static str,
    /// The handler function's name (also its actix resource name).
    pub(crate) function: &'static str,
    /// Methods of the route attribute, upper-case (`GET`, `POST`, ...).
    pub(crate) methods: &'static [&'static str],
    /// The path as written in the route attribute (relative to any enclosing scope).
    pub(crate) path: &'static str,
    /// The declared policy.
    pub(crate) policy: Policy,
    /// The name of the marker guard the attribute adds to the route, as actix's route
    /// introspection reports it; the coverage check matches routes to declarations by it.
    pub(crate) marker: &'static str,
    /// Where the declaration is written (`file:line`, or the `RateLimiter::declare` call).
    pub(crate) location: &'static str,
    /// Declared in code ([`RateLimiter::declare`](crate::RateLimiter::declare)) rather than
    /// by the attribute: the App-level middleware enforces it, as no guard is there.
    pub(crate) in_code: bool,
    /// The function that weighs each request (`cost_from`), with its path as written.
    pub(crate) cost_from: Option<(CostFrom, &'static str)>,
}

impl RouteDeclaration {
    /// The declaration the attribute writes; not public API (its fields change as the
    /// attribute grows).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn __new(
        module: &'static str,
        function: &'static str,
        methods: &'static [&'static str],
        path: &'static str,
        policy: Policy,
        marker: &'static str,
        location: &'static str,
    ) -> Self {
        RouteDeclaration {
            module,
            function,
            methods,
            path,
            policy,
            marker,
            location,
            in_code: false,
            cost_from: None,
        }
    }

    /// This declaration with `cost_from = "<name>"`: `weigh` weighs each of its requests.
    /// Not public API (the attribute writes it).
    #[doc(hidden)]
    pub const fn __cost_from(mut self, weigh: CostFrom, name: &'static str) -> Self {
        self.cost_from = Some((weigh, name));
        self
    }

    /// The function that weighs each request of this route (`cost_from`), by its path as
    /// written, when the declaration names one.
    pub const fn cost_from(&self) -> Option<&'static str> {
        match self.cost_from {
            Some((_, name)) => Some(name),
            None => None,
        }
    }

    /// A declaration in code of `methods` on the full pattern `path`.
    pub(crate) const fn in_code(
        function: &'static str,
        methods: &'static [&'static str],
        path: &'static str,
        policy: Policy,
        location: &'static str,
    ) -> Self {
        RouteDeclaration {
            module: "RateLimiter::declare",
            function,
            methods,
            path,
            policy,
            marker: "",
            location,
            in_code: true,
            cost_from: None,
        }
    }

    /// Whether the declaration was made in code
    /// ([`RateLimiter::declare`](crate::RateLimiter::declare)) rather than by the attribute;
    /// its [`path`](Self::path) is then the full pattern, and its
    /// [`location`](Self::location) the call.
    pub const fn declared_in_code(&self) -> bool {
        self.in_code
    }

    /// `module_path!()` of the handler.
    pub const fn module(&self) -> &'static str {
        self.module
    }

    /// The handler function's name (also its actix resource name).
    pub const fn function(&self) -> &'static str {
        self.function
    }

    /// Methods of the route attribute, upper-case (`GET`, `POST`, ...).
    pub const fn methods(&self) -> &'static [&'static str] {
        self.methods
    }

    /// The path as written in the route attribute (relative to any enclosing scope).
    pub const fn path(&self) -> &'static str {
        self.path
    }

    /// The declared policy.
    pub const fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The path of the marker guard the attribute adds to the route, as actix's route
    /// introspection reports it; the coverage check matches routes to declarations by it.
    pub const fn marker(&self) -> &'static str {
        self.marker
    }

    /// Where the declaration is written (`file:line`).
    pub const fn location(&self) -> &'static str {
        self.location
    }

    /// `module::function`; `RateLimiter::declare` for a declaration in code.
    pub fn handler(&self) -> String {
        if self.in_code {
            return self.module.to_owned();
        }
        format!("{}::{}", self.module, self.function)
    }

    /// The marker guard's function name, unique to this declaration (the last segment of
    /// [`marker`](Self::marker)).
    pub fn marker_name(&self) -> &'static str {
        self.marker.rsplit("::").next().unwrap_or(self.marker)
    }

    /// The effective failure policy, `None` for an exempt route.
    pub fn fail(&self) -> Option<FailMode> {
        self.policy.limited().map(|p| p.fail())
    }

    /// `GET|HEAD /path`.
    pub fn route(&self) -> String {
        format!("{} {}", self.methods.join("|"), self.path)
    }
}

impl fmt::Display for RouteDeclaration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): ", self.route(), self.handler())?;
        match &self.policy {
            Policy::Limited(policy) => write!(f, "{policy}"),
            Policy::Exempt { reason } => write!(f, "exempt ({reason})"),
        }
    }
}

inventory::collect!(RouteDeclaration);

/// All declarations linked into this program, in no particular order.
///
/// A crate whose declarations are never referenced may not be linked at all
/// (dtolnay/inventory#50); the coverage check treats its routes as undeclared.
pub fn declarations() -> impl Iterator<Item = &'static RouteDeclaration> {
    inventory::iter::<RouteDeclaration>.into_iter()
}
