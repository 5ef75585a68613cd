use std::fmt;

/// Settings a [`RateLimiter`](crate::RateLimiter) refused, every one of them, each line
/// naming the setting as it is written and saying why
/// (``"`RateLimiter::failure(..).instances(0)`: a fleet has at least one instance"``).
///
/// Returned by [`RateLimiter::check_settings`](crate::RateLimiter::check_settings); an App
/// wrapped with such a limiter logs it at `error` level and does not start
/// (`HttpServer::run` ends with an error, `actix_web::test::init_service` panics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<String>,
}

impl ConfigError {
    pub(crate) fn new(problems: Vec<String>) -> Self {
        ConfigError { problems }
    }

    /// Each problem, one line each: the setting, then why it was refused.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("\n"))
    }
}

impl std::error::Error for ConfigError {}
