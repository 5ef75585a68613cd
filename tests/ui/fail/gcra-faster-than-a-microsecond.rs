use actix_web::{get, HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 5000, window = "1ms", algorithm = "gcra")]
#[get("/ticks")]
async fn ticks() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _app = actix_web::App::new().service(ticks);
}
