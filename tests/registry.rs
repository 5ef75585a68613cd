//! The registry holds exactly the declared records, with the right method, path and typed
//! policy.

use actix_web::{delete, get, head, patch, post, put, route, HttpResponse, Responder};
use ratelimit_runtime::{
    rate_limit, registry, Algorithm, FailMode, Identity, IdentityPart, Policy, RouteDeclaration,
};

#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "ip+username",
    algorithm = "sliding_log",
    fail = "closed"
)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 20, window = "1s", algorithm = "gcra")]
#[rate_limit(limit = 120, window = "1m")]
#[get("/orders/{id}")]
async fn get_order() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(exempt = "load balancer health check")]
#[get("/health")]
async fn health() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 5,
    window = "1h30m",
    identity = "header:X-Tenant-Id",
    shadow = true
)]
#[route("/tenants", method = "GET", method = "POST")]
async fn tenants() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(
    limit = 1,
    window = "500ms",
    algorithm = "fixed_window",
    identity = "api_key"
)]
#[put("/put")]
async fn put_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 2, window = "1d", identity = "user_id", fail = "open")]
#[delete("/delete")]
async fn delete_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 3, window = "30s")]
#[patch("/patch")]
async fn patch_it() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 4, window = "30s")]
#[head("/head")]
async fn head_it() -> impl Responder {
    HttpResponse::Ok()
}

mod nested {
    pub mod deeper {
        use actix_web::{get, HttpResponse, Responder};
        use ratelimit_runtime::rate_limit;

        #[rate_limit(limit = 7, window = "10s")]
        #[get("/nested")]
        pub async fn nested_handler() -> impl Responder {
            HttpResponse::Ok()
        }
    }
}

// Path, limit and window passed through `macro_rules!` arrive in invisible groups, which
// actix-web reads; so must `#[rate_limit]`, neither dropping the declaration without an
// error nor refusing the limit with a false message.
macro_rules! limited_get {
    ($name:ident, $path:literal, $limit:literal, $window:literal) => {
        #[rate_limit(limit = $limit, window = $window)]
        #[get($path)]
        async fn $name() -> impl Responder {
            HttpResponse::Ok()
        }
    };
}
limited_get!(through_macro, "/through-macro", 6, "1m");

macro_rules! limited_route {
    ($name:ident, $path:expr, $method:expr) => {
        #[rate_limit(limit = 8, window = "1m")]
        #[route($path, method = $method)]
        async fn $name() -> impl Responder {
            HttpResponse::Ok()
        }
    };
}
limited_route!(route_through_macro, "/route-through-macro", "PATCH");

fn find(function: &str) -> &'static RouteDeclaration {
    let found: Vec<_> = registry::declarations()
        .filter(|d| d.function() == function)
        .collect();
    assert_eq!(found.len(), 1, "exactly one record for `{function}`");
    found[0]
}

fn limited(d: &RouteDeclaration) -> ratelimit_runtime::RoutePolicy {
    *d.policy().limited().expect("a limited route")
}

#[test]
fn the_registry_holds_exactly_the_declared_records() {
    let mut names: Vec<_> = registry::declarations().map(|d| d.function()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "delete_it",
            "get_order",
            "head_it",
            "health",
            "login",
            "nested_handler",
            "patch_it",
            "put_it",
            "route_through_macro",
            "tenants",
            "through_macro"
        ]
    );
}

#[test]
fn declarations_written_through_macros_register() {
    for (function, path, method, max) in [
        ("through_macro", "/through-macro", "GET", 6),
        ("route_through_macro", "/route-through-macro", "PATCH", 8),
    ] {
        let d = find(function);
        assert_eq!((d.path(), d.methods()), (path, &[method][..]), "{function}");
        let limits = limited(d).limits().to_vec();
        assert_eq!(limits.len(), 1, "{function}");
        assert_eq!(limits[0].max(), max, "{function}");
        assert_eq!(limits[0].window().as_millis(), 60_000, "{function}");
    }
}

#[test]
fn a_login_declaration_carries_its_typed_policy() {
    let d = find("login");
    assert_eq!(d.methods(), ["POST"]);
    assert_eq!(d.path(), "/login");
    assert_eq!(d.module(), "registry");
    assert_eq!(d.handler(), "registry::login");
    assert!(
        d.marker()
            .starts_with("registry::__ratelimit_marker_login_"),
        "{}",
        d.marker()
    );
    let p = limited(d);
    assert_eq!(p.limits().len(), 1);
    assert_eq!(p.limits()[0].max(), 10);
    assert_eq!(p.limits()[0].window().as_millis(), 300_000);
    assert_eq!(p.limits()[0].algorithm(), Algorithm::SlidingLog);
    assert_eq!(
        p.identity(),
        Identity::Parts(&[IdentityPart::Ip, IdentityPart::Username])
    );
    assert_eq!(p.fail(), FailMode::Closed);
    assert!(!p.shadow());
}

#[test]
fn stacked_limits_register_once_in_declaration_order() {
    let p = limited(find("get_order"));
    let limits: Vec<_> = p
        .limits()
        .iter()
        .map(|l| (l.max(), l.window().as_millis(), l.algorithm()))
        .collect();
    assert_eq!(
        limits,
        [
            (20, 1000, Algorithm::Gcra),
            (120, 60_000, Algorithm::SlidingWindow)
        ]
    );
    assert_eq!(p.identity(), Identity::UserIdElseIp);
    assert_eq!(p.fail(), FailMode::Open, "GET defaults to fail open");
}

#[test]
fn exemptions_keep_their_reason() {
    assert_eq!(
        *find("health").policy(),
        Policy::Exempt {
            reason: "load balancer health check"
        }
    );
}

#[test]
fn route_with_several_methods_and_a_header_identity() {
    let d = find("tenants");
    assert_eq!(d.methods(), ["GET", "POST"]);
    let p = limited(d);
    assert_eq!(
        p.identity(),
        Identity::Parts(&[IdentityPart::Header("x-tenant-id")])
    );
    assert_eq!(p.limits()[0].window().as_millis(), 5_400_000);
    assert!(p.shadow());
    assert_eq!(
        p.fail(),
        FailMode::Open,
        "a shadow limit fails open, whatever the methods"
    );
}

#[test]
fn every_method_attribute_is_read() {
    assert_eq!(find("put_it").methods(), ["PUT"]);
    assert_eq!(find("delete_it").methods(), ["DELETE"]);
    assert_eq!(find("patch_it").methods(), ["PATCH"]);
    assert_eq!(find("head_it").methods(), ["HEAD"]);
    assert_eq!(
        limited(find("delete_it")).fail(),
        FailMode::Open,
        "declared fail wins"
    );
    assert_eq!(limited(find("patch_it")).fail(), FailMode::Closed);
    assert_eq!(limited(find("head_it")).fail(), FailMode::Open);
    assert_eq!(
        limited(find("put_it")).limits()[0].window().as_millis(),
        500
    );
}

#[test]
fn handlers_in_nested_modules_record_their_module() {
    let d = find("nested_handler");
    assert_eq!(d.module(), "registry::nested::deeper");
    assert_eq!(d.path(), "/nested");
}

/// The handlers are used as services so the generated code is exercised by the compiler.
#[test]
fn handlers_remain_actix_services() {
    let _app = actix_web::App::new()
        .service(login)
        .service(get_order)
        .service(health)
        .service(tenants)
        .service(put_it)
        .service(delete_it)
        .service(patch_it)
        .service(head_it)
        .service(nested::deeper::nested_handler)
        .service(through_macro)
        .service(route_through_macro);
}
