use std::fmt;

use super::{problems::line, Problems};
use crate::key::{valid_prefix, KeySecret, DEFAULT_PREFIX};

/// How budgets are named in the store: the prefix of every key and the secret personal
/// values are hashed under. Given to [`RateLimiter::keys`](crate::RateLimiter::keys).
///
/// ```
/// use ratelimit_runtime::{key::KeySecret, settings::Keys, store::MemoryStore, RateLimiter};
///
/// let secret = KeySecret::new(b"a deployment secret of 32 bytes!".to_vec()).unwrap();
/// let limiter = RateLimiter::new(MemoryStore::new())
///     .keys(Keys::new().prefix("shop").secret(secret));
/// assert!(limiter.check_settings().is_ok());
/// ```
#[derive(Clone)]
#[must_use]
pub struct Keys {
    pub(crate) prefix: String,
    pub(crate) secret: Option<KeySecret>,
    problems: Problems,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            prefix: DEFAULT_PREFIX.to_owned(),
            secret: None,
            problems: Problems::default(),
        }
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("prefix", &self.prefix)
            .field("secret", &self.secret)
            .finish()
    }
}

impl Keys {
    /// The defaults: prefix `rl`, no secret.
    pub fn new() -> Self {
        Keys::default()
    }

    /// The key prefix (default `rl`). One that is empty, not ASCII, or holds braces, white
    /// space or control characters is refused
    /// ([`check_settings`](crate::RateLimiter::check_settings)).
    pub fn prefix(mut self, prefix: &str) -> Self {
        let setting = "`RateLimiter::keys(..).prefix(..)`";
        if valid_prefix(prefix) {
            self.prefix = prefix.to_owned();
            self.problems.record(setting, Ok(()));
        } else {
            let why =
                format!("invalid key prefix `{prefix}`: use printable ASCII without `{{` or `}}`");
            self.problems.record(setting, Err(line(setting, why)));
        }
        self
    }

    /// The deployment secret personal values in keys are hashed under (HMAC-SHA256):
    /// usernames, user ids, API keys and header values, and client addresses when the
    /// secret says so. Every instance of a fleet must share it; changing it starts every
    /// budget afresh. Without one, those values are plain SHA-256 hashes, which a dictionary
    /// reverses (opaque user ids, such as `42` or `usr_8f2k`, and client addresses are
    /// written as they are), and the limiter says so once at startup.
    pub fn secret(mut self, secret: KeySecret) -> Self {
        self.secret = Some(secret);
        self
    }

    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.problems.lines()
    }
}
