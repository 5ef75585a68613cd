//! (a) No limiter: the ceiling every other variant is divided by.

use actix_web::{web, App, HttpServer};
use ratelimit_bench::Budget;

use crate::{handler, options::Options};

pub async fn serve(
    options: &Options,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    Ok(HttpServer::new(|| {
        let mut app = App::new();
        for budget in [Budget::Allow, Budget::Flood] {
            app = app.service(
                web::scope(&format!("/{}", budget.segment())).route("", web::get().to(handler::ok)),
            );
        }
        app
    })
    .workers(options.workers)
    .listen(listener)?
    .run())
}
