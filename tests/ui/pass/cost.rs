use actix_web::{dev::ServiceRequest, post, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry};

#[rate_limit(limit = 1000, window = "1h", cost = 10)]
#[rate_limit(limit = 20, window = "1m", algorithm = "gcra")]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

mod pricing {
    pub fn rows_asked(req: &actix_web::dev::ServiceRequest) -> u32 {
        req.query_string().len() as u32
    }
}

fn one(_: &ServiceRequest) -> u32 {
    1
}

#[rate_limit(limit = 100, window = "1h", cost_from = "pricing::rows_asked")]
#[rate_limit(limit = 5, window = "1m", algorithm = "gcra", cost_from = "pricing::rows_asked")]
#[post("/rows")]
async fn rows() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 100, window = "1h", cost_from = "crate::one")]
#[post("/one")]
async fn single() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(rows).service(single);
    let weighed = registry::declarations()
        .find(|d| d.function() == "rows")
        .expect("registered");
    assert_eq!(weighed.cost_from(), Some("pricing::rows_asked"));
    let _ = App::new().service(export);
    let declaration = registry::declarations()
        .find(|d| d.function() == "export")
        .expect("registered");
    let limits = declaration.policy().limited().expect("limited").limits();
    assert_eq!(limits[0].cost(), 10);
    assert_eq!(limits[1].cost(), 1);
}
