//! The startup coverage check: for an App whose routes are not all covered by a
//! `#[rate_limit]` declaration (or an explicit `exempt`), [`require_coverage`] returns an
//! error listing every uncovered route, for `main` to print and exit on; the same check is
//! one line in a test suite (`require_coverage(app).await.unwrap()`). [`route_table`] lists
//! every route, covered or not, for a tool that prints the table.
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
mod check;
mod probe;
mod table;

pub use app_factory::AppFactory;
#[allow(deprecated)]
pub use check::{assert_covered, check, require_coverage, route_table};
pub use table::{CoverageError, RouteRow, RouteStatus, RouteTable};
