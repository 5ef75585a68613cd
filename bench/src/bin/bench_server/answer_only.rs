//! (g) No limiter, answering every `/flood` request with this project's 429: the answer
//! without the decision.
//!
//! At start the server asks this project's fixed-window flood route (the project server's
//! own routes, in process, over a `MemoryStore`) twice from one client and keeps the second
//! answer: its status, headers and body. Every `/flood` request then gets that answer again,
//! built the way this project answers a shielded key (a new response with the kept body,
//! the kept headers inserted one by one), with no client identified, no key built and no
//! shield looked up. `/allow` answers like (a). The flood figures of (a), (g) and (e) side
//! by side split this project's cost into the answer's and the decision's.

use actix_web::{
    body::MessageBody,
    http::{
        header::{HeaderName, HeaderValue},
        StatusCode,
    },
    test,
    web::{self, Bytes},
    App, HttpResponse, HttpServer,
};
use ratelimit_bench::{route, Budget, ProjectRoute, Variant};
use ratelimit_runtime::settings::Identities;
use ratelimit_runtime::{identity::TrustedProxies, store::MemoryStore, RateLimiter};

use crate::{handler, options::Options, project};

/// A 429 as this project answers it.
#[derive(Clone)]
pub struct Answer {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

impl Answer {
    /// The second answer of this project's fixed-window flood route to one client.
    pub async fn capture() -> Result<Answer, String> {
        let limiter = RateLimiter::new(MemoryStore::new())
            .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)));
        let service = test::init_service(
            App::new()
                .configure(|cfg| project::routes(cfg, Some(ProjectRoute::FixedWindow)))
                .wrap(limiter),
        )
        .await;
        let path = route::path(
            Variant::Project,
            Some(ProjectRoute::FixedWindow),
            Budget::Flood,
        );
        let request = || {
            test::TestRequest::get()
                .uri(&path)
                .insert_header(("x-forwarded-for", "198.18.0.1"))
                .to_request()
        };
        test::call_service(&service, request()).await;
        let response = test::call_service(&service, request()).await;
        if response.status() != StatusCode::TOO_MANY_REQUESTS {
            return Err(format!(
                "{path} answered {} to a client over its limit, not 429",
                response.status()
            ));
        }
        let status = response.status();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let body = response
            .into_body()
            .try_into_bytes()
            .map_err(|_| format!("{path}'s 429 has a streamed body"))?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    fn respond(&self) -> HttpResponse {
        let mut response =
            HttpResponse::with_body(self.status, self.body.clone()).map_into_boxed_body();
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        response
    }
}

async fn flood(answer: web::Data<Answer>) -> HttpResponse {
    answer.respond()
}

pub async fn serve(
    options: &Options,
    listener: std::net::TcpListener,
) -> std::io::Result<actix_web::dev::Server> {
    let answer = web::Data::new(Answer::capture().await.map_err(std::io::Error::other)?);
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(answer.clone())
            .service(
                web::scope(&format!("/{}", Budget::Allow.segment()))
                    .route("", web::get().to(handler::ok)),
            )
            .service(
                web::scope(&format!("/{}", Budget::Flood.segment()))
                    .route("", web::get().to(flood)),
            )
    })
    .workers(options.workers)
    .listen(listener)?
    .run())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The replayed answer is this project's 429: status, `Retry-After`, the rate-limit
    /// headers and the problem+json body, and `/allow` still answers `ok`.
    #[actix_web::test]
    async fn replays_the_projects_429_on_flood_and_allows_allow() {
        let answer = Answer::capture().await.unwrap();
        let service = test::init_service(
            App::new()
                .app_data(web::Data::new(answer))
                .route("/flood", web::get().to(flood))
                .route("/allow", web::get().to(handler::ok)),
        )
        .await;
        let response = test::call_service(
            &service,
            test::TestRequest::get().uri("/flood").to_request(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        for name in [
            "retry-after",
            "content-type",
            "ratelimit",
            "ratelimit-policy",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            assert!(response.headers().contains_key(name), "{name} missing");
        }
        let body = test::read_body(response).await;
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            text.contains("\"status\":429") && text.contains("/flood/fixed_window"),
            "{text}"
        );
        let ok = test::call_service(
            &service,
            test::TestRequest::get().uri("/allow").to_request(),
        )
        .await;
        assert!(ok.status().is_success());
    }
}
