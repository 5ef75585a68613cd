//! Reading a policy's identity parts off a request.

use std::net::IpAddr;

use actix_web::dev::ServiceRequest;

use super::{
    body::{Submitted, UNREADABLE_USERNAME},
    ApiKeySource, TrustedProxies, UserIdSource, UsernameField,
};
use crate::policy::{Identity, IdentityPart};

/// Where each identity part comes from; set on the limiter.
#[derive(Clone, Debug, Default)]
pub struct IdentitySources {
    /// How to find the client address behind proxies.
    pub trusted_proxies: TrustedProxies,
    /// Where the submitted username is in the body.
    pub username: UsernameField,
    /// Where the authenticated user id comes from.
    pub user_id: UserIdSource,
    /// Where the API key comes from.
    pub api_key: ApiKeySource,
}

/// The identity of one request, ready for the key builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// Each part with its raw value (hashing happens in the key builder,
    /// `RouteKey::for_client`).
    pub parts: Vec<(IdentityPart, String)>,
    /// The part that was missing when the identity fell back to the client IP.
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

impl IdentitySources {
    /// Reads `identity` off the request. The body is read only when a part needs it, and
    /// is always put back byte for byte.
    pub async fn extract(&self, req: &mut ServiceRequest, identity: Identity) -> ClientIdentity {
        self.extract_with(req, identity, None, None).await
    }

    /// [`IdentitySources::extract`], with the client address and the username the body
    /// submitted when they were read already (`client`, `submitted`): neither is read again.
    pub(crate) async fn extract_with(
        &self,
        req: &mut ServiceRequest,
        identity: Identity,
        client: Option<Option<IpAddr>>,
        submitted: Option<Submitted>,
    ) -> ClientIdentity {
        let ip = match client {
            Some(client) => self.trusted_proxies.text(client),
            None => self.trusted_proxies.client_ip(req),
        };
        let mut submitted = match submitted {
            Some(submitted) => Some(submitted),
            None if reads_body(identity) => Some(self.username.read(req).await),
            None => None,
        };
        assemble(ip, identity, |part| match part {
            IdentityPart::Ip => None,
            IdentityPart::Username => submitted.take().and_then(username),
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
                IdentityPart::Username => submitted.take().and_then(username),
                _ => None,
            },
        )
    }
}

/// Whether `identity` counts the username its body submits.
pub(crate) fn reads_body(identity: Identity) -> bool {
    identity.parts().contains(&IdentityPart::Username)
}

/// The username part's value: the submitted name, or the one every unreadable body shares;
/// none when the body has no username (the identity falls back to the address).
fn username(submitted: Submitted) -> Option<String> {
    match submitted {
        Submitted::Username(name) => Some(name),
        Submitted::Unreadable => Some(UNREADABLE_USERNAME.to_owned()),
        Submitted::Missing => None,
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
    ClientIdentity {
        parts: values,
        fell_back_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::TrustedProxies;

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
            sources.refused(client, Identity::Parts(parts), Submitted::Unreadable)
        };

        assert_eq!(
            sources.refused(client, Identity::UserIdElseIp, Submitted::Missing),
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
                fell_back_from: None
            }
        );
        // A username read before the body was passed on counts as itself; a body without one
        // counts by the address alone, as at the guard.
        let login = Identity::Parts(&[IdentityPart::Ip, IdentityPart::Username]);
        let alice = Submitted::Username("alice".to_owned());
        assert_eq!(
            sources.refused(client, login, alice).parts,
            [
                (IdentityPart::Ip, "203.0.113.7".to_owned()),
                (IdentityPart::Username, "alice".to_owned()),
            ]
        );
        let missing = sources.refused(client, login, Submitted::Missing);
        assert_eq!(missing.parts, ip_parts("203.0.113.7"));
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
            Submitted::Missing,
        );
        assert_eq!(v6.parts, ip_parts("2001:db8::/64"));
        assert_eq!(
            sources
                .refused(None, Identity::UserIdElseIp, Submitted::Missing)
                .parts,
            ip_parts("unknown")
        );
    }
}
