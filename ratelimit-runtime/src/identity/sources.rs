//! Reading a policy's identity parts off a request.

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
        let ip = self.trusted_proxies.client_ip(req);
        let parts: &[IdentityPart] = match identity {
            Identity::UserIdElseIp => {
                let part = match self.user_id.read(req) {
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
            let value = match part {
                IdentityPart::Ip => Some(ip.clone()),
                IdentityPart::Username => match self.username.read(req).await {
                    Submitted::Username(name) => Some(name),
                    Submitted::Unreadable => Some(UNREADABLE_USERNAME.to_owned()),
                    Submitted::Missing => None,
                },
                IdentityPart::UserId => self.user_id.read(req),
                IdentityPart::ApiKey => self.api_key.read(req),
                IdentityPart::Header(name) => req
                    .headers()
                    .get(*name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned),
            };
            match value {
                Some(value) => values.push((*part, value)),
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
}
