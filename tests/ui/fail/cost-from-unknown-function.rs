use actix_web::{dev::ServiceRequest, post, App, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

fn rows_asked(_: &ServiceRequest) -> u32 {
    1
}

fn by_name(_: &str) -> u32 {
    1
}

#[rate_limit(limit = 100, window = "1h", cost_from = "rows_askd")]
#[post("/reports/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = (App::new().service(export), rows_asked, by_name);
}
