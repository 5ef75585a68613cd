//! The startup coverage check: an App whose routes are not all covered by a `#[rate_limit]`
//! declaration (or an explicit `exempt`) does not start, and the same check is one line in a
//! test suite.
//!
//! It enumerates the App's real routes with actix-web's `experimental-introspection` feature
//! (every method and full pattern after scopes and `configure` functions are applied) and
//! matches each to its declaration through the marker guard the attribute adds to the route,
//! so two scopes reusing one handler name or one path are told apart.
//!
//! What it cannot see, and what happens then:
//! - the default service (requests no route matches): it is not a route; at run time
//!   `RateLimiter` applies the default policy to those requests;
//! - methods checked inside a custom guard: the route is listed as `*` (any method) and,
//!   having no declaration, fails the check;
//! - actix aggregates introspection per full path, so a route without a method guard that
//!   shares its exact path with method-guarded routes is not listed on its own; at run time
//!   it gets the default policy unless a declaration covers its method.
//!
//! It fails safe: a route whose declaration is not in the registry (for example, a crate
//! that is never named in source and so never linked, dtolnay/inventory#50) is uncovered.

mod app_factory;
mod probe;
mod table;

pub use app_factory::AppFactory;
pub use table::{CoverageError, RouteRow, RouteStatus, RouteTable};

use actix_web::App;

/// Enumerates `app`'s routes and matches them to declarations: the route table, or an error
/// listing every uncovered route.
///
/// Needs an actix runtime (inside `#[actix_web::test]` or `#[actix_web::main]`).
pub async fn check<T: AppFactory>(app: App<T>) -> Result<RouteTable, CoverageError> {
    let table = route_table(app).await;
    if table.uncovered().next().is_some() || table.routes.is_empty() {
        Err(CoverageError { table })
    } else {
        Ok(table)
    }
}

/// Every route of `app` with its declaration (or none), covered or not.
pub async fn route_table<T: AppFactory>(app: App<T>) -> RouteTable {
    let tree = probe::introspection_tree(app).await;
    RouteTable::from_tree(tree.as_ref())
}

/// The one-line test assertion: panics with the list of uncovered routes.
///
/// ```ignore
/// #[actix_web::test]
/// async fn every_route_is_rate_limited() {
///     ratelimit_runtime::coverage::assert_covered(my_app()).await;
/// }
/// ```
pub async fn assert_covered<T: AppFactory>(app: App<T>) -> RouteTable {
    match check(app).await {
        Ok(table) => table,
        Err(error) => panic!("{error}"),
    }
}

/// The startup form: returns the route table when every route is covered; otherwise prints
/// the uncovered routes and the table to standard error and exits with status 1.
pub async fn require_coverage<T: AppFactory>(app: App<T>) -> RouteTable {
    match check(app).await {
        Ok(table) => {
            for warning in table.warnings() {
                tracing::warn!(target: "ratelimit", "{warning}");
            }
            table
        }
        Err(error) => {
            eprintln!("{error}");
            eprintln!("refusing to start: every route needs a rate limit or an exemption");
            std::process::exit(1);
        }
    }
}
