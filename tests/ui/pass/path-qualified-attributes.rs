//! Both attributes written with their full paths, nothing imported.

// The expansion must not warn in a crate that denies warnings.
#![deny(warnings)]

#[ratelimit_runtime::rate_limit(limit = 10, window = "1m")]
#[ratelimit_runtime::rate_limit(limit = 100, window = "1h")]
#[actix_web::get("/orders/{id}")]
async fn get_order() -> impl actix_web::Responder {
    actix_web::HttpResponse::Ok()
}

fn main() {
    let d = ratelimit_runtime::registry::declarations()
        .find(|d| d.function() == "get_order")
        .expect("`get_order` is registered");
    assert_eq!(d.methods(), ["GET"]);
    assert_eq!(d.path(), "/orders/{id}");
    assert_eq!(d.policy().limited().map(|p| p.limits().len()), Some(2));

    let _app = actix_web::App::new().service(get_order);
}
