//! The answers to refusals: the limiter's defaults (`answer.rs`), or the app's function's in
//! their place (`rejection.rs`, [`RateLimiter::reject_with`](super::RateLimiter::reject_with)).

use actix_web::HttpResponse;

use super::{
    answer, headers,
    limiter::Limiter,
    rejection::{answer_with, Rejection, RejectionReason},
    route_info::RouteInfo,
};
use crate::{key::PartitionKey, store::LimitState};

/// The answers to refusals: the limiter's defaults, or the app's function's in their place.
impl Limiter {
    /// The answer to a request over the limit: retry after `retry_ms`, `binding` the
    /// binding limit's index and state, `partition` the client's `pk`, `violated` the bits
    /// of the limits that refused. A lockout when the binding limit has a `block`.
    pub(crate) fn over_limit(
        &self,
        route: &RouteInfo,
        retry_ms: u64,
        binding: Option<(usize, &LimitState)>,
        partition: Option<&PartitionKey>,
        violated: u8,
    ) -> HttpResponse {
        let default =
            answer::too_many_requests(route, retry_ms, binding, self.headers, partition, violated);
        let Some(respond) = &self.reject_with else {
            return default;
        };
        let locks_out = binding.is_some_and(|(index, _)| {
            route
                .policy
                .limits()
                .get(index)
                .is_some_and(|limit| limit.block().is_some())
        });
        let reason = if locks_out {
            RejectionReason::Lockout
        } else {
            RejectionReason::Limit
        };
        let retry = headers::ceil_secs(retry_ms);
        let rejection = Rejection::new(reason, route, default, Some(retry), binding, violated);
        answer_with(respond, &rejection)
    }

    /// The answer of a route that fails closed while its store cannot decide.
    pub(crate) fn store_unavailable(&self, route: &RouteInfo) -> HttpResponse {
        let default = answer::limiter_unavailable(route, self.unavailable_retry_secs);
        let Some(respond) = &self.reject_with else {
            return default;
        };
        let every_limit = answer::violated_bits(0..route.policy_names.len());
        let rejection = Rejection::new(
            RejectionReason::StoreUnavailable,
            route,
            default,
            Some(self.unavailable_retry_secs),
            None,
            every_limit,
        );
        answer_with(respond, &rejection)
    }

    /// The answer to a client on the deny list.
    pub(crate) fn denied(&self, route: &RouteInfo) -> HttpResponse {
        let default = answer::denied(route);
        let Some(respond) = &self.reject_with else {
            return default;
        };
        let rejection = Rejection::new(RejectionReason::Denied, route, default, None, None, 0);
        answer_with(respond, &rejection)
    }
}
