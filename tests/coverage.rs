//! The startup coverage check, one small App per detection case.

use actix_web::{get, post, web, App, HttpResponse, Responder};
use ratelimit_runtime::{
    coverage::{self, AppFactory, RouteStatus},
    rate_limit,
};

#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log"
)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 120, window = "1m")]
#[rate_limit(limit = 20, window = "1s", algorithm = "gcra")]
#[get("/orders/{id}")]
async fn get_order() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok()
}

#[get("/forgotten")]
async fn forgotten() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 5, window = "1m")]
#[get("/never-mounted")]
async fn never_mounted() -> impl Responder {
    HttpResponse::Ok()
}

async fn plain() -> HttpResponse {
    HttpResponse::Ok().finish()
}

mod scope_a {
    use actix_web::{get, HttpResponse, Responder};
    use ratelimit_runtime::rate_limit;

    #[rate_limit(limit = 3, window = "10s")]
    #[get("/items")]
    pub async fn list() -> impl Responder {
        HttpResponse::Ok()
    }
}

mod scope_b {
    use actix_web::{get, HttpResponse, Responder};

    /// Same handler name and path as `scope_a::list`, but undeclared.
    #[get("/items")]
    pub async fn list() -> impl Responder {
        HttpResponse::Ok()
    }
}

mod fake_marker {
    use actix_web::{get, guard::GuardContext, HttpResponse, Responder};

    /// A marker guard with no registration behind it, as when the crate holding the
    /// declaration was never linked.
    #[allow(non_snake_case)]
    fn __ratelimit_marker_unlinked(_: &GuardContext<'_>) -> bool {
        true
    }

    #[get("/unlinked", guard = "__ratelimit_marker_unlinked")]
    pub async fn unlinked() -> impl Responder {
        HttpResponse::Ok()
    }
}

fn covered_app() -> App<impl AppFactory> {
    App::new().service(login).service(get_order).service(health)
}

fn uncovered_patterns(error: &coverage::CoverageError) -> Vec<(String, String)> {
    error
        .table
        .uncovered()
        .map(|r| (r.method.clone(), r.pattern.clone()))
        .collect()
}

#[actix_web::test]
async fn a_fully_covered_app_passes_and_lists_its_policies() {
    let table = coverage::require_coverage(covered_app())
        .await
        .expect("covered");
    let rows: Vec<(&str, &str)> = table
        .routes
        .iter()
        .map(|r| (r.method.as_str(), r.pattern.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("GET", "/health"),
            ("POST", "/login"),
            ("GET", "/orders/{id}")
        ]
    );
    let text = table.to_text();
    assert!(text.contains("coverage::login"), "{text}");
    assert!(text.contains("10/5m sliding_log"), "{text}");
    assert!(
        text.contains("120/1m sliding_window + 20/1s gcra"),
        "{text}"
    );
    assert!(
        text.contains("exempt: load balancer health check"),
        "{text}"
    );
    assert!(text.contains("ip+username"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&table.to_json()).unwrap();
    let login_row = &json["routes"][1];
    assert_eq!(login_row["method"], "POST");
    assert_eq!(login_row["limits"][0]["limit"], 10);
    assert_eq!(login_row["limits"][0]["window_ms"], 300_000);
    assert_eq!(
        login_row["fail"], "closed",
        "the effective fail mode is listed"
    );
    assert_eq!(json["routes"][2]["fail"], "open");
    assert_eq!(json["routes"][0]["exempt"], "load balancer health check");
}

#[actix_web::test]
async fn declared_handlers_that_are_not_mounted_are_warnings() {
    let table = coverage::require_coverage(covered_app())
        .await
        .expect("covered");
    let warnings = table.warnings().join("\n");
    assert!(warnings.contains("coverage::never_mounted"), "{warnings}");
    assert!(!warnings.contains("coverage::login"), "{warnings}");
}

#[actix_web::test]
async fn an_unannotated_attribute_handler_fails_the_check() {
    let error = coverage::require_coverage(covered_app().service(forgotten))
        .await
        .expect_err("uncovered");
    assert_eq!(
        uncovered_patterns(&error),
        [("GET".into(), "/forgotten".into())]
    );
    let message = error.to_string();
    assert!(
        message.contains("1 route has no rate-limit declaration"),
        "{message}"
    );
    assert!(message.contains("GET /forgotten"), "{message}");
    assert!(
        message.contains("directly above the `#[get]` of `forgotten`"),
        "{message}"
    );
}

#[actix_web::test]
async fn builder_routes_fail_the_check() {
    let app = covered_app()
        .service(web::resource("/built").route(web::get().to(plain)))
        .route("/app-route", web::post().to(plain))
        .route("/any", web::route().to(plain));
    let error = coverage::require_coverage(app)
        .await
        .expect_err("uncovered");
    assert_eq!(
        uncovered_patterns(&error),
        [
            ("*".into(), "/any".into()),
            ("POST".into(), "/app-route".into()),
            ("GET".into(), "/built".into()),
        ]
    );
    assert!(error.to_string().contains("* /any"));
}

#[actix_web::test]
async fn nested_scopes_and_configure_functions_are_seen_with_their_prefixes() {
    fn v1(cfg: &mut web::ServiceConfig) {
        cfg.service(get_order).service(forgotten);
    }
    let app = App::new().service(web::scope("/api").service(web::scope("/v1").configure(v1)));
    let error = coverage::require_coverage(app)
        .await
        .expect_err("uncovered");
    assert_eq!(
        uncovered_patterns(&error),
        [("GET".into(), "/api/v1/forgotten".into())]
    );
    let order = error
        .table
        .routes
        .iter()
        .find(|r| r.pattern == "/api/v1/orders/{id}")
        .expect("the declared route is listed with its full pattern");
    assert!(matches!(order.status, RouteStatus::Declared(d) if d.function() == "get_order"));
}

#[actix_web::test]
async fn two_scopes_reusing_one_handler_name_and_path_are_told_apart() {
    let app = App::new()
        .service(web::scope("/a").service(scope_a::list))
        .service(web::scope("/b").service(scope_b::list));
    let error = coverage::require_coverage(app)
        .await
        .expect_err("uncovered");
    assert_eq!(
        uncovered_patterns(&error),
        [("GET".into(), "/b/items".into())]
    );
}

#[actix_web::test]
async fn one_path_with_a_declared_and_an_undeclared_method() {
    let app = App::new()
        .service(login)
        .service(web::resource("/login").route(web::get().to(plain)));
    let error = coverage::require_coverage(app)
        .await
        .expect_err("uncovered");
    assert_eq!(
        uncovered_patterns(&error),
        [("GET".into(), "/login".into())]
    );
    // The path's pooled name is `login`'s, which declares POST only: the hint does not send
    // the reader to `login` for GET.
    let message = error.to_string();
    assert!(!message.contains("of `login`"), "{message}");
    assert!(
        message.contains("directly above `#[get(\"/login\")]`"),
        "{message}"
    );
}

/// A route of any method is told to name its methods: `#[route("/r")]` alone does not
/// build.
#[actix_web::test]
async fn an_any_method_route_is_told_to_name_its_methods() {
    let app = covered_app().service(web::resource("/any").to(plain));
    let error = coverage::require_coverage(app)
        .await
        .expect_err("uncovered");
    let message = error.to_string();
    assert!(
        message.contains(r#"#[route("/any", method = "GET", method = "POST")]"#)
            && message.contains(r#"#[get("/any")]"#),
        "{message}"
    );
    assert!(!message.contains(r#"#[route("/any")]"#), "{message}");
}

#[actix_web::test]
async fn a_marker_without_a_registered_declaration_is_uncovered() {
    let error = coverage::require_coverage(covered_app().service(fake_marker::unlinked))
        .await
        .expect_err("fail safe");
    assert_eq!(
        uncovered_patterns(&error),
        [("GET".into(), "/unlinked".into())]
    );
    // Two versions of the runtime in one workspace (the handler's crate on one, the App's on
    // the other) do not read as a missing `#[rate_limit]` on a declared handler: the check
    // says what it is.
    let text = error.to_string();
    assert!(
        text.contains("__ratelimit_marker_unlinked")
            && text.contains("another version of ratelimit-runtime"),
        "{text}"
    );
    assert!(!text.contains("add `#[rate_limit("), "{text}");
}

#[actix_web::test]
async fn an_app_with_no_routes_to_show_fails_safe() {
    let error = coverage::require_coverage(App::new())
        .await
        .expect_err("fail safe");
    assert!(error.to_string().contains("found no routes"), "{error}");
}

#[actix_web::test]
#[should_panic(expected = "GET /forgotten")]
async fn the_one_line_assertion_panics_with_the_uncovered_routes() {
    // `unwrap` shows the error's `Debug`, which lists the uncovered routes.
    coverage::require_coverage(covered_app().service(forgotten))
        .await
        .unwrap();
}

#[actix_web::test]
async fn a_handler_defined_inside_a_function_is_matched_to_its_declaration() {
    #[rate_limit(limit = 1, window = "1m")]
    #[get("/inner")]
    async fn inner() -> impl Responder {
        HttpResponse::Ok()
    }
    let table = coverage::require_coverage(App::new().service(inner))
        .await
        .expect("covered");
    assert!(
        matches!(table.routes[0].status, RouteStatus::Declared(d) if d.function() == "inner"),
        "{table}"
    );
}

/// An older login handler nobody removed: same path and method as `login`, no declaration.
#[post("/login")]
async fn old_login() -> impl Responder {
    HttpResponse::Ok()
}

/// actix-web pools what introspection reports per full path, so an undeclared resource with
/// the same pattern and method as a declared one is not a row of its own.
/// What can be told: the first named resource registered there (the name introspection
/// keeps) is not a declared handler. The check says so; it cannot refuse, since a declared
/// handler renamed with `name = ".."` looks the same. (An unnamed builder route registered
/// first leaves no trace at all: introspection keeps the first name it sees.)
#[actix_web::test]
async fn an_undeclared_handler_registered_first_on_a_declared_path_is_a_warning() {
    let shadowed = coverage::route_table(App::new().service(old_login).service(login)).await;
    let warnings = shadowed.warnings().join("\n");
    assert!(
        warnings.contains("POST /login")
            && warnings.contains("`old_login`")
            && warnings.contains("coverage::login"),
        "{warnings}"
    );
    // Declared first: no warning.
    let fine = coverage::route_table(App::new().service(login).service(old_login)).await;
    assert!(
        !fine.warnings().iter().any(|w| w.contains("POST /login")),
        "{:?}",
        fine.warnings()
    );
    let alone = coverage::require_coverage(covered_app())
        .await
        .expect("covered");
    assert!(
        !alone.warnings().iter().any(|w| w.contains("/login")),
        "{:?}",
        alone.warnings()
    );
}

#[rate_limit(limit = 1, window = "1m")]
#[get("/report")]
async fn report_strict() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 1000, window = "1m")]
#[get("/report")]
async fn report_loose() -> impl Responder {
    HttpResponse::Ok()
}

/// Two declarations of one method and path: actix-web sends every request to the first
/// registered, so the other's limit never applies. The check says so, naming both, rather
/// than warning falsely that the second is not mounted.
#[actix_web::test]
async fn a_declaration_shadowed_by_another_of_the_same_route_is_a_warning() {
    let table = coverage::require_coverage(App::new().service(report_strict).service(report_loose))
        .await
        .expect("the route is covered");
    let warnings = table.warnings();
    let about_loose: Vec<_> = warnings
        .iter()
        .filter(|w| w.contains("coverage::report_loose"))
        .collect();
    assert_eq!(about_loose.len(), 1, "{warnings:?}");
    assert!(
        about_loose[0].contains("GET /report")
            && about_loose[0].contains("coverage::report_strict")
            && !about_loose[0].contains("not mounted"),
        "{warnings:?}"
    );
    assert!(
        matches!(table.routes[0].status, RouteStatus::Declared(d) if d.function() == "report_strict"),
        "{table}"
    );
}

mod v1 {
    use actix_web::{get, HttpResponse, Responder};
    use ratelimit_runtime::rate_limit;

    #[rate_limit(limit = 4, window = "1m")]
    #[get("/items")]
    pub async fn list() -> impl Responder {
        HttpResponse::Ok()
    }
}

mod v2 {
    use actix_web::{get, HttpResponse, Responder};
    use ratelimit_runtime::rate_limit;

    // The same text as `v1::list` (a doc comment would be part of it), so the same marker
    // name.
    #[rate_limit(limit = 4, window = "1m")]
    #[get("/items")]
    pub async fn list() -> impl Responder {
        HttpResponse::Ok()
    }
}

/// Copied handlers in two modules (same name, same attribute, same body) share a marker
/// name; the marker guard's module path tells them apart: neither names both routes, and
/// neither is reported as not mounted.
#[actix_web::test]
async fn identical_declarations_in_two_modules_are_told_apart() {
    let app = App::new()
        .service(web::scope("/v1").service(v1::list))
        .service(web::scope("/v2").service(v2::list));
    let table = coverage::require_coverage(app).await.expect("covered");
    let handlers: Vec<_> = table
        .routes
        .iter()
        .map(|r| {
            let d = r.declaration().expect("declared");
            (r.pattern.as_str(), d.module())
        })
        .collect();
    assert_eq!(
        handlers,
        [("/v1/items", "coverage::v1"), ("/v2/items", "coverage::v2")]
    );
    assert!(
        !table.warnings().iter().any(|w| w.contains("coverage::v")),
        "{:?}",
        table.warnings()
    );
}
