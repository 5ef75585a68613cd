//! Auth middleware for the request-path tests: `Authorization: Basic right` passes, anything
//! else is refused, in the two ways auth layers refuse.

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    error::ErrorUnauthorized,
    middleware::Next,
    Error, HttpResponse,
};

fn authorised(req: &ServiceRequest) -> bool {
    req.headers()
        .get("authorization")
        .is_some_and(|v| v == "Basic right")
}

/// Refuses a wrong password with an answer of its own, naming its scheme as auth layers do.
pub async fn answers_401(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    if authorised(&req) {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    Ok(req
        .into_response(
            HttpResponse::Unauthorized()
                .insert_header(("www-authenticate", "Basic"))
                // What a caching-aware auth layer says its refusal varied by.
                .insert_header(("vary", "Authorization"))
                .body("who are you"),
        )
        .map_into_right_body())
}

/// Refuses a wrong password with an error, as actix-web-httpauth does.
pub async fn errs_401(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    if authorised(&req) {
        return next.call(req).await;
    }
    Err(ErrorUnauthorized("who are you"))
}
