use std::fmt;

use ratelimit_grammar::is_header_name;

/// One part of a client identity; parts are joined with `+` in the attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdentityPart {
    /// The client address (peer address, or the trusted-proxy entry of `X-Forwarded-For`).
    Ip,
    /// The submitted username from the request body.
    Username,
    /// The authenticated user id put into the request by the app's auth layer.
    UserId,
    /// The API key (`X-API-Key` or `Authorization: Bearer`).
    ApiKey,
    /// The value of the named header (stored lower-cased).
    Header(&'static str),
}

impl IdentityPart {
    /// The short kind used in keys and logs (`ip`, `username`, `user_id`, `api_key`, `header`).
    pub const fn kind(self) -> &'static str {
        match self {
            IdentityPart::Ip => "ip",
            IdentityPart::Username => "username",
            IdentityPart::UserId => "user_id",
            IdentityPart::ApiKey => "api_key",
            IdentityPart::Header(_) => "header",
        }
    }
}

impl fmt::Display for IdentityPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityPart::Header(name) => write!(f, "header:{name}"),
            other => f.write_str(other.kind()),
        }
    }
}

/// Who a limit counts: the declared parts, or the default (`user_id`, else `ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Identity {
    /// No `identity` key: the authenticated user id when there is one, else the client IP.
    #[default]
    UserIdElseIp,
    /// The declared parts, all of which make up the identity.
    Parts(&'static [IdentityPart]),
}

/// Header names compared without case (a `const` `eq_ignore_ascii_case`, which the MSRV
/// does not have).
const fn same_header_name(x: &str, y: &str) -> bool {
    let (x, y) = (x.as_bytes(), y.as_bytes());
    if x.len() != y.len() {
        return false;
    }
    let mut i = 0;
    while i < x.len() {
        if !x[i].eq_ignore_ascii_case(&y[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// Two parts that read the same thing (header names compared without case).
const fn same_part(a: IdentityPart, b: IdentityPart) -> bool {
    match (a, b) {
        (IdentityPart::Header(x), IdentityPart::Header(y)) => same_header_name(x, y),
        (IdentityPart::Ip, IdentityPart::Ip)
        | (IdentityPart::Username, IdentityPart::Username)
        | (IdentityPart::UserId, IdentityPart::UserId)
        | (IdentityPart::ApiKey, IdentityPart::ApiKey) => true,
        _ => false,
    }
}

impl Identity {
    /// Panics unless the identity is one the attribute could have written ([`problem`](Self::problem)).
    pub(crate) const fn assert_valid(self) {
        if let Some(problem) = self.problem() {
            panic!("{}", problem);
        }
    }

    /// Why the identity is not one the attribute could have written, if it is not: at least
    /// one part (`Parts(&[])` would count every client of a route in one key), none twice,
    /// header names that can exist (a name with a space is never found, and every request
    /// would count by its IP).
    pub(crate) const fn problem(self) -> Option<&'static str> {
        let Identity::Parts(parts) = self else {
            return None;
        };
        if parts.is_empty() {
            return Some("an identity needs at least one part: `Identity::Parts(&[])` would count every client in one key");
        }
        let mut i = 0;
        while i < parts.len() {
            if let IdentityPart::Header(name) = parts[i] {
                if !is_header_name(name) {
                    return Some("`IdentityPart::Header` needs a header name (letters, digits and !#$%&'*+-.^_`|~; no space), or the header is never found");
                }
            }
            let mut j = i + 1;
            while j < parts.len() {
                if same_part(parts[i], parts[j]) {
                    return Some("an identity names one part twice");
                }
                j += 1;
            }
            i += 1;
        }
        None
    }

    /// The parts of an explicit identity (empty for the default).
    pub fn parts(&self) -> &'static [IdentityPart] {
        match self {
            Identity::UserIdElseIp => &[],
            Identity::Parts(parts) => parts,
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::UserIdElseIp => f.write_str("user_id, else ip"),
            Identity::Parts(parts) => {
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str("+")?;
                    }
                    write!(f, "{part}")?;
                }
                Ok(())
            }
        }
    }
}
