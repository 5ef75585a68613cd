//! A module that shadows prelude names (`bool`, `Option`, `Result`, `str`) still compiles
//! the expansion: it names every type by its absolute path (a bare `bool` in the marker
//! guard would fail next to `type bool = u8;`).

#![deny(warnings)]

mod handlers {
    #![allow(non_camel_case_types, dead_code)]

    use actix_web::{get, HttpResponse, Responder};
    use ratelimit_runtime::rate_limit;

    type bool = u8;
    type str = u8;
    struct Option;
    struct Result;

    #[rate_limit(limit = 5, window = "1m", identity = "ip")]
    #[get("/shadowed")]
    pub async fn shadowed() -> impl Responder {
        HttpResponse::Ok()
    }
}

fn main() {
    let declared = ratelimit_runtime::registry::declarations()
        .filter(|d| d.function() == "shadowed")
        .count();
    assert_eq!(declared, 1);
    let _app = actix_web::App::new().service(handlers::shadowed);
}
