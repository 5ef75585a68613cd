//! Reading a policy's identity parts off a request.

use std::{collections::HashMap, net::IpAddr};

use actix_web::dev::ServiceRequest;

use super::{
    body::{Submitted, UNREADABLE_USERNAME},
    canonical::{canonical_username, Canonicalizer},
    ApiKeySource, TrustedProxies, UserIdSource, UsernameReader,
};
use crate::policy::{Identity, IdentityPart};

/// Where each identity part comes from; set on the limiter.
#[derive(Clone, Debug)]
pub(crate) struct IdentitySources {
    /// How to find the client address behind proxies.
    pub(crate) trusted_proxies: TrustedProxies,
    /// How the submitted username is read from the body, on every route without a reader
    /// of its own.
    pub(crate) username: UsernameReader,
    /// The username readers of single routes, by `METHOD /pattern` (`POST /login`).
    pub(crate) route_usernames: HashMap<String, UsernameReader>,
    /// How a submitted username becomes the name its budget is kept under.
    pub(crate) canonical_username: Canonicalizer,
    /// Where the authenticated user id comes from.
    pub(crate) user_id: UserIdSource,
    /// Where the API key comes from.
    pub(crate) api_key: ApiKeySource,
}

/// The identity of one request, ready for the key builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// Each part with its raw value (hashing happens in the key builder,
    /// `RouteKey::for_client`).
    pub parts: Vec<(IdentityPart, String)>,
    /// The part that was missing: the identity fell back to the client IP, or, for a
    /// username that could not be read, to the one budget such requests share.
    pub fell_back_from: Option<IdentityPart>,
}

impl ClientIdentity {
    /// Each part with its value as text.
    pub(crate) fn value_parts(&self) -> impl Iterator<Item = (IdentityPart, &str)> {
        self.parts
            .iter()
            .map(|(part, value)| (*part, value.as_str()))
    }

    /// The identity kind for logs and metrics: `ip`, `user_id`, `ip+username`, ...
    /// (never a value).
    pub fn kind(&self) -> String {
        let kinds: Vec<String> = self.parts.iter().map(|(p, _)| p.to_string()).collect();
        kinds.join("+")
    }
}

impl Default for IdentitySources {
    fn default() -> Self {
        IdentitySources {
            trusted_proxies: TrustedProxies::default(),
            username: UsernameReader::default(),
            route_usernames: HashMap::new(),
            canonical_username,
            user_id: UserIdSource::default(),
            api_key: ApiKeySource::default(),
        }
    }
}

impl IdentitySources {
    /// The username reader of the route labelled `route` (`POST /login`).
    pub(crate) fn username_reader(&self, route: &str) -> &UsernameReader {
        // Asked on every limited request: no hashing when no route has a reader of its own.
        if self.route_usernames.is_empty() {
            return &self.username;
        }
        self.route_usernames.get(route).unwrap_or(&self.username)
    }

    /// Reads `identity` off the request, with the client address and the username the body
    /// submitted when they were read already (`client`, `submitted`): neither is read again.
    /// Otherwise the body is read with `reader` (only when a part needs it), and is always
    /// put back byte for byte.
    pub(crate) async fn extract_with(
        &self,
        req: &mut ServiceRequest,
        identity: Identity,
        client: Option<Option<IpAddr>>,
        submitted: Option<Submitted>,
        reader: &UsernameReader,
    ) -> ClientIdentity {
        let ip = match client {
            Some(client) => self.trusted_proxies.text(client),
            None => self.trusted_proxies.client_ip(req),
        };
        let submitted = match submitted {
            Some(submitted) => Some(submitted),
            None if reads_body(identity) => Some(reader.read(req).await),
            None => None,
        };
        self.assemble_read(req, ip, identity, submitted)
    }

    /// [`extract_with`](Self::extract_with) of an identity that counts no username (reads no
    /// body), at once.
    pub(crate) fn extract_without_body(
        &self,
        req: &ServiceRequest,
        identity: Identity,
        client: Option<Option<IpAddr>>,
    ) -> ClientIdentity {
        let ip = match client {
            Some(client) => self.trusted_proxies.text(client),
            None => self.trusted_proxies.client_ip(req),
        };
        self.assemble_read(req, ip, identity, None)
    }

    /// `identity` from the client address `ip`, the username `submitted` and what the
    /// request carries.
    fn assemble_read(
        &self,
        req: &ServiceRequest,
        ip: String,
        identity: Identity,
        mut submitted: Option<Submitted>,
    ) -> ClientIdentity {
        assemble(ip, identity, |part| match part {
            IdentityPart::Ip => None,
            IdentityPart::Username => submitted.take().map(|s| self.username(s)),
            IdentityPart::UserId => self.user_id.read(req),
            IdentityPart::ApiKey => self.api_key.read(req),
            IdentityPart::Header(name) => req
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
        })
    }

    /// The identity of a request that was refused before its route's guard (middleware
    /// answered it, or failed it with an error), from the client address resolved before and
    /// the username its body `submitted`. A part the client or an auth layer supplies (user
    /// id, API key, header) is taken as absent, so the request counts by its address rather
    /// than by a key the client may have made up.
    pub(crate) fn refused(
        &self,
        client: Option<IpAddr>,
        identity: Identity,
        submitted: Submitted,
    ) -> ClientIdentity {
        let mut submitted = Some(submitted);
        assemble(
            self.trusted_proxies.text(client),
            identity,
            |part| match part {
                IdentityPart::Username => submitted.take().map(|s| self.username(s)),
                _ => None,
            },
        )
    }
}

/// Whether `identity` counts the username its body submits.
pub(crate) fn reads_body(identity: Identity) -> bool {
    identity.parts().contains(&IdentityPart::Username)
}

impl IdentitySources {
    /// The username part's value: the submitted name in its canonical form, else the one
    /// every request without a readable username shares (a name that canonicalizes to
    /// nothing included).
    fn username(&self, submitted: Submitted) -> String {
        match submitted {
            Submitted::Username(name) => {
                let name = (self.canonical_username)(&name);
                if name.is_empty() {
                    UNREADABLE_USERNAME.to_owned()
                } else {
                    name
                }
            }
            Submitted::Unreadable(_) => UNREADABLE_USERNAME.to_owned(),
        }
    }
}

/// `identity` from the client's address text `ip` and `value`, which reads every other
/// part: each part with its value, or, when one is missing, the address alone.
fn assemble(
    ip: String,
    identity: Identity,
    mut value: impl FnMut(IdentityPart) -> Option<String>,
) -> ClientIdentity {
    let parts: &[IdentityPart] = match identity {
        Identity::UserIdElseIp => {
            let part = match value(IdentityPart::UserId) {
                Some(user) => (IdentityPart::UserId, user),
                None => (IdentityPart::Ip, ip),
            };
            return ClientIdentity {
                parts: vec![part],
                fell_back_from: None,
            };
        }
        // The address alone, the most common identity, without copying it.
        Identity::Parts([IdentityPart::Ip]) => {
            return ClientIdentity {
                parts: vec![(IdentityPart::Ip, ip)],
                fell_back_from: None,
            }
        }
        Identity::Parts(parts) => parts,
    };
    let mut values = Vec::with_capacity(parts.len());
    for part in parts {
        let found = match part {
            IdentityPart::Ip => Some(ip.clone()),
            _ => value(*part),
        };
        match found {
            Some(found) => values.push((*part, found)),
            None => {
                return ClientIdentity {
                    parts: vec![(IdentityPart::Ip, ip)],
                    fell_back_from: Some(*part),
                }
            }
        }
    }
    let unreadable = values
        .iter()
        .any(|(part, value)| *part == IdentityPart::Username && value == UNREADABLE_USERNAME);
    // The one budget of requests without a readable username is per address, also where
    // the policy does not count addresses: one client's unreadable bodies never spend
    // another's.
    if unreadable && !values.iter().any(|(part, _)| *part == IdentityPart::Ip) {
        values.insert(0, (IdentityPart::Ip, ip));
    }
    ClientIdentity {
        parts: values,
        fell_back_from: unreadable.then_some(IdentityPart::Username),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{body::Unreadable, TrustedProxies};

    fn ip_parts(ip: &str) -> Vec<(IdentityPart, String)> {
        vec![(IdentityPart::Ip, ip.to_owned())]
    }

    #[test]
    fn a_refused_request_counts_by_its_address_and_the_username_read_before() {
        let sources = IdentitySources {
            trusted_proxies: TrustedProxies::hops(1),
            ..IdentitySources::default()
        };
        let client = Some("203.0.113.7".parse().unwrap());
        let refused = |parts: &'static [IdentityPart]| {
            sources.refused(
                client,
                Identity::Parts(parts),
                Submitted::Unreadable(Unreadable::Malformed),
            )
        };

        assert_eq!(
            sources.refused(
                client,
                Identity::UserIdElseIp,
                Submitted::Unreadable(Unreadable::NoBody)
            ),
            ClientIdentity {
                parts: ip_parts("203.0.113.7"),
                fell_back_from: None
            }
        );
        assert_eq!(refused(&[IdentityPart::Ip]).parts, ip_parts("203.0.113.7"));
        // The same key as the guard gives a body it cannot read.
        assert_eq!(
            refused(&[IdentityPart::Ip, IdentityPart::Username]),
            ClientIdentity {
                parts: vec![
                    (IdentityPart::Ip, "203.0.113.7".to_owned()),
                    (IdentityPart::Username, UNREADABLE_USERNAME.to_owned()),
                ],
                fell_back_from: Some(IdentityPart::Username)
            }
        );
        // A username read before the body was passed on counts as itself, canonical; a body
        // without one counts in the one budget of unreadable bodies, as at the guard.
        let login = Identity::Parts(&[IdentityPart::Ip, IdentityPart::Username]);
        let alice = Submitted::Username(" Alice\u{200b}".to_owned());
        assert_eq!(
            sources.refused(client, login, alice).parts,
            [
                (IdentityPart::Ip, "203.0.113.7".to_owned()),
                (IdentityPart::Username, "alice".to_owned()),
            ]
        );
        let missing = sources.refused(client, login, Submitted::Unreadable(Unreadable::NoBody));
        assert_eq!(
            missing.parts,
            [
                (IdentityPart::Ip, "203.0.113.7".to_owned()),
                (IdentityPart::Username, UNREADABLE_USERNAME.to_owned()),
            ]
        );
        assert_eq!(missing.fell_back_from, Some(IdentityPart::Username));
        // Parts a client or an auth layer supplies are absent: the address alone.
        for parts in [
            &[IdentityPart::UserId][..],
            &[IdentityPart::Ip, IdentityPart::ApiKey],
            &[IdentityPart::Header("x-tenant")],
        ] {
            let identity = refused(parts);
            assert_eq!(identity.parts, ip_parts("203.0.113.7"), "{parts:?}");
            assert_eq!(
                identity.fell_back_from,
                parts.iter().copied().find(|p| *p != IdentityPart::Ip),
                "{parts:?}"
            );
        }
        // IPv6 clients are grouped as the guard groups them; no address at all is `unknown`.
        let v6 = sources.refused(
            Some("2001:db8::7".parse().unwrap()),
            Identity::UserIdElseIp,
            Submitted::Unreadable(Unreadable::NoBody),
        );
        assert_eq!(v6.parts, ip_parts("2001:db8::/64"));
        assert_eq!(
            sources
                .refused(
                    None,
                    Identity::UserIdElseIp,
                    Submitted::Unreadable(Unreadable::NoBody)
                )
                .parts,
            ip_parts("unknown")
        );
    }
}
