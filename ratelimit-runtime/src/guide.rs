//! The guide: how to put limits on an actix-web app and run them in production.
//!
//! Documentation only: the chapters below hold no code. The attribute's own reference (every
//! key, stacking, placement, compile errors) is on [`rate_limit`](crate::rate_limit).
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`getting_started`] | a limited app in five minutes: declare, wrap, check coverage |
//! | [`algorithms`] | choosing between `fixed_window`, `sliding_window`, `sliding_log` and `gcra` |
//! | [`identity`] | who a limit counts: client address and trusted proxies, usernames, user ids, API keys, the key secret |
//! | [`middleware_order`] | where the limiter goes among auth, CORS, path normalisation and route middleware |
//! | [`sign_in`] | counting failures only, lockouts, clearing a budget from code |
//! | [`budgets`] | requests that weigh more than one unit: a fixed cost, a cost read off the request, a charge after the handler |
//! | [`shaping`] | how many requests of one client may run at once (`concurrency`) |
//! | [`overrides`] | changing limits while the App runs: overrides by route and tier, allow and deny lists, the `ratelimit-admin` command |
//! | [`failure_modes`] | timeouts, `fail = "open"` and `"closed"`, recovery, what a failure costs in counts |
//! | [`headers`] | the rate-limit headers, `Retry-After`, the 429, 403 and 503 bodies, your own rejection body, CORS |
//! | [`tls`] | TLS, passwords and the ACL a limiter's Redis user needs |
//! | [`deployments`] | Redis Cluster, the key layout, connections per worker, Redis versions |
//! | [`observability`] | log events and metrics |
//! | [`testing`] | testing your routes with the injected clock and the coverage check |
//! | [`limitations`] | what the limiter does not do, one rule per paragraph |

#[doc = include_str!("guide/getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("guide/algorithms.md")]
pub mod algorithms {}

#[doc = include_str!("guide/identity.md")]
pub mod identity {}

#[doc = include_str!("guide/middleware_order.md")]
pub mod middleware_order {}

#[doc = include_str!("guide/sign_in.md")]
pub mod sign_in {}

#[doc = include_str!("guide/budgets.md")]
pub mod budgets {}

#[doc = include_str!("guide/shaping.md")]
pub mod shaping {}

#[doc = include_str!("guide/overrides.md")]
pub mod overrides {}

#[doc = include_str!("guide/failure_modes.md")]
pub mod failure_modes {}

#[doc = include_str!("guide/headers.md")]
pub mod headers {}

#[doc = include_str!("guide/tls.md")]
pub mod tls {}

#[doc = include_str!("guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("guide/observability.md")]
pub mod observability {}

#[doc = include_str!("guide/testing.md")]
pub mod testing {}

#[doc = include_str!("guide/limitations.md")]
pub mod limitations {}
