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

    /// Refuses a `timeout` or `connect_timeout` under 1 ms (a configuration value of "0"):
    /// tokio's timers count whole milliseconds, so every check, or every connection, would
    /// time out against a healthy Redis, or not, at random: refused here, the mistake shows
    /// at start rather than as checks failing at random at run time.
    pub(crate) fn check_timeouts(
        builder: &str,
        timeout: std::time::Duration,
        connect_timeout: std::time::Duration,
    ) -> Result<(), Self> {
        for (name, value) in [("timeout", timeout), ("connect_timeout", connect_timeout)] {
            if value < std::time::Duration::from_millis(1) {
                return Err(StoreConfigError::new(format!(
                    "`{builder}::builder(..).{name}({value:?})` would fail every check: give it at least 1 ms"
                )));
            }
        }
        Ok(())
    }

    /// Refuses a URL that names a user without a password (`redis://user@host`): redis-rs
    /// sends `AUTH` only with a password, so the connection would run as `default` (or be
    /// refused `NOAUTH` where `default` is off) instead of as the user named.
    pub(crate) fn check_user_has_password(
        url: &str,
        info: &::redis::ConnectionInfo,
    ) -> Result<(), Self> {
        let settings = info.redis_settings();
        // `default` without a password is what such a connection runs as anyway.
        let user = settings.username().filter(|user| *user != "default");
        if user.is_some() && settings.password().is_none() {
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
            Some((name, _)) if is_password_name(name) => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}{}", pairs.join("&"))
}

/// Whether a query parameter's name, percent-decoded as redis-rs decodes it
/// (`query_pairs()`), is `pass` or `password`: `pa%73s=` is a password too.
fn is_password_name(name: &str) -> bool {
    form_urlencoded::parse(name.as_bytes())
        .next()
        .is_some_and(|(decoded, _)| {
            decoded.eq_ignore_ascii_case("pass") || decoded.eq_ignore_ascii_case("password")
        })
}

fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return redact_malformed(url);
    };
    let rest = &url[scheme_end..];
    if rest.starts_with('/') {
        // No authority (`redis+unix:///run/redis.sock?pass=…`): no user info, and an `@` is
        // the query's (a password may contain one).
        if url[..scheme_end].contains("unix") {
            return url.to_owned();
        }
        // A TCP URL with a slash too many (`redis:///:secret@host`) is refused; its
        // message must not show the password either.
        return redact_malformed(url);
    }
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

/// A URL without a well-formed authority (`redis:/:secret@host`, `redis//:secret@host`,
/// `redis:///:secret@host`): everything from the scheme to the last `@` before the query,
/// where a password may be, shown as `***`.
fn redact_malformed(url: &str) -> String {
    let head = url.split_once('?').map_or(url, |(head, _)| head);
    let Some(at) = head.rfind('@') else {
        return url.to_owned();
    };
    let scheme = url
        .split_once(':')
        .map(|(scheme, _)| scheme)
        .filter(|scheme| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
    match scheme {
        Some(scheme) => format!("{scheme}:***{}", &url[at..]),
        None => format!("***{}", &url[at..]),
    }
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
        // Malformed: a slash too many or too few, or no colon. redis-rs refuses them, and
        // the refusal names the URL.
        assert_eq!(
            redact("redis:///:s3cret@cache:6379"),
            "redis:***@cache:6379"
        );
        assert_eq!(redact("redis:/:s3cret@cache"), "redis:***@cache");
        assert_eq!(redact("redis//:s3cret@cache"), "***@cache");
        assert_eq!(
            redact("rediss:/app:s3cret@cache?x=1"),
            "rediss:***@cache?x=1"
        );
        for url in [
            "redis:///:s3cret@cache",
            "redis:/:s3cret@cache",
            "redis//:s3cret@cache",
        ] {
            let err = StoreConfigError::for_url(url, "Missing hostname");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
        let err = StoreConfigError::for_url("redis://u:s3cret@[bad", "no host");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(err.to_string().contains("u:***@"), "{err}");
    }
}

#[cfg(test)]
mod redact_edges {
    use super::*;

    /// A socket URL's password with an `@` in it (legal unencoded in a query, and passed
    /// to Redis whole by redis-rs): the user-info rule takes the last `@` of the whole URL,
    /// so the part of the password after it is shown.
    #[test]
    fn a_socket_password_with_an_at_sign_is_hidden_whole() {
        let url = "redis+unix:///run/redis.sock?db=0&pass=hunter@secretpart";
        let info = ::redis::IntoConnectionInfo::into_connection_info(url).unwrap();
        assert_eq!(info.redis_settings().password(), Some("hunter@secretpart"));
        let shown = redact(url);
        assert!(!shown.contains("secretpart"), "{shown}");
    }

    /// redis-rs reads the query with `query_pairs()`, which percent-decodes names, so
    /// `pa%73s=` is the password too.
    #[test]
    fn a_percent_encoded_pass_name_is_hidden() {
        let url = "redis+unix:///run/redis.sock?pa%73s=s3cret";
        let info = ::redis::IntoConnectionInfo::into_connection_info(url).unwrap();
        assert_eq!(info.redis_settings().password(), Some("s3cret"));
        let shown = redact(url);
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

#[cfg(test)]
mod user_checks {
    use super::*;

    #[test]
    fn valid_urls_pass_the_user_check_and_users_without_passwords_do_not() {
        for url in [
            "redis://:pw@host",
            "redis://default@host",
            "redis://default:pw@host:6380/2",
            "redis://host",
            "rediss://u:p%40ss@host",
            "redis://host/?protocol=resp3",
            "redis://u:p@host/0?protocol=resp3",
            "redis+unix:///run/r.sock?user=u&pass=p",
            "redis+unix:///run/r.sock",
            "unix:///run/r.sock?pass=p",
        ] {
            let info = ::redis::IntoConnectionInfo::into_connection_info(url).unwrap();
            assert!(
                StoreConfigError::check_user_has_password(url, &info).is_ok(),
                "{url}"
            );
        }
        for url in [
            "redis://u@host",
            "redis://u:@host",
            "redis+unix:///r.sock?user=u",
        ] {
            let info = ::redis::IntoConnectionInfo::into_connection_info(url).unwrap();
            assert!(
                StoreConfigError::check_user_has_password(url, &info).is_err(),
                "{url}"
            );
        }
    }
}
