use actix_web::{post, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 100, window = "1h", identity = "ip")]
#[rate_limit(limit = 10, window = "5m", identity = "username")]
#[rate_limit(limit = 5, window = "1s", algorithm = "gcra")]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(login);
}
