//! Stacked limits may count different identities: the first one's is the route's, the
//! others carry their own.

#![deny(warnings)]

use actix_web::{post, App, HttpResponse, Responder};
use ratelimit_runtime::{rate_limit, registry, Count, Identity, IdentityPart};

#[rate_limit(limit = 100, window = "1h", identity = "ip")]
#[rate_limit(
    limit = 10,
    window = "5m",
    identity = "username",
    count = "failures",
    block = "15m"
)]
#[post("/login")]
async fn login() -> impl Responder {
    HttpResponse::Ok()
}

fn main() {
    let declaration = registry::declarations()
        .find(|d| d.function() == "login")
        .expect("registered");
    let policy = declaration.policy().limited().expect("a limited route");
    assert_eq!(policy.identity(), Identity::Parts(&[IdentityPart::Ip]));
    let [per_ip, per_name] = policy.limits() else {
        panic!("two limits")
    };
    assert_eq!(per_ip.identity(), None);
    assert_eq!(
        per_name.identity(),
        Some(Identity::Parts(&[IdentityPart::Username]))
    );
    assert_eq!(per_name.count(), Count::Failures);
    assert_eq!(
        policy.identities(),
        [
            Identity::Parts(&[IdentityPart::Ip]),
            Identity::Parts(&[IdentityPart::Username])
        ]
    );
    assert!(policy.reads_username());
    let _app = App::new().service(login);
}
