//! The check itself: route table, test assertion and startup form.

use actix_web::App;

use super::{probe, AppFactory, CoverageError, RouteTable};

/// Enumerates `app`'s routes and matches them to declarations: the route table, or an error
/// listing every uncovered route.
///
/// Needs an actix runtime (inside `#[actix_web::test]` or `#[actix_web::main]`).
///
/// # Errors
///
/// When a route has neither a declaration nor an exemption, or the App has no route at
/// all (an empty registry is never "all fine"), or a limiter inside the App has a bad
/// setting ([`RateLimiter::declare`](crate::RateLimiter::declare) with a text the attribute
/// would not compile, or naming no route of the App): the error lists every uncovered route
/// and every such setting.
pub async fn check<T: AppFactory>(app: App<T>) -> Result<RouteTable, CoverageError> {
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
/// When [`check`] returns an error: every uncovered route is in the message.
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
///     ratelimit_runtime::coverage::assert_covered(my_app()).await;
/// }
/// # actix_web::rt::System::new().block_on(async {
/// #     ratelimit_runtime::coverage::assert_covered(my_app()).await;
/// # });
/// ```
pub async fn assert_covered<T: AppFactory>(app: App<T>) -> RouteTable {
    match check(app).await {
        Ok(table) => table,
        Err(error) => panic!("{error}"),
    }
}

/// The startup form: the route table when every route is covered, with the notes and
/// warnings it holds logged; otherwise the error, for `main` to print and exit on.
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
/// # Errors
///
/// As [`check`]: the error lists every uncovered route.
pub async fn require_coverage<T: AppFactory>(app: App<T>) -> Result<RouteTable, CoverageError> {
    let table = check(app).await?;
    // A declaration mounted nowhere limits nothing and leaves nothing unlimited: a note, not
    // a warning at every start of each binary sharing a handlers crate.
    for note in table.unmounted_notes() {
        tracing::info!(target: "ratelimit", "{note}");
    }
    for warning in table.first_undeclared.iter().chain(&table.shadowed) {
        tracing::warn!(target: "ratelimit", "{warning}");
    }
    Ok(table)
}
