//! Handlers in nested modules register with their module path.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

use actix_web::App;
use ratelimit_runtime::registry;

mod api {
    pub mod v1 {
        use actix_web::{get, HttpResponse, Responder};
        use ratelimit_runtime::rate_limit;

        #[rate_limit(limit = 7, window = "10s")]
        #[get("/users")]
        pub async fn users() -> impl Responder {
            HttpResponse::Ok()
        }
    }

    pub mod v2 {
        use actix_web::{get, HttpResponse, Responder};
        use ratelimit_runtime::rate_limit;

        // The same function name in another module is another handler.
        #[rate_limit(limit = 8, window = "10s")]
        #[get("/users")]
        pub async fn users() -> impl Responder {
            HttpResponse::Ok()
        }
    }
}

fn main() {
    let mut handlers: Vec<_> = registry::declarations()
        .filter(|d| d.function() == "users")
        .map(|d| {
            (
                d.handler(),
                // The marker's path up to its unique name (which ends in a fingerprint).
                d.marker().rsplit_once("_").map(|(stem, _)| stem.to_owned()).unwrap_or_default(),
                d.policy().limited().map(|p| p.limits()[0].max()),
            )
        })
        .collect();
    handlers.sort();
    // Each declaration has its own marker name.
    let names: std::collections::HashSet<_> = registry::declarations()
        .filter(|d| d.function() == "users")
        .map(|d| d.marker_name())
        .collect();
    assert_eq!(names.len(), 2);
    let here = module_path!();
    assert_eq!(
        handlers,
        [
            (
                format!("{here}::api::v1::users"),
                format!("{here}::api::v1::__ratelimit_marker_users"),
                Some(7)
            ),
            (
                format!("{here}::api::v2::users"),
                format!("{here}::api::v2::__ratelimit_marker_users"),
                Some(8)
            ),
        ]
    );

    let _app = App::new()
        .service(actix_web::web::scope("/v1").service(api::v1::users))
        .service(actix_web::web::scope("/v2").service(api::v2::users));
}
