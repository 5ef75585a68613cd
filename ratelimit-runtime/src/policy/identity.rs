use std::fmt;

/// One part of a client identity; parts are joined with `+` in the attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
pub enum Identity {
    /// No `identity` key: the authenticated user id when there is one, else the client IP.
    #[default]
    UserIdElseIp,
    /// The declared parts, all of which make up the identity.
    Parts(&'static [IdentityPart]),
}

impl Identity {
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
