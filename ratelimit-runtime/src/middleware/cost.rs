//! A cost decided by the request: [`RateLimiter::cost_of`], read before the check.

use std::sync::Arc;

use actix_web::dev::ServiceRequest;

use super::{limiter::Limiter, route_info::RouteInfo, RateLimiter};
use crate::policy::{Limit, MAX_STACKED};

impl RateLimiter {
    /// Weighs each request of `route` (`METHOD /full/pattern`, as the route table names it)
    /// with `cost`, read before the check: every limit of the route counts that many units
    /// for the request instead of its declared [`cost`](crate::Limit::costing). For a report
    /// whose price depends on what it asks, a batch endpoint priced per item, a query priced
    /// by its page size.
    ///
    /// - A cost of 0 counts as 1: a request always counts.
    /// - A cost larger than a limit counts as that whole limit: the request passes only with
    ///   the budget whole, and spends it all (it could never pass otherwise).
    /// - The function runs on the worker for every request of the route, before the
    ///   handler, with the request's head (the body is not read yet): keep it cheap.
    /// - A route named here that the App does not declare is a refused setting: the coverage
    ///   check fails on it, and a route named twice is refused too.
    /// - Refusals of a route with a cost function are not remembered by the flood shield
    ///   (a smaller request may fit where a larger one did not): every request of it asks the
    ///   store.
    /// - A request counted by the limiter after something else answered it (a resource in
    ///   front of the route's guard) counts the declared cost.
    ///
    /// ```
    /// use actix_web::{post, test, App, HttpResponse, Responder};
    /// use ratelimit_runtime::{rate_limit, store::MemoryStore, RateLimiter};
    ///
    /// #[rate_limit(limit = 100, window = "1h", identity = "ip")]
    /// #[post("/reports/export")]
    /// async fn export() -> impl Responder {
    ///     HttpResponse::Ok()
    /// }
    ///
    /// # actix_web::rt::System::new().block_on(async {
    /// // `?rows=N` costs N / 1000 units, at least one.
    /// let limiter = RateLimiter::new(MemoryStore::new()).cost_of("POST /reports/export", |req| {
    ///     let rows = req.query_string().strip_prefix("rows=").and_then(|n| n.parse::<u32>().ok());
    ///     rows.unwrap_or(1_000) / 1_000
    /// });
    /// let app = test::init_service(App::new().service(export).wrap(limiter)).await;
    /// let big = test::TestRequest::post()
    ///     .uri("/reports/export?rows=60000")
    ///     .peer_addr("203.0.113.7:4000".parse().unwrap());
    /// let res = test::call_service(&app, big.to_request()).await;
    /// assert_eq!(res.headers().get("x-ratelimit-remaining").unwrap(), "40");
    /// # });
    /// ```
    pub fn cost_of<F>(mut self, route: &str, cost: F) -> Self
    where
        F: Fn(&ServiceRequest) -> u32 + Send + Sync + 'static,
    {
        let setting = format!("`RateLimiter::cost_of({route:?}, ..)`");
        if super::rollout::split_route(route).is_none() {
            self.rollout.problems.push(format!(
                "{setting}: name the route as `METHOD /full/pattern`, with its scope's prefix, e.g. `POST /reports/export`"
            ));
            return self;
        }
        if self.rollout.costs.iter().any(|(label, _)| label == route) {
            self.rollout.problems.push(format!(
                "{setting}: `{route}` is weighed twice; give each route one cost function"
            ));
            return self;
        }
        self.rollout.costs.push((route.to_owned(), Arc::new(cost)));
        self
    }
}

/// `limits`, each counting `cost` units (at most its whole budget, at least one).
pub(crate) fn costed(limits: &[Limit], cost: u32) -> Vec<Limit> {
    // A stack, with its bans first (a route's and the limiter's).
    debug_assert!(limits.len() <= MAX_STACKED + 2);
    limits.iter().map(|limit| costing(limit, cost)).collect()
}

/// One limit of [`costed`]: `limit` counting `cost` units, at least one and at most its max.
pub(crate) fn costing(limit: &Limit, cost: u32) -> Limit {
    limit.with_cost(cost.clamp(1, limit.max()))
}

impl Limiter {
    /// What the app's function weighs `req` at on `route`, when it weighs the route's
    /// requests.
    /// The limiter's [`RateLimiter::cost_of`] wins over the declaration's `cost_from`.
    pub(crate) fn request_cost(&self, req: &ServiceRequest, route: &RouteInfo) -> Option<u32> {
        if route.is_default_policy() {
            return None;
        }
        if !self.costs.is_empty() {
            if let Some(cost) = self.costs.get(route.label.as_str()) {
                return Some(cost(req).max(1));
            }
        }
        route.cost_from.map(|weigh| weigh(req).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{store::MemoryStore, Algorithm, Window};

    #[test]
    fn costs_are_clamped_to_each_limits_budget() {
        let limits = [
            Limit::new(5, Window::from_secs(1), Algorithm::Gcra),
            Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow).costing(3),
        ];
        let weighed = costed(&limits, 7);
        assert_eq!((weighed[0].cost(), weighed[1].cost()), (5, 7));
        let nothing = costed(&limits, 0);
        assert_eq!((nothing[0].cost(), nothing[1].cost()), (1, 1));
    }

    #[test]
    fn a_route_weighed_twice_or_badly_named_is_a_refused_setting() {
        let limiter = RateLimiter::new(MemoryStore::new())
            .cost_of("POST /export", |_| 2)
            .cost_of("POST /export", |_| 3)
            .cost_of("post /export", |_| 3);
        let problems = limiter.rollout.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("weighed twice"), "{problems:?}");
        assert!(
            problems[1].contains("`METHOD /full/pattern`"),
            "{problems:?}"
        );
    }
}
