//! Whom a request counts for: the client address behind trusted proxies (and only them),
//! and the user id the auth layer puts in the request's extensions.

use actix_web::{dev::Service as _, test};
use ratelimit_runtime::settings::Identities;
use ratelimit_runtime::{
    clock::ManualClock,
    identity::{TrustedProxies, UserId},
    store::MemoryStore,
    RateLimiter,
};

use crate::{
    app, from, redis_limiter, status_of,
    support::{RedisServer, T0},
};

#[actix_web::test]
async fn spoofed_leftmost_forwarded_for_entries_do_not_change_the_budget() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let limiter = redis_limiter(&server, &clock)
        .await
        .identity(Identities::new().trusted_proxies(TrustedProxies::hops(1)));
    let app = test::init_service(app(limiter)).await;
    let via_proxy = |xff: &str| {
        from("10.0.0.2")
            .insert_header(("x-forwarded-for", xff.to_owned()))
            .uri("/orders/1")
    };
    assert_eq!(status_of(&app, via_proxy("198.51.100.20")).await, 200);
    assert_eq!(
        status_of(&app, via_proxy("1.1.1.1, 198.51.100.20")).await,
        200
    );
    assert_eq!(
        status_of(&app, via_proxy("2.2.2.2, 3.3.3.3, 198.51.100.20")).await,
        200
    );
    assert_eq!(
        status_of(&app, via_proxy("4.4.4.4, 198.51.100.20")).await,
        429
    );
    // The next client behind the same proxy has its own budget.
    assert_eq!(status_of(&app, via_proxy("198.51.100.21")).await, 200);
}

/// With the proxies' networks named, a client that connects around the proxy is counted by
/// its own address, whatever forwarding header it sends.
#[actix_web::test]
async fn a_peer_outside_the_proxies_networks_is_the_client() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let limiter = redis_limiter(&server, &clock).await.identity(
        Identities::new().trusted_proxies(TrustedProxies::hops(1).only_from(["10.0.0.0/8"])),
    );
    let app = test::init_service(app(limiter)).await;
    let sent = |peer: &str, xff: String| {
        from(peer)
            .insert_header(("x-forwarded-for", xff))
            .uri("/orders/1")
    };
    let mut direct = Vec::new();
    for i in 0..4 {
        direct.push(status_of(&app, sent("203.0.113.9", format!("198.51.100.{i}"))).await);
    }
    assert_eq!(direct, [200, 200, 200, 429]);
    // Through the proxy, each client has its own budget, one the direct client named too.
    assert_eq!(
        status_of(&app, sent("10.0.0.2", "198.51.100.0".into())).await,
        200
    );
    assert_eq!(
        status_of(&app, sent("10.0.0.2", "198.51.100.3".into())).await,
        200
    );
}

#[actix_web::test]
async fn with_zero_trusted_hops_the_forwarding_headers_are_ignored() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let app = test::init_service(app(redis_limiter(&server, &clock).await)).await;
    for i in 0..3 {
        let req = from("10.0.0.2")
            .insert_header(("x-forwarded-for", format!("192.0.2.{i}")))
            .uri("/orders/1");
        assert_eq!(status_of(&app, req).await, 200);
    }
    let req = from("10.0.0.2")
        .insert_header(("x-forwarded-for", "192.0.2.99"))
        .uri("/orders/1");
    assert_eq!(status_of(&app, req).await, 429);
}

#[actix_web::test]
async fn user_id_comes_from_the_auth_layer_extension_not_a_header() {
    let clock = ManualClock::at(T0);
    let limiter = RateLimiter::new(MemoryStore::new()).clock(clock.clone());
    let app = test::init_service(app(limiter).wrap_fn(|req, srv| {
        use actix_web::HttpMessage;
        if let Some(user) = req
            .headers()
            .get("x-test-session")
            .and_then(|v| v.to_str().ok())
        {
            req.extensions_mut().insert(UserId(user.to_owned()));
        }
        srv.call(req)
    }))
    .await;
    let as_user = |user: &str| {
        from("203.0.113.7")
            .insert_header(("x-test-session", user.to_owned()))
            .uri("/me")
    };
    assert_eq!(status_of(&app, as_user("u1")).await, 200);
    assert_eq!(status_of(&app, as_user("u1")).await, 429);
    assert_eq!(
        status_of(&app, as_user("u2")).await,
        200,
        "another user, same address"
    );
    // Without a user the identity falls back to the IP and is still limited.
    assert_eq!(status_of(&app, from("203.0.113.9").uri("/me")).await, 200);
    assert_eq!(
        status_of(
            &app,
            from("203.0.113.9")
                .insert_header(("x-user-id", "forged"))
                .uri("/me")
        )
        .await,
        429
    );
}
