use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(limit = 1000, window = "1h", cost = 10)]
#[rate_limit(limit = 20, window = "1m", algorithm = "gcra")]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(export);
    let declaration = registry::declarations()
        .find(|d| d.function() == "export")
        .expect("registered");
    let limits = declaration.policy().limited().expect("limited").limits();
    assert_eq!(limits[0].cost(), 10);
    assert_eq!(limits[1].cost(), 1);
}
