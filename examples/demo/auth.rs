//! A stand-in for a real auth layer: `Authorization: Bearer <user>` becomes the user id, and
//! a user named `pro-…` is on the `pro` tier (overrides may give a tier its own limits);
//! `X-API-Key` is an identity only when it is one of the issued keys.
//!
//! It trusts the token as is, which no real app may do. It exists so the demo can show
//! per-user limits; in your app, insert `UserId` from your verified session or token.

use std::{collections::HashSet, env};

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::header::AUTHORIZATION,
    middleware::Next,
    Error, HttpMessage,
};
use ratelimit_runtime::{
    identity::{ApiKeySource, UserId},
    overrides::Tier,
};

/// The API keys the demo has issued: `DEMO_API_KEYS` (comma-separated), else `key_abc` and
/// `key_other`.
fn issued() -> HashSet<String> {
    let listed = env::var("DEMO_API_KEYS").unwrap_or_else(|_| "key_abc,key_other".to_owned());
    listed
        .split(',')
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `X-API-Key` of a request when the demo issued it; any other key, like none, leaves
/// the request counted by its address (`Authorization: Bearer` carries the user here, so a
/// key comes from `X-API-Key` only). In your app, look the key up where you keep keys.
pub fn issued_api_keys() -> ApiKeySource {
    let issued = issued();
    ApiKeySource::from_fn(move |req| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?.trim();
        issued.contains(key).then(|| key.to_owned())
    })
}

pub async fn bearer_user(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let user = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned);
    if let Some(user) = user {
        if user.starts_with("pro-") {
            req.extensions_mut().insert(Tier::new("pro"));
        }
        req.extensions_mut().insert(UserId(user));
    }
    next.call(req).await
}
