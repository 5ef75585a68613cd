//! The key scheme: `<prefix>:{<METHOD>:<pattern>|<identity>}:<limit>`; the window
//! algorithms keep one field per window start in a hash there (`MemoryStore` likewise keeps
//! one entry per key, the windows in it).
//!
//! Route and identity sit inside the Redis Cluster hash tag, so every key of one check
//! (all stacked limits) lands in one slot; the limit stays outside it, so different clients
//! spread across slots.
//!
//! Nothing inside the tag may contain `{` or `}` (Redis hashes up to the *first* `}`), so
//! route parameters are rewritten (`/orders/{id}` → `/orders/:id`). Usernames, API keys
//! and header values are hashed (SHA-256, truncated) so that no secret or personal data is
//! ever stored in a key; any other value that could break the key (braces, control
//! characters, white space, very long values) is hashed too.

use std::fmt::{self, Write as _};

use sha2::{Digest, Sha256};

use crate::{
    identity::ClientIdentity,
    policy::{Algorithm, IdentityPart, Limit},
};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "rl";

/// Longest identity value or pattern kept as text; longer ones are hashed.
const MAX_PLAIN_LEN: usize = 64;

/// The hash-tagged part of every key of one (route, client): `rl:{POST:/login|ip:203.0.113.7}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteKey {
    base: String,
}

impl RouteKey {
    /// Builds the key for `method` and the matched route `pattern`, for a client identified
    /// by `identity` (each part with its raw value, as extracted from the request).
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds braces, white space, control or non-ASCII characters
    /// (see [`valid_prefix`]).
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
    /// (see [`valid_prefix`]).
    pub fn for_client(
        prefix: &str,
        method: &str,
        pattern: &str,
        identity: &ClientIdentity,
    ) -> Self {
        Self::build(prefix, method, pattern, identity.value_parts())
    }

    fn build<'v>(
        prefix: &str,
        method: &str,
        pattern: &str,
        identity: impl Iterator<Item = (IdentityPart, &'v str)>,
    ) -> Self {
        Self::from_stem(&Self::route_stem(prefix, method, pattern), identity)
    }

    /// What every key of one route starts with, `rl:{POST:/login`: the same for every
    /// client, so the limiter builds it once per route.
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds braces, white space, control or non-ASCII characters
    /// (see [`valid_prefix`]).
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

    /// The key of a client on the route whose [`route_stem`](Self::route_stem) is `stem`.
    pub(crate) fn from_stem<'v>(
        stem: &str,
        identity: impl Iterator<Item = (IdentityPart, &'v str)>,
    ) -> Self {
        let mut base = String::with_capacity(stem.len() + 48);
        base.push_str(stem);
        for (part, value) in identity {
            base.push('|');
            push_identity(&mut base, part, value);
        }
        base.push('}');
        RouteKey { base }
    }

    /// The hash-tagged base every key of this check starts with.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// The key of one limit: `<base>:<algorithm><window ms>`, e.g.
    /// `rl:{GET:/x|ip:1.2.3.4}:sw60000` (for the window algorithms in `MemoryStore`, the
    /// stem its window entries are named after).
    pub fn limit_key(&self, limit: &Limit) -> String {
        let mut key = String::with_capacity(self.base.len() + 16);
        key.push_str(&self.base);
        key.push(':');
        key.push_str(algorithm_code(limit.algorithm()));
        let _ = write!(key, "{}", limit.window().as_millis());
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

/// Whether `prefix` can start a key: no braces, no white space or control characters.
pub fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '{' && c != '}')
}

/// The two-letter code of an algorithm in keys.
pub const fn algorithm_code(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => "fw",
        Algorithm::SlidingWindow => "sw",
        Algorithm::SlidingLog => "sl",
        Algorithm::Gcra => "gc",
    }
}

/// Normalises a username so `Alice` and ` alice ` share one budget: trimmed, and
/// case-folded by upper- then lower-casing, so letters whose lower case has several forms
/// fold together too (`ß`, `SS` and `ss`; `Σ`, `σ` and `ς`).
pub fn normalize_username(raw: &str) -> String {
    raw.trim().to_uppercase().to_lowercase()
}

/// First 16 hex digits (64 bits) of SHA-256.
pub fn short_hash(value: &str) -> String {
    let digest = Sha256::digest(value.as_bytes());
    let mut out = String::with_capacity(16);
    for byte in &digest[..8] {
        let _ = write!(out, "{byte:02x}");
    }
    out
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

/// `/orders/{id}` → `/orders/:id`. A segment's regex is dropped from the text but not from
/// the key: `/posts/{id:\d+}` → `/posts/:id#<hash of the pattern>`, so it never shares a
/// key with `/posts/{id}`; so is the boundary of a parameter followed by text
/// (`/files/{name}.json`, which would read as `/files/{name.json}`). A literal `:` or `#` (which would make two patterns read alike)
/// or anything else unsafe hashes the whole pattern.
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
            out.push_str("username:");
            out.push_str(&short_hash(&normalize_username(value)));
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
        let same = RouteKey::new(
            "rl",
            "POST",
            "/login",
            &[
                (IdentityPart::Username, "alice"),
                (IdentityPart::ApiKey, "sk_live_secret"),
            ],
        );
        assert_eq!(key, same, "`Alice` and ` alice ` share a budget");
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
