//! Budgets shared by routes: one limit, declared once with `budget!`, counted in one key per
//! client across every route that names it.

use super::{Identity, Limit};

/// A budget shared by every route that names it: "10,000 requests a day per API key across
/// the API". Declared once with [`budget!`](crate::budget) and named by handlers with
/// `#[rate_limit(budget = NAME)]`; each client's requests on all those routes count in one
/// key, `<prefix>:{budget:NAME|<identity>}:<algorithm><window>`, beside the routes' own
/// limits (all-or-nothing with them).
///
/// ```
/// use actix_web::{get, HttpResponse, Responder};
/// use ratelimit_runtime::{budget, rate_limit};
///
/// budget!(pub API = limit = 10000, window = "1d", identity = "api_key");
///
/// #[rate_limit(budget = API)]
/// #[rate_limit(limit = 10, window = "1s", identity = "api_key", algorithm = "gcra")]
/// #[get("/api/orders")]
/// async fn orders() -> impl Responder {
///     HttpResponse::Ok()
/// }
///
/// // An export weighs 50 units of the same daily budget.
/// #[rate_limit(budget = API, cost = 50)]
/// #[get("/api/export")]
/// async fn export() -> impl Responder {
///     HttpResponse::Ok()
/// }
///
/// assert_eq!(API.name(), "API");
/// assert_eq!(API.limit().max(), 10000);
/// # let _ = actix_web::App::new().service(orders).service(export);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedBudget {
    name: &'static str,
    module: &'static str,
    location: &'static str,
    limit: Limit,
}

inventory::collect!(SharedBudget);

impl SharedBudget {
    /// The budget `name` (the constant `budget!` declares), counting `limit` by `identity`.
    /// Not public API: `budget!` writes it.
    #[doc(hidden)]
    pub const fn __declare(
        name: &'static str,
        module: &'static str,
        location: &'static str,
        limit: Limit,
        identity: Identity,
    ) -> Self {
        SharedBudget {
            name,
            module,
            location,
            limit: limit.identified_by(identity).in_budget(name),
        }
    }

    /// Its name, as declared (`API`): in keys, headers, logs and the route table.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The limit it is, counted by its own identity: what a route naming it stacks.
    pub const fn limit(&self) -> Limit {
        self.limit
    }

    /// `module_path!()` where it is declared.
    pub const fn module(&self) -> &'static str {
        self.module
    }

    /// `file:line` where it is declared.
    pub const fn location(&self) -> &'static str {
        self.location
    }
}

/// Every shared budget linked into the program, in no particular order.
pub fn shared_budgets() -> impl Iterator<Item = &'static SharedBudget> {
    inventory::iter::<SharedBudget>.into_iter()
}

/// One line for each name two shared budgets of the program share: their keys would mix
/// their counts.
pub(crate) fn duplicate_names() -> Vec<String> {
    let mut all: Vec<&SharedBudget> = shared_budgets().collect();
    all.sort_by_key(|b| (b.name, b.module, b.location));
    let mut problems = Vec::new();
    for pair in all.windows(2) {
        if pair[0].name == pair[1].name {
            problems.push(format!(
                "two shared budgets are named `{}` (`{}::{}` at {} and `{}::{}` at {}): they would count in one key; give each its own name",
                pair[0].name,
                pair[0].module,
                pair[0].name,
                pair[0].location,
                pair[1].module,
                pair[1].name,
                pair[1].location,
            ));
        }
    }
    problems
}
