//! The settings of a [`RateLimiter`](crate::RateLimiter), in groups: each group is a small
//! builder given to the limiter's method of the same concern, and a value a group cannot
//! take is recorded, not panicked on, and reported with every other one by
//! [`RateLimiter::check_settings`](crate::RateLimiter::check_settings) as a [`ConfigError`]
//! (an App wrapped with such a limiter does not start).
//!
//! | group | given to | what it holds |
//! |---|---|---|
//! | [`Identities`] | [`RateLimiter::identity`](crate::RateLimiter::identity) | who a request is: proxies, username readers, user id, API key |
//! | [`Keys`] | [`RateLimiter::keys`](crate::RateLimiter::keys) | how budgets are named in the store: prefix, secret |
//! | [`Responses`] | [`RateLimiter::responses`](crate::RateLimiter::responses) | what limited answers carry, which statuses are successes |
//! | [`Failure`] | [`RateLimiter::failure`](crate::RateLimiter::failure) | the fleet's size for `local` routes, the flood shield |
//! | [`Undeclared`] | [`RateLimiter::undeclared`](crate::RateLimiter::undeclared) | the policy of routes with no declaration |
//!
//! Each group starts from the defaults (`new()`) and is given once, with all its values: a
//! group given twice, or after a deprecated setter of it, would lose the earlier values, so
//! it is refused ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings)). The
//! store's timeout is set on the store's builder.
//!
//! ```
//! use std::time::Duration;
//!
//! use ratelimit_runtime::{
//!     identity::{TrustedProxies, UsernameReader},
//!     settings::{Failure, Identities, Responses},
//!     store::MemoryStore,
//!     HeaderFamilies, RateLimiter,
//! };
//!
//! let limiter = RateLimiter::new(MemoryStore::new())
//!     .identity(
//!         Identities::new()
//!             .trusted_proxies(TrustedProxies::hops(1))
//!             .username(UsernameReader::field("email")),
//!     )
//!     .responses(
//!         Responses::new()
//!             .headers(HeaderFamilies::none().ietf_draft(true))
//!             .unavailable_retry_after(Duration::from_secs(5)),
//!     )
//!     .failure(Failure::new().instances(0));
//! // Refused, naming the setting: the App would not start.
//! let error = limiter.check_settings().unwrap_err();
//! assert!(error.to_string().contains("`RateLimiter::failure(..).instances(0)`"));
//! ```

mod config_error;
mod failure;
mod identities;
mod keys;
mod problems;
mod responses;
mod undeclared;

pub use config_error::ConfigError;
pub use failure::{Failure, DEFAULT_MAX_WAITING};
pub use identities::Identities;
pub use keys::Keys;
pub(crate) use problems::Problems;
pub use responses::Responses;
pub use undeclared::Undeclared;
