//! Traffic against the App: requests kept in flight from fresh clients, what each one got,
//! and the checks made on them (latency bound, answers, share decided, recovery, exact
//! counting).

use std::time::{Duration, Instant};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    test::{self, TestRequest},
};
use futures_util::{
    future::join_all,
    stream::{FuturesUnordered, StreamExt},
};
use ratelimit_runtime::{key::RouteKey, IdentityPart};

use crate::{BOUND, HEALTHY, IN_FLIGHT, LIMIT, TIMEOUT};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Closed,
    Open,
}

impl Route {
    pub fn request(self, client: &str) -> TestRequest {
        let req = match self {
            Route::Closed => TestRequest::post().uri("/closed"),
            Route::Open => TestRequest::get().uri("/open"),
        };
        req.insert_header(("x-client", client.to_owned()))
    }

    /// The hash-tagged key the middleware builds for `client` on this route.
    pub fn key(self, client: &str) -> RouteKey {
        let (method, path) = match self {
            Route::Closed => ("POST", "/closed"),
            Route::Open => ("GET", "/open"),
        };
        RouteKey::new(
            "rl",
            method,
            path,
            &[(IdentityPart::Header("x-client"), client)],
        )
    }
}

/// One request of a traffic loop.
#[derive(Debug, Clone)]
pub struct Sample {
    pub route: Route,
    /// Which group of clients it belongs to (test-specific).
    pub group: usize,
    pub sent: Instant,
    pub latency: Duration,
    pub status: u16,
    /// Whether the response carries a decision (`X-RateLimit-Limit`): a 200 without one on
    /// the open route failed open.
    pub decided: bool,
}

impl Sample {
    pub fn done(&self) -> Instant {
        self.sent + self.latency
    }

    /// The only answers a fresh client can get: a decided 200, a fail-open 200 on the open
    /// route, a 503 on the closed route.
    pub fn assert_answer(&self, what: &str) {
        let ok = match self.route {
            Route::Open => self.status == 200,
            Route::Closed => (self.status == 200 && self.decided) || self.status == 503,
        };
        assert!(ok, "{what}: {self:?}");
    }
}

pub async fn send<S, B>(app: &S, route: Route, client: String, group: usize) -> Sample
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let sent = Instant::now();
    let res = test::call_service(app, route.request(&client).to_request()).await;
    Sample {
        route,
        group,
        sent,
        latency: sent.elapsed(),
        status: res.status().as_u16(),
        decided: res.headers().contains_key("x-ratelimit-limit"),
    }
}

/// Keeps [`IN_FLIGHT`] requests in flight, each from `next(n)` (route, client, group), until
/// `stop` (shown each answered request) says so; returns every request once all have been
/// answered.
pub async fn traffic<S, B>(
    app: &S,
    mut next: impl FnMut(u64) -> (Route, String, usize),
    mut stop: impl FnMut(Option<&Sample>) -> bool,
) -> Vec<Sample>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut pending = FuturesUnordered::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut n = 0;
    let mut stopped = false;
    loop {
        stopped = stopped || stop(samples.last());
        while !stopped && pending.len() < IN_FLIGHT {
            let (route, client, group) = next(n);
            n += 1;
            pending.push(send(app, route, client, group));
        }
        match pending.next().await {
            Some(sample) => samples.push(sample),
            None => return samples,
        }
    }
}

/// Fresh clients, alternating between the closed and the open route.
pub fn fresh_clients(tag: &str) -> impl FnMut(u64) -> (Route, String, usize) + '_ {
    move |n| {
        let route = if n % 2 == 0 {
            Route::Closed
        } else {
            Route::Open
        };
        (route, format!("{tag}-{n}"), 0)
    }
}

/// Asserts every request stayed under [`BOUND`]; prints and returns the slowest.
pub fn assert_bounded(samples: &[Sample], what: &str) -> Duration {
    let max = samples.iter().map(|s| s.latency).max().unwrap_or_default();
    println!(
        "{what}: {} requests, slowest {max:?} (timeout {TIMEOUT:?}, bound {BOUND:?})",
        samples.len()
    );
    assert!(
        max < BOUND,
        "{what}: a request took {max:?}, more than {BOUND:?} with a {TIMEOUT:?} timeout"
    );
    max
}

/// Asserts that at least [`HEALTHY`] of `samples` (requests to a healthy Redis) were decided.
pub fn assert_mostly_decided<'a>(samples: impl IntoIterator<Item = &'a Sample>, what: &str) {
    let (mut total, mut decided) = (0, 0);
    for s in samples {
        total += 1;
        decided += usize::from(s.decided);
    }
    println!("{what}: {decided} of {total} decided");
    assert!(total > 0, "{what}: no requests");
    assert!(
        decided as f64 >= HEALTHY * total as f64,
        "{what}: only {decided} of {total} requests were decided"
    );
}

/// Polls with fresh clients until `route` decides again (200 with a decision); returns how
/// long that took. Panics after 10 s.
pub async fn recovery<S, B>(app: &S, route: Route, tag: &str) -> Duration
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let started = Instant::now();
    for attempt in 0.. {
        let sample = send(app, route, format!("{tag}-probe-{attempt}"), 0).await;
        if sample.status == 200 && sample.decided {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{route:?} did not decide again within 10 s (last answer {sample:?})"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

/// Sends `2 * LIMIT` concurrent requests for one fresh client on `route` and asserts exactly
/// `LIMIT` are allowed and the rest rejected. A round with an undecided answer (a healthy
/// Redis missing the deadline on a loaded machine) is repeated with another client.
pub async fn assert_exact<S, B>(app: &S, route: Route, client: &str)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    for round in 0..3 {
        let client = format!("{client}-{round}");
        let samples = join_all((0..2 * LIMIT).map(|_| send(app, route, client.clone(), 0))).await;
        if samples.iter().any(|s| !s.decided) {
            println!("{route:?} `{client}`: an undecided answer, again with another client");
            continue;
        }
        let allowed = samples.iter().filter(|s| s.status == 200).count();
        let rejected = samples.iter().filter(|s| s.status == 429).count();
        assert_eq!(
            (allowed, rejected),
            (LIMIT, LIMIT),
            "{route:?} for `{client}`: statuses {:?}",
            samples.iter().map(|s| s.status).collect::<Vec<_>>()
        );
        return;
    }
    panic!("{route:?}: three rounds with undecided answers after recovery");
}
