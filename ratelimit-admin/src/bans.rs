//! `bans list` and `bans lift`: the bans in force, by the client's fingerprint (never its
//! address or name), and lifting them.

use ratelimit_runtime::key::identity_fingerprint;

use crate::client::Admin;

/// One ban in force: its lockout key, the client's fingerprint, what it covers, what it
/// counted over, and how long it still holds.
pub(crate) struct Ban {
    key: String,
    pub(crate) fingerprint: String,
    pub(crate) covers: String,
    within_ms: u64,
    left_ms: u64,
}

impl Ban {
    /// The line `bans list` prints.
    pub(crate) fn line(&self) -> String {
        let within = ratelimit_runtime::Window::from_millis(self.within_ms);
        format!(
            "{}  {}  (refusals counted over {within}), {}s left",
            self.fingerprint,
            self.covers,
            self.left_ms.div_ceil(1000)
        )
    }
}

/// What a ban's key covers: `every route` for the limiter's (`rl:{ban|…}`), else the route
/// its tag names (`POST /login`, with the default policy's, a handler's or a tier's mark).
fn covers(tag: &str) -> String {
    let mut parts = tag.split('|');
    let route = parts.next().unwrap_or_default();
    if route == "ban" {
        return "every route (RateLimiter::ban)".to_owned();
    }
    let mut covers = route.replacen(':', " ", 1);
    for mark in parts.filter(|part| !part.contains(':')) {
        covers.push_str(&format!(" [{mark}]"));
    }
    covers
}

/// Every ban in force under `prefix`, fingerprinted under the services' secret.
pub(crate) async fn in_force(
    admin: &Admin,
    prefix: &str,
    secret: Option<&ratelimit_runtime::key::KeySecret>,
) -> Result<Vec<Ban>, String> {
    let mut bans = Vec::new();
    // The prefix matched as written: a `SCAN` pattern's own characters escaped.
    let mut pattern = String::with_capacity(prefix.len() + 16);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":{*}:bn*:block");
    for (key, ttl) in admin.scan(&pattern).await? {
        let Some(tag) = key
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map(|(tag, _)| tag)
        else {
            continue;
        };
        let within_ms = key
            .rsplit_once(":bn")
            .and_then(|(_, rest)| rest.strip_suffix(":block"))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0);
        bans.push(Ban {
            fingerprint: identity_fingerprint(&key, secret),
            covers: covers(tag),
            within_ms,
            left_ms: u64::try_from(ttl).unwrap_or(0),
            key,
        });
    }
    bans.sort_by(|a, b| (&a.fingerprint, &a.covers).cmp(&(&b.fingerprint, &b.covers)));
    Ok(bans)
}

/// Lifts `bans`: each lockout key goes with its count, so the client starts afresh. How
/// many were lifted.
pub(crate) async fn lift(admin: &Admin, bans: &[Ban]) -> Result<u64, String> {
    let mut lifted = 0;
    for ban in bans {
        let count = ban.key.trim_end_matches(":block").to_owned();
        if admin.delete(&[ban.key.clone(), count]).await? > 0 {
            lifted += 1;
        }
    }
    Ok(lifted)
}
