use actix_web::{get, post, App, HttpResponse, Responder};
use ratelimit_runtime::{budget, rate_limit, registry};

budget!(pub API = limit = 10000, window = "1d", identity = "api_key");

mod quotas {
    ratelimit_runtime::budget!(pub(crate) EXPORTS = limit = 50, window = "1h", identity = "api_key", algorithm = "gcra");
}

#[rate_limit(budget = API)]
#[get("/api/orders")]
async fn orders() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(budget = API, cost = 100)]
#[rate_limit(budget = quotas::EXPORTS)]
#[rate_limit(limit = 2, window = "1m", identity = "api_key")]
#[post("/api/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(orders).service(export);
    let declared = registry::declarations()
        .find(|d| d.function() == "export")
        .expect("registered");
    let limits = declared.policy().limited().expect("limited").limits();
    assert_eq!(limits[0].budget(), Some("API"));
    assert_eq!(limits[0].cost(), 100);
    assert_eq!(limits[1].budget(), Some("EXPORTS"));
    assert_eq!(limits[2].budget(), None);
    assert_eq!(API.limit().max(), 10000);
}
