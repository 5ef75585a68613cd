//! The check itself: the startup form (also the test's), and the route table.

use actix_web::App;

use super::{probe, AppFactory, CoverageError, RouteTable};

/// Enumerates `app`'s routes and matches them to declarations: the route table, or an error
/// listing every uncovered route; [`require_coverage`] without its log lines.
///
/// # Errors
///
/// As [`require_coverage`].
#[deprecated(
    since = "0.2.0",
    note = "use `require_coverage`, the same check with its notes logged"
)]
#[doc(hidden)]
pub async fn check<T: AppFactory>(app: App<T>) -> Result<RouteTable, CoverageError> {
    covered(app).await
}

/// The route table when every route is covered, else the error listing the others.
async fn covered<T: AppFactory>(app: App<T>) -> Result<RouteTable, CoverageError> {
    let table = route_table(app).await;
    if table.uncovered().next().is_some()
        || table.routes.is_empty()
        || !table.limiter_problems.is_empty()
    {
        Err(CoverageError { table })
    } else {
        Ok(table)
    }
}

/// Every route of `app` with its declaration (or none), covered or not: by the attribute,
/// or in code by a [`RateLimiter`](crate::RateLimiter) wrapping `app`
/// ([`RateLimiter::declare`](crate::RateLimiter::declare)).
pub async fn route_table<T: AppFactory>(app: App<T>) -> RouteTable {
    let (tree, checked) = probe::introspection_tree(app).await;
    RouteTable::from_tree_checked(tree.as_ref(), checked)
}

/// The one-line test assertion: panics with the list of uncovered routes.
///
/// # Panics
///
/// When [`require_coverage`] returns an error: every uncovered route is in the message.
#[deprecated(
    since = "0.2.0",
    note = "use `require_coverage(app).await.unwrap()`: its error's `Debug` lists every uncovered route"
)]
#[doc(hidden)]
pub async fn assert_covered<T: AppFactory>(app: App<T>) -> RouteTable {
    match covered(app).await {
        Ok(table) => table,
        Err(error) => panic!("{error}"),
    }
}

/// The coverage check: enumerates `app`'s routes and matches them to declarations. The
/// route table when every route is covered, with the notes and warnings it holds logged
/// (among them, a tier one route names while other routes name a close one, `por` beside
/// `pro`: [`RouteTable::warnings`]);
/// otherwise the error listing every uncovered route, for `main` to print and exit on, and
/// for a test to fail on (`.unwrap()` prints the list).
///
/// Needs an actix runtime (inside `#[actix_web::test]` or `#[actix_web::main]`).
///
/// ```no_run
/// # use actix_web::App;
/// # fn app() -> App<impl ratelimit_runtime::coverage::AppFactory> { App::new() }
/// # async fn run() -> std::process::ExitCode {
/// if let Err(error) = ratelimit_runtime::coverage::require_coverage(app()).await {
///     eprintln!("{error}");
///     eprintln!("refusing to start: every route needs a rate limit or an exemption");
///     return std::process::ExitCode::FAILURE;
/// }
/// # std::process::ExitCode::SUCCESS
/// # }
/// ```
///
/// In a test:
///
/// ```
/// use actix_web::{get, App, HttpResponse};
/// use ratelimit_runtime::{coverage::AppFactory, rate_limit};
///
/// #[rate_limit(limit = 10, window = "1m")]
/// #[get("/orders")]
/// async fn orders() -> HttpResponse {
///     HttpResponse::Ok().finish()
/// }
///
/// fn my_app() -> App<impl AppFactory> {
///     App::new().service(orders)
/// }
///
/// #[actix_web::test]
/// async fn every_route_is_rate_limited() {
///     ratelimit_runtime::coverage::require_coverage(my_app()).await.unwrap();
/// }
/// # actix_web::rt::System::new().block_on(async {
/// #     ratelimit_runtime::coverage::require_coverage(my_app()).await.unwrap();
/// # });
/// ```
///
/// # Errors
///
/// When a route has neither a declaration nor an exemption, or the App has no route at
/// all (an empty registry is never "all fine"), or a limiter wrapping the App refused a
/// setting ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings); a
/// [`RateLimiter::declare`](crate::RateLimiter::declare) with a text the attribute would
/// not compile, or naming no route of the App): the error lists every uncovered route and
/// every such setting.
pub async fn require_coverage<T: AppFactory>(app: App<T>) -> Result<RouteTable, CoverageError> {
    let table = covered(app).await?;
    // A declaration mounted nowhere limits nothing and leaves nothing unlimited: a note, not
    // a warning at every start of each binary sharing a handlers crate.
    for note in table.unmounted_notes() {
        tracing::info!(target: "ratelimit", "{note}");
    }
    for warning in table.first_undeclared.iter().chain(&table.shadowed) {
        tracing::warn!(target: "ratelimit", "{warning}");
    }
    for warning in table.tier_warnings() {
        tracing::warn!(target: "ratelimit", "{warning}");
    }
    Ok(table)
}
