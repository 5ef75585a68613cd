// `#[rate_limit]` on a method: one error of ours naming the problem, not a request for a
// route attribute, which actix-web cannot put on a method either.
use actix_web::{HttpResponse, Responder};
use ratelimit_runtime::rate_limit;

struct Handlers;

impl Handlers {
    #[rate_limit(limit = 10, window = "5m")]
    async fn orders(&self) -> impl Responder {
        HttpResponse::Ok()
    }
}

fn main() {
    let _ = Handlers;
}
