//! A stand-in for a real auth layer: `Authorization: Bearer <user>` becomes the user id, and
//! a user named `pro-…` is on the `pro` tier (overrides may give a tier its own limits).
//!
//! It trusts the token as is, which no real app may do. It exists so the demo can show
//! per-user limits; in your app, insert `UserId` from your verified session or token.

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::header::AUTHORIZATION,
    middleware::Next,
    Error, HttpMessage,
};
use ratelimit_runtime::{identity::UserId, overrides::Tier};

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
