//! Units are lower case (`H` is suggested as `h`); `mo` reads as months, which no window
//! counts in; a unit of a letter or two gets no guess (`e` of `1e3ms` is not `sec`).
use actix_web::{post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "1H")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1mo")]
#[post("/export")]
async fn export() -> impl Responder {
    HttpResponse::Ok()
}

#[rate_limit(limit = 10, window = "1e3ms")]
#[post("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new()
        .service(login)
        .service(export)
        .service(search);
}
