use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::{budget, rate_limit};

budget!(API = limit = 5, window = "1m", identity = "api_key");

const NOT_A_BUDGET: u32 = 5;

#[rate_limit(budget = NOT_A_BUDGET)]
#[get("/api/orders")]
async fn orders() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = (App::new().service(orders), NOT_A_BUDGET);
}
