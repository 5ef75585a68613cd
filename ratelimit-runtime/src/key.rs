//! The key scheme: `<prefix>:{<METHOD>:<pattern>|<identity>}:<limit>`; the window
//! algorithms keep one field per window start in a hash there (`MemoryStore` likewise keeps
//! one entry per key, the windows in it).
//!
//! Route and identity sit inside the Redis Cluster hash tag, so every key of one check
//! (all stacked limits on one identity) lands in one slot; the limit stays outside it, so
//! different clients spread across slots. A limit on an identity of its own
//! ([`Limit::identified_by`]) is keyed under that identity's tag.
//!
//! Nothing inside the tag may contain `{` or `}` (Redis hashes up to the *first* `}`), so
//! route parameters are rewritten (`/orders/{id}` → `/orders/:id`). Usernames, API keys
//! and header values are hashed so that no secret or personal data is ever stored in a key:
//! with a [`KeySecret`], as keyed hashes (HMAC-SHA256, truncated) that no dictionary run
//! over the key space reverses, user ids too (and client addresses when asked); without
//! one, as plain SHA-256, which hides values from a casual reader but not from a dictionary.
//! Any other value that could break the key (braces, control characters, white space, very
//! long values) is hashed too.

use std::fmt::{self, Write as _};

use hmac::{Hmac, Mac as _};
use sha2::{Digest, Sha256};

use crate::{
    identity::ClientIdentity,
    policy::{Algorithm, Identity, IdentityPart, Limit},
};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "rl";

/// Longest identity value or pattern kept as text; longer ones are hashed.
const MAX_PLAIN_LEN: usize = 64;

/// The hash-tagged part of every key of one (route, client): `rl:{POST:/login|ip:203.0.113.7}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteKey {
    base: String,
    /// The bases of the route's other identities, for limits that count by their own
    /// ([`Limit::identity`]); empty on a route with one identity.
    others: Vec<(Identity, String)>,
    /// The bases of the shared budgets among the route's limits ([`Limit::budget`]), by name.
    budgets: Vec<(&'static str, String)>,
}

impl RouteKey {
    /// Builds the key for `method` and the matched route `pattern`, for a client identified
    /// by `identity` (each part with its raw value, as extracted from the request).
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds braces, white space, control or non-ASCII characters
    /// (printable ASCII without `{` or `}`).
    pub fn new(
        prefix: &str,
        method: &str,
        pattern: &str,
        identity: &[(IdentityPart, &str)],
    ) -> Self {
        Self::build(prefix, method, pattern, identity.iter().copied())
    }

    /// [`new`](Self::new) for an identity as the limiter extracted it.
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds braces, white space, control or non-ASCII characters
    /// (printable ASCII without `{` or `}`).
    pub fn for_client(
        prefix: &str,
        method: &str,
        pattern: &str,
        identity: &ClientIdentity,
    ) -> Self {
        Self::build(prefix, method, pattern, identity.value_parts())
    }

    /// [`for_client`](Self::for_client) with personal values hashed under `secret`, as the
    /// limiter keys them when it has one.
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds braces, white space, control or non-ASCII characters
    /// (printable ASCII without `{` or `}`).
    pub fn for_client_keyed(
        prefix: &str,
        method: &str,
        pattern: &str,
        identity: &ClientIdentity,
        secret: &KeySecret,
    ) -> Self {
        Self::from_stem(
            &Self::route_stem(prefix, method, pattern),
            Some(secret),
            identity.value_parts(),
        )
    }

    fn build<'v>(
        prefix: &str,
        method: &str,
        pattern: &str,
        identity: impl Iterator<Item = (IdentityPart, &'v str)>,
    ) -> Self {
        Self::from_stem(&Self::route_stem(prefix, method, pattern), None, identity)
    }

    /// What every key of one route starts with, `rl:{POST:/login`: the same for every
    /// client, so the limiter builds it once per route.
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds braces, white space, control or non-ASCII characters
    /// (printable ASCII without `{` or `}`).
    pub(crate) fn route_stem(prefix: &str, method: &str, pattern: &str) -> String {
        assert!(
            valid_prefix(prefix),
            "invalid key prefix `{prefix}`: use printable ASCII without `{{` or `}}`"
        );
        let mut stem = String::with_capacity(prefix.len() + pattern.len() + 16);
        stem.push_str(prefix);
        stem.push_str(":{");
        if method.bytes().any(|b| b.is_ascii_lowercase()) {
            push_plain_or_hashed(&mut stem, &method.to_ascii_uppercase());
        } else {
            push_plain_or_hashed(&mut stem, method);
        }
        stem.push(':');
        push_pattern(&mut stem, pattern);
        stem
    }

    /// The key of a client on the route whose [`route_stem`](Self::route_stem) is `stem`,
    /// personal values hashed under `secret` when there is one.
    pub(crate) fn from_stem<'v>(
        stem: &str,
        secret: Option<&KeySecret>,
        identity: impl Iterator<Item = (IdentityPart, &'v str)>,
    ) -> Self {
        let mut base = String::with_capacity(stem.len() + 48);
        base.push_str(stem);
        for (part, value) in identity {
            base.push('|');
            match secret {
                Some(secret) => secret.push_identity(&mut base, part, value),
                None => push_identity(&mut base, part, value),
            }
        }
        base.push('}');
        RouteKey {
            base,
            others: Vec::new(),
            budgets: Vec::new(),
        }
    }

    /// This key with `other`'s base for the limits that count by `identity`
    /// ([`Limit::identified_by`]): one key for a route whose limits count different
    /// identities.
    #[must_use]
    pub fn with_identity(mut self, identity: Identity, other: RouteKey) -> Self {
        self.others.push((identity, other.base));
        self
    }

    /// The key of the shared budget `name` for a client identified by `identity`
    /// (`rl:{budget:API|api_key:…}`): the same key on every route that names the budget.
    pub fn for_budget(prefix: &str, name: &str, identity: &[(IdentityPart, &str)]) -> Self {
        Self::from_stem(
            &Self::budget_stem(prefix, name),
            None,
            identity.iter().copied(),
        )
    }

    /// The stem of shared budget `name`'s keys under `prefix`: `rl:{budget:API`.
    pub(crate) fn budget_stem(prefix: &str, name: &str) -> String {
        let mut stem = String::with_capacity(prefix.len() + name.len() + 10);
        stem.push_str(prefix);
        stem.push_str(":{budget:");
        push_plain_or_hashed(&mut stem, name);
        stem
    }

    /// This key with `budget`'s base for the limit that is the shared budget `name`
    /// ([`Limit::budget`]).
    #[must_use]
    pub fn with_budget(mut self, name: &'static str, budget: RouteKey) -> Self {
        self.budgets.push((name, budget.base));
        self
    }

    /// The key of the limiter's ban ([`RateLimiter::ban`](crate::RateLimiter::ban)) for a
    /// client identified by `identity` (`rl:{ban|ip:…}`): the same key on every route.
    pub fn for_limiter_ban(prefix: &str, identity: &[(IdentityPart, &str)]) -> Self {
        Self::from_stem(&Self::ban_stem(prefix), None, identity.iter().copied())
    }

    /// The stem of the limiter's ban keys under `prefix`: `rl:{ban`.
    pub(crate) fn ban_stem(prefix: &str) -> String {
        let mut stem = String::with_capacity(prefix.len() + 5);
        stem.push_str(prefix);
        stem.push_str(":{ban");
        stem
    }

    /// This key with `ban`'s base ([`for_limiter_ban`](Self::for_limiter_ban)) for the
    /// limiter's ban ([`Ban::limiter_limit`](crate::policy::Ban::limiter_limit)).
    #[must_use]
    pub fn with_limiter_ban(self, ban: RouteKey) -> Self {
        self.with_budget(crate::policy::APP_BAN, ban)
    }

    /// The base of `limit`'s keys: its shared budget's when it is one, its identity's when
    /// it counts by its own, else this one.
    pub(crate) fn base_of(&self, limit: &Limit) -> &str {
        if let Some(name) = limit.budget() {
            if let Some((_, base)) = self.budgets.iter().find(|(n, _)| *n == name) {
                return base;
            }
        }
        limit
            .identity()
            .and_then(|identity| self.others.iter().find(|(i, _)| *i == identity))
            .map_or(self.base.as_str(), |(_, base)| base.as_str())
    }

    /// The limits of `limits` grouped by the base of their keys, in order of first use: one
    /// key with those limits per group (one group when every limit counts the route's
    /// identity, or the others are absent).
    pub(crate) fn groups(&self, limits: &[Limit]) -> Vec<(RouteKey, Vec<Limit>)> {
        let mut groups: Vec<(RouteKey, Vec<Limit>)> = Vec::new();
        for limit in limits {
            let base = self.base_of(limit);
            match groups.iter_mut().find(|(key, _)| key.base == base) {
                Some((_, group)) => group.push(*limit),
                None => groups.push((
                    RouteKey {
                        base: base.to_owned(),
                        others: Vec::new(),
                        budgets: Vec::new(),
                    },
                    vec![*limit],
                )),
            }
        }
        groups
    }

    /// Whether `limits` keep their keys under more than one base.
    pub(crate) fn spans_identities(&self, limits: &[Limit]) -> bool {
        (!self.others.is_empty() || !self.budgets.is_empty())
            && limits.iter().any(|l| self.base_of(l) != self.base)
    }

    /// Every base of this key: its own, then its other identities' (the flood shield
    /// remembers a refusal under the base of the limit that refused).
    pub(crate) fn bases(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.base.as_str())
            .chain(self.others.iter().map(|(_, b)| b.as_str()))
            .chain(self.budgets.iter().map(|(_, b)| b.as_str()))
    }

    /// The hash-tagged base of the route's identity: what every key of a limit on that
    /// identity starts with.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// The key of one limit: `<base>:<algorithm><window ms>`, e.g.
    /// `rl:{GET:/x|ip:1.2.3.4}:sw60000` (a concurrency limit: `cc<lease ms>`; for the window algorithms in `MemoryStore`, the
    /// stem its window entries are named after); the base is that of the limit's own
    /// identity when it counts by one ([`with_identity`](Self::with_identity)).
    pub fn limit_key(&self, limit: &Limit) -> String {
        let base = self.base_of(limit);
        let mut key = String::with_capacity(base.len() + 16);
        key.push_str(base);
        key.push(':');
        // A concurrency limit's leases are a sliding log of their own, never a rate limit's,
        // and a ban's count is never a fixed window's.
        key.push_str(if limit.is_concurrency() {
            "cc"
        } else if limit.is_ban() {
            "bn"
        } else {
            algorithm_code(limit.algorithm())
        });
        key.push_str(itoa::Buffer::new().format(limit.window().as_millis()));
        key
    }

    /// The text inside the hash tag (what Redis Cluster hashes).
    pub fn hash_tag(&self) -> &str {
        let open = self.base.find('{').expect("built with a tag");
        let close = self.base[open..].find('}').expect("built with a tag") + open;
        &self.base[open + 1..close]
    }
}

impl fmt::Display for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)
    }
}

/// A client's fingerprint in ban logs and in the admin command's list of bans: `fp:` and 16
/// hex digits (64 bits) of HMAC-SHA256 under the services' [`KeySecret`] (plain SHA-256
/// without one) of the identity a key (or its base) counts, its `kind:value` parts as the key
/// holds them. Neither the logs nor the list hold an address or a name, and one client has
/// one fingerprint on every route and in the limiter's ban.
///
/// ```
/// use ratelimit_runtime::key::identity_fingerprint;
///
/// let on_login = identity_fingerprint("rl:{POST:/login|ip:203.0.113.7}:bn600000:block", None);
/// let limiter_wide = identity_fingerprint("rl:{ban|ip:203.0.113.7}", None);
/// assert_eq!(on_login, limiter_wide);
/// assert!(on_login.starts_with("fp:") && on_login.len() == 19);
/// assert!(!on_login.contains("203.0.113.7"));
/// ```
pub fn identity_fingerprint(key: &str, secret: Option<&KeySecret>) -> String {
    let tag = key
        .find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}').map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let identity = tag
        .split('|')
        .skip(1)
        .filter(|part| part.contains(':'))
        .collect::<Vec<_>>()
        .join("|");
    let digest = match secret {
        Some(secret) => secret.keyed_hash("ban:identity", &identity),
        None => short_hash(&format!("ban:identity\0{identity}")),
    };
    format!("fp:{digest}")
}

/// Whether `prefix` can start a key: no braces, no white space or control characters.
pub(crate) fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '{' && c != '}')
}

/// The two-letter code of an algorithm in keys.
pub(crate) const fn algorithm_code(algorithm: Algorithm) -> &'static str {
    /// In the order of [`Algorithm::ALL`].
    const CODES: [&str; Algorithm::ALL.len()] = ["fw", "sw", "sl", "gc"];
    CODES[algorithm.index()]
}

/// The deployment secret under which personal values in keys are hashed (HMAC-SHA256):
/// usernames, user ids, API keys, header values, and client addresses when
/// [`hashing_client_addresses`](Self::hashing_client_addresses) is set. Without the secret,
/// nobody can tell from a key which name, id or address it counts, however good their
/// dictionary.
///
/// Every instance of a fleet must be given the same secret, or each counts in keys of its
/// own. Changing it starts every budget afresh (old keys expire with their windows).
///
/// ```
/// use ratelimit_runtime::key::KeySecret;
///
/// let secret = KeySecret::new("a deployment secret of 16 bytes or more").unwrap();
/// assert!(KeySecret::new("short").is_err());
/// // Never printed.
/// assert_eq!(format!("{secret:?}"), "KeySecret { client_addresses: false, .. }");
/// ```
#[derive(Clone)]
pub struct KeySecret {
    mac: Hmac<Sha256>,
    client_addresses: bool,
}

impl fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySecret")
            .field("client_addresses", &self.client_addresses)
            .finish_non_exhaustive()
    }
}

/// A [`KeySecret`] shorter than [`KeySecret::MIN_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySecretTooShort {
    /// The length given.
    pub len: usize,
}

impl fmt::Display for KeySecretTooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the key secret has {} bytes; use at least {} random bytes (e.g. `openssl rand -hex 32`)",
            self.len,
            KeySecret::MIN_LEN
        )
    }
}

impl std::error::Error for KeySecretTooShort {}

impl KeySecret {
    /// The fewest bytes a secret may have.
    pub const MIN_LEN: usize = 16;

    /// A secret from its bytes (a string from the environment, say).
    ///
    /// # Errors
    ///
    /// [`KeySecretTooShort`] when `secret` has fewer than [`MIN_LEN`](Self::MIN_LEN) bytes.
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, KeySecretTooShort> {
        let secret = secret.as_ref();
        if secret.len() < Self::MIN_LEN {
            return Err(KeySecretTooShort { len: secret.len() });
        }
        let mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
        Ok(KeySecret {
            mac,
            client_addresses: false,
        })
    }

    /// Hashes client addresses too (`ip:<hash>` rather than `ip:203.0.113.7`), for
    /// deployments where addresses count as personal data in the store.
    #[must_use]
    pub fn hashing_client_addresses(mut self) -> Self {
        self.client_addresses = true;
        self
    }

    /// 16 hex digits (64 bits) of HMAC-SHA256 of `part` and `value`: the part is in the
    /// input, so one value used as two parts gives two unrelated hashes.
    pub(crate) fn keyed_hash(&self, part: &str, value: &str) -> String {
        self.hash(part, value)
    }

    /// The `pk` of a client's partition whose keys start with `base` (`RateLimit`'s partition
    /// key): the first [`PARTITION_KEY_LEN`] bytes of HMAC-SHA256 of `base`, under a label
    /// of its own, so it matches no hash inside a key and reveals nothing of the identity.
    pub(crate) fn partition_key(&self, base: &str) -> PartitionKey {
        let mut mac = self.mac.clone();
        mac.update(b"pk\0");
        mac.update(base.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut key = [0; PARTITION_KEY_LEN];
        key.copy_from_slice(&digest[..PARTITION_KEY_LEN]);
        key
    }

    fn hash(&self, part: &str, value: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(part.as_bytes());
        mac.update(b"\0");
        mac.update(value.as_bytes());
        hex16(&mac.finalize().into_bytes())
    }

    fn push_identity(&self, out: &mut String, part: IdentityPart, value: &str) {
        match part {
            IdentityPart::Ip if !self.client_addresses => push_identity(out, part, value),
            IdentityPart::Header(name) => {
                // Header names compare without case: one header, one key.
                let name = name.to_ascii_lowercase();
                out.push_str("header:");
                push_plain_or_hashed(out, &name);
                out.push(':');
                out.push_str(&self.hash(&format!("header:{name}"), value));
            }
            _ => {
                let name = part.to_string();
                out.push_str(&name);
                out.push_str(":k.");
                out.push_str(&self.hash(&name, value));
            }
        }
    }
}

/// How many bytes of a keyed hash `pk` carries (96 bits: no two of a route's clients share
/// one by chance, and the header stays short).
pub(crate) const PARTITION_KEY_LEN: usize = 12;

/// A client's partition key (`pk` of `RateLimit`), a keyed hash of its key on a limit.
pub(crate) type PartitionKey = [u8; PARTITION_KEY_LEN];

fn hex16(digest: &[u8]) -> String {
    let mut out = String::with_capacity(16);
    for byte in &digest[..8] {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// First 16 hex digits (64 bits) of SHA-256.
pub(crate) fn short_hash(value: &str) -> String {
    hex16(&Sha256::digest(value.as_bytes()))
}

fn is_plain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_PLAIN_LEN
        && value.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '/' | '_' | '-' | '@' | '*')
        })
}

fn push_plain_or_hashed(out: &mut String, value: &str) {
    if is_plain(value) {
        out.push_str(value);
    } else {
        out.push_str("h.");
        out.push_str(&short_hash(value));
    }
}

/// `/orders/{id}` → `/orders/:id`. A segment's regex is dropped from the text but not from the key:
/// `/posts/{id:\d+}` → `/posts/:id#<hash of the pattern>`, so it never shares a key with
/// `/posts/{id}`; so is the boundary of a parameter followed by text (`/files/{name}.json`, which
/// would read as `/files/{name.json}`). A literal `:` or `#` (which would make two patterns read
/// alike) or anything else unsafe hashes the whole pattern.
fn push_pattern(out: &mut String, pattern: &str) {
    let mut rewritten = String::with_capacity(pattern.len());
    let mut rest = pattern;
    let mut literal_markers = false;
    let mut lossy = false;
    while let Some(open) = rest.find('{') {
        literal_markers |= rest[..open].contains([':', '#']);
        rewritten.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // Segment patterns may contain braces in their regex (`{id:\d{3}}`): find the
        // matching close brace.
        let mut depth = 1;
        let mut close = None;
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else {
            rewritten.push_str(&rest[open..]);
            rest = "";
            break;
        };
        let inner = &after[..close];
        lossy |= inner.contains(':');
        let name = inner
            .split(':')
            .next()
            .unwrap_or(inner)
            .trim_end_matches('*');
        rewritten.push(':');
        rewritten.push_str(name);
        if inner.ends_with('*') || inner.contains(".*") || inner.contains("*}") {
            rewritten.push('*');
        }
        rest = &after[close + 1..];
        // Text right after a parameter (`{name}.json`) would read as part of its name
        // (`{name.json}`): the hash tells them apart.
        lossy |= !(rest.is_empty() || rest.starts_with('/'));
    }
    literal_markers |= rest.contains([':', '#']);
    rewritten.push_str(rest);
    let safe = rewritten.len() <= 200
        && !rewritten.is_empty()
        && !literal_markers
        && rewritten
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '{' && c != '}' && c != '|');
    if safe {
        out.push_str(&rewritten);
        if lossy {
            out.push('#');
            out.push_str(&short_hash(pattern));
        }
    } else {
        out.push_str("h.");
        out.push_str(&short_hash(pattern));
    }
}

fn push_identity(out: &mut String, part: IdentityPart, value: &str) {
    match part {
        IdentityPart::Username => {
            // Canonical already: the limiter reads usernames through its canonicalizer.
            out.push_str("username:");
            out.push_str(&short_hash(value));
        }
        IdentityPart::ApiKey => {
            out.push_str("api_key:");
            out.push_str(&short_hash(value));
        }
        IdentityPart::Header(name) => {
            out.push_str("header:");
            push_plain_or_hashed(out, &name.to_ascii_lowercase());
            out.push(':');
            out.push_str(&short_hash(value));
        }
        IdentityPart::Ip => {
            out.push_str("ip:");
            push_plain_or_hashed(out, value);
        }
        IdentityPart::UserId => {
            // Opaque ids (`42`, `usr_8f2k`) stay readable; anything else, e-mail addresses
            // included, is personal data or could be, and is hashed.
            out.push_str("user_id:");
            let opaque = !value.is_empty()
                && value.len() <= MAX_PLAIN_LEN
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if opaque {
                out.push_str(value);
            } else {
                out.push_str("h.");
                out.push_str(&short_hash(value));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Window;

    #[test]
    fn a_limit_on_its_own_identity_is_keyed_under_that_identitys_base() {
        let by_name = Identity::Parts(&[IdentityPart::Username]);
        let per_ip = Limit::new(100, Window::from_secs(3600), Algorithm::SlidingWindow);
        let per_name =
            Limit::new(10, Window::from_secs(300), Algorithm::SlidingLog).identified_by(by_name);
        let ip = RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Ip, "10.0.0.1")]);
        let name = RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Username, "al")]);
        // Without the other identity's base, every limit is keyed under the route's.
        assert!(!ip.spans_identities(&[per_ip, per_name]));
        let key = ip.clone().with_identity(by_name, name.clone());
        assert!(key.spans_identities(&[per_ip, per_name]));
        assert!(!key.spans_identities(&[per_ip]));
        assert_eq!(key.limit_key(&per_ip), ip.limit_key(&per_ip));
        assert_eq!(key.limit_key(&per_name), name.limit_key(&per_name));
        assert_eq!(
            key.bases().collect::<Vec<_>>(),
            [ip.as_str(), name.as_str()]
        );
        let groups = key.groups(&[per_name, per_ip]);
        assert_eq!(
            groups,
            [(name.clone(), vec![per_name]), (ip.clone(), vec![per_ip])],
            "grouped in order of first use"
        );
    }

    #[test]
    fn route_and_identity_sit_inside_the_hash_tag() {
        let key = RouteKey::new("rl", "post", "/login", &[(IdentityPart::Ip, "203.0.113.7")]);
        assert_eq!(key.as_str(), "rl:{POST:/login|ip:203.0.113.7}");
        assert_eq!(key.hash_tag(), "POST:/login|ip:203.0.113.7");
        let limit = Limit::new(10, Window::from_secs(300), Algorithm::SlidingLog);
        assert_eq!(
            key.limit_key(&limit),
            "rl:{POST:/login|ip:203.0.113.7}:sl300000"
        );
        let client = ClientIdentity {
            parts: vec![
                (IdentityPart::Ip, "203.0.113.7".to_owned()),
                (IdentityPart::Username, "Alice".to_owned()),
            ],
            fell_back_from: None,
        };
        assert_eq!(
            RouteKey::for_client("rl", "POST", "/login", &client),
            RouteKey::new(
                "rl",
                "POST",
                "/login",
                &[
                    (IdentityPart::Ip, "203.0.113.7"),
                    (IdentityPart::Username, "Alice")
                ]
            ),
        );
    }

    #[test]
    fn route_parameters_lose_their_braces() {
        let tag = |pattern: &str| {
            RouteKey::new("rl", "GET", pattern, &[(IdentityPart::UserId, "42")])
                .hash_tag()
                .to_owned()
        };
        assert_eq!(
            tag("/orders/{id}/items/{item}"),
            "GET:/orders/:id/items/:item|user_id:42"
        );
        // A regex leaves the text but not the key: two routes that differ only in one never
        // share a key (nor a flood-shield entry).
        let with_regex = "/orders/{id}/items/{item:\\d{3}}";
        assert_eq!(
            tag(with_regex),
            format!(
                "GET:/orders/:id/items/:item#{}|user_id:42",
                short_hash(with_regex)
            )
        );
        assert!(!tag(with_regex).contains('{'));
        let (numbered, named) = (tag("/posts/{id:\\d+}"), tag("/posts/{id}"));
        assert_ne!(numbered, named);
        assert_ne!(numbered, tag("/posts/{id:[a-z]+}"));
        // A literal `:` would read like a parameter: the whole pattern is hashed.
        assert_eq!(
            tag("/posts/:id"),
            format!("GET:h.{}|user_id:42", short_hash("/posts/:id"))
        );
        assert_ne!(tag("/posts/:id"), named);
        // Text after a parameter would lengthen its name: two different routes.
        assert_ne!(tag("/files/{name}.json"), tag("/files/{name.json}"));
        assert_eq!(
            tag("/files/{name.json}"),
            "GET:/files/:name.json|user_id:42"
        );
    }

    #[test]
    fn secrets_and_personal_data_are_hashed() {
        let key = RouteKey::new(
            "rl",
            "POST",
            "/login",
            &[
                (IdentityPart::Username, " Alice "),
                (IdentityPart::ApiKey, "sk_live_secret"),
            ],
        );
        assert!(!key.as_str().contains("alice"));
        assert!(!key.as_str().to_lowercase().contains("alice"));
        assert!(!key.as_str().contains("sk_live_secret"));
    }

    #[test]
    fn with_a_secret_personal_values_are_keyed_hashes() {
        let client = ClientIdentity {
            parts: vec![
                (IdentityPart::Ip, "203.0.113.7".to_owned()),
                (IdentityPart::Username, "alice".to_owned()),
                (IdentityPart::UserId, "42".to_owned()),
                (IdentityPart::Header("X-Tenant"), "acme".to_owned()),
            ],
            fell_back_from: None,
        };
        let keyed = |secret: &KeySecret| {
            RouteKey::for_client_keyed("rl", "POST", "/login", &client, secret)
                .as_str()
                .to_owned()
        };
        let one = KeySecret::new("0123456789abcdef-one").unwrap();
        let two = KeySecret::new("0123456789abcdef-two").unwrap();
        let key = keyed(&one);
        // Neither the plain hash (a dictionary's) nor the value shows.
        assert!(!key.contains(&short_hash("alice")), "{key}");
        assert!(!key.contains("user_id:42"), "{key}");
        assert!(!key.contains("acme"), "{key}");
        assert!(key.contains("|ip:203.0.113.7|username:k."), "{key}");
        assert!(key.contains("|header:x-tenant:"), "{key}");
        // Stable under one secret, different under another.
        assert_eq!(key, keyed(&KeySecret::new("0123456789abcdef-one").unwrap()));
        assert_ne!(key, keyed(&two));
        // Addresses too, when asked.
        let hashed_ip = keyed(&one.clone().hashing_client_addresses());
        assert!(!hashed_ip.contains("203.0.113.7"), "{hashed_ip}");
        assert!(hashed_ip.contains("|ip:k."), "{hashed_ip}");
        assert!(KeySecret::new([7u8; 15]).is_err());
        // A header named in either case is one header: one key.
        let header = |name: &'static str| {
            let client = ClientIdentity {
                parts: vec![(IdentityPart::Header(name), "acme".to_owned())],
                fell_back_from: None,
            };
            RouteKey::for_client_keyed("rl", "GET", "/x", &client, &one)
        };
        assert_eq!(header("X-Tenant"), header("x-tenant"));
    }

    #[test]
    fn user_ids_that_look_like_personal_data_are_hashed() {
        let key = |id: &str| RouteKey::new("rl", "GET", "/x", &[(IdentityPart::UserId, id)]);
        assert_eq!(key("usr_42").hash_tag(), "GET:/x|user_id:usr_42");
        let email = key("jane.doe@example.com");
        assert!(!email.as_str().contains("jane"), "{email}");
        assert!(email.hash_tag().starts_with("GET:/x|user_id:h."));
    }

    #[test]
    fn values_that_could_break_the_key_are_hashed() {
        for hostile in ["a}b", "a{b", "line\r\nbreak", "nul\0", &"x".repeat(10_000)] {
            let key = RouteKey::new("rl", "GET", "/x", &[(IdentityPart::UserId, hostile)]);
            let tag = key.hash_tag();
            assert!(!tag.contains('{') && !tag.contains('}'), "{tag}");
            assert!(key.as_str().len() < 120, "{}", key.as_str().len());
            assert!(key.as_str().chars().all(|c| !c.is_control()));
        }
    }
}
