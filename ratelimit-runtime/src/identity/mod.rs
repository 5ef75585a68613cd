//! Who the client is: the values of a policy's identity parts, taken from the request.
//!
//! A missing part never makes a request unlimited: the identity falls back to the client IP
//! and says so, so logs can tell.

mod api_key;
mod body;
mod canonical;
mod client_ip;
mod sources;
mod user_id;

pub use api_key::ApiKeySource;
pub(crate) use body::{Submitted, Unreadable};
pub use body::{UsernameReader, DEFAULT_BODY_LIMIT};
pub use canonical::{canonical_username, Canonicalizer, MAX_USERNAME_CHARS};
pub use client_ip::{ForwardedHeader, TrustedProxies};
pub use sources::ClientIdentity;
pub(crate) use sources::{reads_body, IdentitySources};
pub use user_id::{UserId, UserIdSource};
