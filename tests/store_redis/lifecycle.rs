//! A store's life around its Redis: a connection of its own per worker, a restart, a Redis
//! down when the store is built or stalled under it, a password, and the configuration
//! errors a builder reports.

use std::time::{Duration, Instant};

use ratelimit_runtime::{
    store::{
        AdjustRequest, Adjustment, CheckRequest, RedisClusterStore, RedisStore, Store,
        StoreErrorKind,
    },
    RateLimiter,
};

use crate::{
    check, kill_other_clients, limits, login,
    support::{Backend, RedisServer, T0},
};

/// What `RateLimiter` gives each actix worker: a store with connections of its own, counting
/// in the same keys as the store it came from.
async fn a_worker_store_counts_with_its_parent(backend: Backend) {
    let store = backend.store();
    let worker = store
        .worker_store()
        .expect("inside a Tokio runtime a Redis store opens a worker's own");
    assert_eq!(worker.kind(), store.kind());
    assert_eq!(worker.timeout(), store.timeout());
    let mut remaining = Vec::new();
    for on in [&store, &worker, &store, &worker, &worker] {
        remaining.push(check(&**on, T0).await.unwrap().limits[0].remaining);
    }
    // The sliding log allows 5: one budget across both.
    assert_eq!(remaining, [4, 3, 2, 1, 0]);
    assert!(!check(&*worker, T0).await.unwrap().allowed);
    assert!(!check(&*store, T0).await.unwrap().allowed);
    backend.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_store_counts_with_its_parent_standalone() {
    a_worker_store_counts_with_its_parent(Backend::standalone().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_store_counts_with_its_parent_in_a_cluster() {
    a_worker_store_counts_with_its_parent(Backend::cluster().await).await;
}

#[test]
fn outside_a_runtime_a_worker_shares_the_store() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(RedisStore::builder(server.url()).build())
        .unwrap();
    // No runtime here to drive a connection of its own.
    assert!(store.worker_store().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_between_checks_is_invisible() {
    let mut server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    // The default 50 ms budget covers reconnecting, NOSCRIPT and EVAL.
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    assert_eq!(check(&store, T0).await.unwrap().limits[0].remaining, 4);
    server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    // The old connection is dead and the new server has neither the script nor the counts:
    // the store reconnects, falls back to EVAL, and answers on the first try.
    let after = check(&store, T0)
        .await
        .expect("the first check after a restart succeeds");
    assert!(after.allowed);
    assert_eq!(after.limits[0].remaining, 4, "a restarted, empty Redis");
    drop(server);
}

/// A reset and a read of a client's budget on a connection Redis closed (idle clients
/// closed by `timeout`, `CLIENT KILL`, a restart) are carried out at the first try, as a
/// check is: a password reset that clears a sign-in lockout does not fail for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_or_a_peek_on_a_closed_connection_is_carried_out() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let (key, limits) = (login(), limits());
    let request = CheckRequest {
        key: &key,
        limits: &limits,
        now_millis: Some(T0),
    };
    let mut admin = server.connection();
    for _ in 0..2 {
        store.check(request).await.unwrap();
    }
    kill_other_clients(&mut admin);
    store
        .adjust(AdjustRequest::new(
            &key,
            &limits,
            Some(T0),
            Adjustment::Reset,
        ))
        .await
        .expect("the first reset on a closed connection");
    assert_eq!(store.check(request).await.unwrap().limits[0].remaining, 4);
    kill_other_clients(&mut admin);
    let peeked = store
        .peek(request)
        .await
        .expect("the first peek on a closed connection");
    assert!(peeked.allowed);
    assert_eq!(
        store.check(request).await.unwrap().limits[0].remaining,
        3,
        "a peek counts nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_built_while_redis_is_down_fails_fast_then_recovers_by_itself() {
    let mut server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    server.kill();

    let started = Instant::now();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "building waited for Redis"
    );

    for _ in 0..3 {
        let started = Instant::now();
        let err = check(&store, T0)
            .await
            .expect_err("no decision without Redis");
        assert!(
            matches!(
                err.kind(),
                StoreErrorKind::Connection | StoreErrorKind::Timeout
            ),
            "{err}"
        );
        assert!(
            started.elapsed() < store.timeout() + Duration::from_millis(25),
            "{:?}",
            started.elapsed()
        );
    }

    let mut server = tokio::task::spawn_blocking(move || {
        server.start_again();
        server
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let decision = loop {
        match check(&store, T0).await {
            Ok(decision) => break decision,
            Err(err) if Instant::now() < deadline => {
                assert!(
                    matches!(
                        err.kind(),
                        StoreErrorKind::Connection | StoreErrorKind::Timeout
                    ),
                    "{err}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(err) => panic!("the store did not recover within 5 s after Redis came back: {err}"),
        }
    };
    assert!(decision.allowed);
    server.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_times_out_within_the_timeout() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    assert_eq!(store.timeout(), Duration::from_millis(50), "the default");
    check(&store, T0).await.expect("a warm connection");

    let mut admin = server.async_connection().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("ALL")
        .query_async(&mut admin)
        .await
        .unwrap();
    let started = Instant::now();
    let err = check(&store, T0)
        .await
        .expect_err("no decision from a stalled Redis");
    let waited = started.elapsed();
    assert_eq!(err.kind(), StoreErrorKind::Timeout, "{err}");
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_millis(50 + 25), "{waited:?}");

    // Once Redis answers again, so does the store, on the same connection.
    let deadline = Instant::now() + Duration::from_secs(3);
    while check(&store, T0).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the store did not recover after the pause"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_is_used_and_a_wrong_one_is_an_error() {
    let server =
        tokio::task::spawn_blocking(|| RedisServer::start_with_args(&["--requirepass", "s3cret"]))
            .await
            .unwrap();
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port());
    let store = RedisStore::builder(&url)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    assert!(check(&store, T0).await.unwrap().allowed);
    assert!(!format!("{store:?}").contains("s3cret"), "{store:?}");

    let wrong = format!("redis://:nope@127.0.0.1:{}", server.port());
    let store = RedisStore::builder(&wrong)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let err = check(&store, T0)
        .await
        .expect_err("no decision without authentication");
    assert_ne!(err.kind(), StoreErrorKind::Protocol, "{err}");
}

#[tokio::test]
async fn a_malformed_url_is_a_configuration_error() {
    let err = RedisStore::builder("http://:s3cret@nowhere")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("invalid redis url"), "{err}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
    let err = RedisClusterStore::builder(Vec::<String>::new())
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at least one node"), "{err}");
}

/// A timeout of `Duration::MAX` ("never") builds, the cluster store's too: no duration is
/// added past its range.
#[tokio::test]
async fn a_timeout_of_duration_max_builds() {
    let cluster = RedisClusterStore::builder(vec!["redis://127.0.0.1:1".to_owned()])
        .timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .build()
        .await;
    assert!(cluster.is_ok());
    let standalone = RedisStore::builder("redis://127.0.0.1:1")
        .timeout(Duration::MAX)
        .build()
        .await;
    assert!(standalone.is_ok());
}

/// `check_store` names why a store's connection fails (a wrong password, a port nothing
/// listens on) rather than the request timeout it first runs into, answers ready for a good
/// one, and gives a silent server one second more than the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_store_names_why_the_connection_fails() {
    let server =
        tokio::task::spawn_blocking(|| RedisServer::start_with_args(&["--requirepass", "s3cret"]))
            .await
            .unwrap();
    let startup = |url: String| async move {
        let store = RedisStore::builder(url).build().await.unwrap();
        let started = Instant::now();
        let answer = RateLimiter::new(store).check_store().await;
        (answer, started.elapsed())
    };
    let port = server.port();
    let (answer, _) = startup(format!("redis://:s3cret@127.0.0.1:{port}")).await;
    assert!(answer.is_ok(), "{answer:?}");

    let (answer, took) = startup(format!("redis://:nope@127.0.0.1:{port}")).await;
    let error = answer.expect_err("a wrong password");
    assert_ne!(error.kind(), StoreErrorKind::Timeout, "{error}");
    assert!(error.to_string().contains("uthentication"), "{error}");
    assert!(took < Duration::from_secs(1), "{took:?}");

    let nothing = crate::support::free_port();
    let (answer, _) = startup(format!("redis://127.0.0.1:{nothing}")).await;
    let error = answer.expect_err("nothing listens");
    assert_eq!(error.kind(), StoreErrorKind::Connection, "{error}");

    // A silent server: the store's timeout (50 ms), then a second more, then a timeout.
    server.pause();
    let (answer, took) = startup(format!("redis://:s3cret@127.0.0.1:{port}")).await;
    server.resume();
    let error = answer.expect_err("a paused server");
    assert_eq!(error.kind(), StoreErrorKind::Timeout, "{error}");
    assert!(
        took >= RateLimiter::STARTUP_GRACE && took < Duration::from_secs(3),
        "{took:?}"
    );
}
