use std::fmt;

/// A store that cannot be built from its configuration (a malformed URL, for example).
///
/// Building never fails because Redis is unreachable: connections are made in the
/// background, and checks fail with [`StoreError`](super::StoreError)s until Redis answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfigError {
    message: String,
}

impl StoreConfigError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        StoreConfigError {
            message: message.into(),
        }
    }

    /// Refuses a zero `timeout` or `connect_timeout` (a configuration value of "0"): every
    /// check, or every connection, would time out against a healthy Redis (found by review:
    /// it was accepted, and checks failed at random at run time).
    pub(crate) fn check_timeouts(
        timeout: std::time::Duration,
        connect_timeout: std::time::Duration,
    ) -> Result<(), Self> {
        for (name, value) in [("timeout", timeout), ("connect_timeout", connect_timeout)] {
            if value.is_zero() {
                return Err(StoreConfigError::new(format!(
                    "`{name}` of 0 would fail every check: give it at least 1 ms"
                )));
            }
        }
        Ok(())
    }

    /// Refuses a URL that names a user without a password (`redis://user@host`): redis-rs
    /// sends `AUTH` only with a password, so the connection would run as `default` (or be
    /// refused `NOAUTH` where `default` is off) instead of as the user named (found by
    /// review).
    pub(crate) fn check_user_has_password(
        url: &str,
        info: &::redis::ConnectionInfo,
    ) -> Result<(), Self> {
        let settings = info.redis_settings();
        if settings.username().is_some() && settings.password().is_none() {
            return Err(StoreConfigError::for_url(
                url,
                "it names a user without a password, which redis-rs would not send (the \
                 connection would run as `default`); give the user a password (any password \
                 does for a `nopass` user)",
            ));
        }
        Ok(())
    }

    /// An error about `url`, shown without its password.
    pub(crate) fn for_url(url: &str, reason: impl fmt::Display) -> Self {
        StoreConfigError::new(format!("invalid redis url `{}`: {reason}", redact(url)))
    }
}

impl fmt::Display for StoreConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate-limit store configuration: {}", self.message)
    }
}

impl std::error::Error for StoreConfigError {}

/// `redis://user:secret@host` → `redis://user:***@host`: URLs carry passwords.
///
/// The user info ends at the last `@` (a host never contains one), so a password with `/`,
/// `?`, `#` or `@` in it, as base64 passwords often have, is hidden whole.
pub fn redact(url: &str) -> String {
    redact_query(&redact_userinfo(url))
}

/// A `pass=` query parameter (how `redis+unix://` URLs carry a password) shown as `***`.
fn redact_query(url: &str) -> String {
    let Some(query_start) = url.find('?') else {
        return url.to_owned();
    };
    let (head, query) = url.split_at(query_start + 1);
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if name.eq_ignore_ascii_case("pass") || name.eq_ignore_ascii_case("password") =>
            {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}{}", pairs.join("&"))
}

fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let user = userinfo.split(':').next().unwrap_or("");
    let hidden = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        "***".to_owned()
    };
    format!("{}{hidden}{}", &url[..scheme_end], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("rediss://app:s3cret@cache:6380/0"),
            "rediss://app:***@cache:6380/0"
        );
        assert_eq!(redact("redis://:s3cret@cache"), "redis://:***@cache");
        assert_eq!(redact("redis://s3cret@cache"), "redis://***@cache");
        assert_eq!(redact("redis://cache:6379"), "redis://cache:6379");
        assert_eq!(
            redact("redis://:s3cr/et?x#y@host:6379"),
            "redis://:***@host:6379"
        );
        assert_eq!(redact("redis://:p@ss@host"), "redis://:***@host");
        let err = StoreConfigError::for_url("redis://u:s3cret@[bad", "no host");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(err.to_string().contains("u:***@"), "{err}");
    }
}
