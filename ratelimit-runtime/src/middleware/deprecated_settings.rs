//! The setters `RateLimiter` had before its settings were grouped
//! ([`settings`](crate::settings)): each gives its group the one value, through the group's
//! own setter, so a value it refuses is reported by `RateLimiter::check_settings` as the
//! group's is. Hidden from the docs, so that the limiter's page shows one way per setting.

use std::time::Duration;

use actix_web::http::StatusCode;

use super::{
    headers::HeaderFamilies,
    rate_limiter::{Group, RateLimiter},
};
use crate::{
    identity::{ApiKeySource, Canonicalizer, TrustedProxies, UserIdSource, UsernameReader},
    key::KeySecret,
    policy::{FailMode, Identity, Limit},
    settings::{Failure, Identities, Keys, Responses, Undeclared},
};

#[doc(hidden)]
impl RateLimiter {
    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().trusted_proxies(..))`"
    )]
    pub fn trusted_proxies(self, proxies: TrustedProxies) -> Self {
        let group = Identities::trusted_proxies(self.identity.clone(), proxies);
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().username(..))`"
    )]
    pub fn username_reader(self, reader: UsernameReader) -> Self {
        let group = Identities::username(self.identity.clone(), reader);
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().username(UsernameReader::json_or_form::<T>(get)))`"
    )]
    pub fn username_from<T: serde::de::DeserializeOwned + 'static>(
        self,
        get: fn(&T) -> &str,
    ) -> Self {
        let group = Identities::username(
            self.identity.clone(),
            UsernameReader::json_or_form::<T>(get),
        );
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().route_username(..))`"
    )]
    pub fn route_username_reader(self, route: &str, reader: UsernameReader) -> Self {
        let group = Identities::route_username(self.identity.clone(), route, reader);
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().canonical_username(..))`"
    )]
    pub fn canonical_username(self, canonicalizer: Canonicalizer) -> Self {
        let group = Identities::canonical_username(self.identity.clone(), canonicalizer);
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().user_id(..))`"
    )]
    pub fn user_id(self, source: UserIdSource) -> Self {
        let group = Identities::user_id(self.identity.clone(), source);
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.identity(Identities::new().api_key(..))`"
    )]
    pub fn api_key(self, source: ApiKeySource) -> Self {
        let group = Identities::api_key(self.identity.clone(), source);
        self.extend_group(Group::Identity, |s| s.identity = group)
    }

    #[deprecated(since = "0.2.0", note = "use `.keys(Keys::new().secret(..))`")]
    pub fn key_secret(self, secret: KeySecret) -> Self {
        let group = Keys::secret(self.keys.clone(), secret);
        self.extend_group(Group::Keys, |s| s.keys = group)
    }

    #[deprecated(since = "0.2.0", note = "use `.keys(Keys::new().prefix(..))`")]
    pub fn key_prefix(self, prefix: &str) -> Self {
        let group = Keys::prefix(self.keys.clone(), prefix);
        self.extend_group(Group::Keys, |s| s.keys = group)
    }

    /// A bound of every store check in place of the store's own timeout, longer or shorter.
    /// Under 1 ms is refused (`check_settings`).
    #[deprecated(
        since = "0.2.0",
        note = "set the timeout on the store's builder (`RedisStore::builder(..).timeout(..)`); a store of your own answers `Store::timeout`"
    )]
    pub fn timeout(self, timeout: Duration) -> Self {
        let setting = "`RateLimiter::timeout(..)`";
        if timeout >= Duration::from_millis(1) {
            self.with(|s| {
                s.timeout = Some(timeout);
                s.problems.record(setting, Ok(()));
            })
        } else {
            let line = format!(
                "`RateLimiter::timeout({timeout:?})`: a rate-limit timeout under 1 ms would fail store checks at random; give it at least 1 ms"
            );
            self.with(|s| s.problems.record(setting, Err(line)))
        }
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.responses(Responses::new().headers(..))`"
    )]
    pub fn headers(self, headers: HeaderFamilies) -> Self {
        let group = Responses::headers(self.responses.clone(), headers);
        self.extend_group(Group::Responses, |s| s.responses = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.responses(Responses::new().unavailable_retry_after(..))`"
    )]
    pub fn unavailable_retry_after(self, retry: Duration) -> Self {
        let group = Responses::unavailable_retry_after(self.responses.clone(), retry);
        self.extend_group(Group::Responses, |s| s.responses = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.responses(Responses::new().success_statuses(..))`"
    )]
    pub fn success_statuses(self, success: fn(StatusCode) -> bool) -> Self {
        let group = Responses::success_statuses(self.responses.clone(), success);
        self.extend_group(Group::Responses, |s| s.responses = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.failure(Failure::new().flood_shield_capacity(..))`"
    )]
    pub fn flood_shield_capacity(self, capacity: usize) -> Self {
        let group = Failure::flood_shield_capacity(self.failure.clone(), capacity);
        self.extend_group(Group::Failure, |s| s.failure = group)
    }

    #[deprecated(since = "0.2.0", note = "use `.failure(Failure::new().instances(..))`")]
    pub fn instances(self, instances: u32) -> Self {
        let group = Failure::instances(self.failure.clone(), instances);
        self.extend_group(Group::Failure, |s| s.failure = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.undeclared(Undeclared::new().limits(..))`"
    )]
    pub fn default_limits(self, limits: Vec<Limit>) -> Self {
        let group = Undeclared::limits(self.undeclared_settings().clone(), limits);
        self.extend_group(Group::Undeclared, |s| s.undeclared = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.undeclared(Undeclared::new().identity(..))`"
    )]
    pub fn default_identity(self, identity: Identity) -> Self {
        let group = Undeclared::identity(self.undeclared_settings().clone(), identity);
        self.extend_group(Group::Undeclared, |s| s.undeclared = group)
    }

    #[deprecated(
        since = "0.2.0",
        note = "use `.undeclared(Undeclared::new().fail(..))`"
    )]
    pub fn default_fail(self, fail: FailMode) -> Self {
        let group = Undeclared::fail(self.undeclared_settings().clone(), fail);
        self.extend_group(Group::Undeclared, |s| s.undeclared = group)
    }
}
