//! A route's default limits beside two tiers': one stacked, one counting its own identity.
//! A tier shares a window with the default (its keys are its own) and inherits the
//! default's identity and route-wide keys.

#![deny(warnings)]

use actix_web::{get, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, FailMode, Identity, IdentityPart, RouteHeaders};

#[rate_limit(limit = 100, window = "1m", identity = "user_id", fail = "closed", headers = "none")]
#[rate_limit(tier = "pro", limit = 1000, window = "1m")]
#[rate_limit(tier = "pro", limit = 20000, window = "1h", algorithm = "gcra")]
#[rate_limit(tier = "team-eu", limit = 300, window = "1m", identity = "api_key")]
#[rate_limit(limit = 1000, window = "1h")]
#[get("/search")]
async fn search() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let _ = App::new().service(search);
    let declaration = registry::declarations()
        .find(|d| d.function() == "search")
        .expect("registered");
    let policy = declaration.policy().limited().expect("limited");
    assert_eq!(policy.limits().len(), 2, "the default's two limits");
    let names: Vec<&str> = policy.tiers().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["pro", "team-eu"]);

    let pro = policy.tier("pro").expect("pro");
    assert_eq!(pro.limits().len(), 2);
    assert_eq!(pro.limits()[0].max(), 1000);
    assert_eq!(pro.limits()[1].max(), 20000);
    assert_eq!(pro.identity(), Identity::Parts(&[IdentityPart::UserId]));
    assert_eq!(pro.fail(), FailMode::Closed);
    assert_eq!(pro.headers(), RouteHeaders::Hidden);

    let team = policy.tier("team-eu").expect("team-eu");
    assert_eq!(team.identity(), Identity::Parts(&[IdentityPart::ApiKey]));
    assert_eq!(team.fail(), FailMode::Closed);
    assert!(policy.tier("free").is_none());
    assert_eq!(declaration.policy().for_tier("free"), Some(*policy));
}
