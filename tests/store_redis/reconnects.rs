//! When the store opens a new connection to Redis, and when it does not: a connection gone
//! silent, to a demoted primary, or broken by a refused reconnect is replaced; a Redis that
//! is busy or a replica for good is not sent a stream of connections.

use std::time::{Duration, Instant};

use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, Decision, RedisStore, Store, StoreError, StoreErrorKind},
    Algorithm, IdentityPart, Limit, Window,
};

use crate::{
    connections_received, kill_other_clients, limits, login,
    support::{self, RedisServer},
};

/// One check of [`login`] against [`limits`] on the store's own clock.
async fn check_login(store: &RedisStore) -> Result<Decision, StoreError> {
    let (key, limits) = (login(), limits());
    let request = CheckRequest {
        key: &key,
        limits: &limits,
        now_millis: None,
    };
    store.check(request).await
}

/// Waits until `store` answers (its connection is made in the background).
async fn until_connected(store: &RedisStore) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while check_login(store).await.is_err() {
        assert!(Instant::now() < deadline, "the store never connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The path to Redis goes silent without a reset: the connection manager sees no error (a
/// check's timeout just drops its request), so without help every later check would time
/// out until the kernel gives up retransmitting, a quarter of an hour, although Redis
/// answers a new connection at once. After a few timeouts in a row the store opens one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_goes_silent_is_replaced() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let proxy = support::Proxy::start(server.port()).await;
    let store = RedisStore::builder(proxy.url()).build().await.unwrap();
    let check = || check_login(&store);
    until_connected(&store).await;
    // A replacement waits at least a second after the connection was made.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    proxy.freeze();
    let mut outcomes = Vec::new();
    let started = Instant::now();
    loop {
        let checked = check().await;
        outcomes.push(checked.as_ref().map(|_| ()).map_err(StoreError::kind));
        if checked.is_ok() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still failing after 5 s: {outcomes:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Three timeouts, then a probe: the new connection answers, the old one is given a
    // second to answer a `PING` too (a busy server would) and does not; then the new one
    // takes over.
    assert_eq!(
        outcomes[..3],
        [Err(StoreErrorKind::Timeout); 3],
        "{outcomes:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "{:?}: {outcomes:?}",
        started.elapsed()
    );
}

/// The path stays silent for a while, new connections included, then comes back: the store
/// keeps probing once a second or so while neither its connection nor a new one answers, so
/// checks are decided again within a couple of seconds of the path's return, however long
/// the outage was (a probe back-off doubling up to 30 s kept them failing for up to that long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_silent_outage_ends_soon_after_the_path_is_back() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let proxy = support::Proxy::start(server.port()).await;
    let store = RedisStore::builder(proxy.url()).build().await.unwrap();
    until_connected(&store).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    proxy.silence();
    // Long enough for four failed probes: doubling, the fifth would wait 16 s.
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(12) {
        check_login(&store).await.unwrap_err();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.restore();
    let took = until_decided(&store, Duration::from_secs(10)).await;
    let took = took
        .unwrap_or_else(|errors| panic!("not decided 10 s after the path came back: {errors:?}"));
    assert!(
        took < Duration::from_secs(5),
        "decided again {took:?} after the path came back"
    );
}

/// The same when the caller gives up on checks before the store's own timeout (as
/// `RateLimiter::timeout` shorter than the store's does): a check dropped unfinished counts
/// as a timeout of its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_replaced_under_a_callers_shorter_timeout() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let proxy = support::Proxy::start(server.port()).await;
    let store = RedisStore::builder(proxy.url())
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    // The caller gives up after 30 ms, the store would wait 200.
    let check = || tokio::time::timeout(Duration::from_millis(30), check_login(&store));
    until_connected(&store).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    proxy.freeze();
    let started = Instant::now();
    let mut given_up = 0;
    while !matches!(check().await, Ok(Ok(_))) {
        given_up += 1;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still failing after 5 s ({given_up} checks given up)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks `store` until one is decided, for at most `within`: how long it took, or the
/// errors seen (each once, in order).
async fn until_decided(store: &RedisStore, within: Duration) -> Result<Duration, Vec<String>> {
    support::until_ok(within, || check_login(store))
        .await
        .map(|(_, took)| took)
}

/// A failover that leaves the old primary up as a replica, behind a failover proxy (or a
/// DNS name) that sends new connections to the new primary: the store's open connection
/// still reaches the old node, which answers every check `READONLY`, and redis-rs does not
/// reconnect on an answer. After a few such checks a new connection takes over: the store
/// does not stay on the replica for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_to_a_demoted_primary_is_replaced() {
    let (old, new) = tokio::task::spawn_blocking(|| (RedisServer::start(), RedisServer::start()))
        .await
        .unwrap();
    let proxy = support::Proxy::start(old.port()).await;
    let store = RedisStore::builder(proxy.url()).build().await.unwrap();
    until_connected(&store).await;
    let mut admin = old.async_connection().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(new.port())
        .query_async(&mut admin)
        .await
        .unwrap();
    proxy.switch_to(new.port());
    let first = check_login(&store).await;
    assert!(
        matches!(&first, Err(e) if e.to_string().contains("ReadOnly")),
        "the old connection reaches the replica: {first:?}"
    );
    let recovered = until_decided(&store, Duration::from_secs(5)).await;
    assert!(
        recovered.is_ok(),
        "still on the demoted primary after 5 s: {recovered:?}"
    );
}

/// The store's connection drops while another client runs a long script, with a database in
/// the URL: the reconnect's `SELECT` is answered `BUSY`, and redis-rs's connection manager
/// answers that error to every later command, since it reconnects only after I/O errors.
/// Once the script ends, a new connection takes over: the store is not broken for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_refused_while_redis_is_busy_does_not_break_the_store_for_good() {
    let server = tokio::task::spawn_blocking(|| {
        RedisServer::start_with_args(&["--busy-reply-threshold", "100"])
    })
    .await
    .unwrap();
    let url = format!("{}/1", server.url());
    let store = RedisStore::builder(&url).build().await.unwrap();
    until_connected(&store).await;
    let mut admin = server.connection();
    kill_other_clients(&mut admin);
    let script = run_script(&server, "while true do end");
    // The script runs before the store reconnects.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Checks while Redis is busy fail (the route's failure policy applies).
    let busy_until = Instant::now() + Duration::from_millis(2_000);
    let mut refused_select = false;
    while Instant::now() < busy_until {
        if let Err(error) = check_login(&store).await {
            refused_select |= error.to_string().contains("switch database");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused_select, "the reconnect's SELECT was refused");
    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut admin).unwrap();
    script.join().unwrap();
    let recovered = until_decided(&store, Duration::from_secs(10)).await;
    assert!(
        recovered.is_ok(),
        "still failing 10 s after the script ended: {recovered:?}"
    );
}

/// Redis's password changes under a running store and its connection drops: every
/// reconnect is refused (not an I/O error, so redis-rs's connection manager answers that
/// error for ever and only the store's probe replaces the connection). Once the password
/// works again the store decides within about a second: refused at once, by a Redis that
/// answers, the probes do not back off (backed off, they would come 8 s apart after 11 s of
/// refusals, and the store would fail for seconds after the password was restored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_refused_by_its_password_for_a_while_decides_again_soon_after_it_works() {
    let server =
        tokio::task::spawn_blocking(|| RedisServer::start_with_args(&["--requirepass", "before"]))
            .await
            .unwrap();
    let url = format!("redis://:before@127.0.0.1:{}", server.port());
    let store = RedisStore::builder(&url).build().await.unwrap();
    until_connected(&store).await;
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let set_password = |admin: &mut redis::Connection, password: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(password)
            .query(admin)
            .unwrap();
    };
    set_password(&mut admin, "after");
    kill_other_clients(&mut admin);
    let refused_until = Instant::now() + Duration::from_secs(11);
    let mut refusals = 0;
    while Instant::now() < refused_until {
        refusals += usize::from(check_login(&store).await.is_err());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refusals > 100, "{refusals} checks refused in 11 s");
    set_password(&mut admin, "before");
    let recovered = until_decided(&store, Duration::from_secs(20)).await;
    assert!(
        matches!(recovered, Ok(took) if took < Duration::from_millis(2_500)),
        "decided again only after {recovered:?} once the password worked again"
    );
}

/// The store's Redis becomes a replica for good (`REPLICAOF`, no failover proxy in front):
/// every check is answered `READONLY` (a store error, the route's failure policy applies) and
/// a new connection reaches the same replica. The store tries new connections less and less
/// often, not one every second for as long as it lasts, and a primary again is used at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_replica_for_good_does_not_churn_connections() {
    let (replica, primary) =
        tokio::task::spawn_blocking(|| (RedisServer::start(), RedisServer::start()))
            .await
            .unwrap();
    let store = RedisStore::builder(replica.url()).build().await.unwrap();
    until_connected(&store).await;
    let mut admin = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query(&mut admin)
        .unwrap();
    let before = connections_received(&replica);
    let until = Instant::now() + Duration::from_secs(10);
    let mut read_only = 0;
    while Instant::now() < until {
        let checked = check_login(&store).await;
        read_only += usize::from(matches!(&checked, Err(e) if e.to_string().contains("ReadOnly")));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(read_only > 100, "{read_only} checks answered READONLY");
    // Less the one `connections_received` opens itself: replacements at about 1, 3 and 7 s
    // (the probe's new connection and the one it swaps in are one).
    let opened = connections_received(&replica) - before - 1;
    assert!(opened <= 4, "the store opened {opened} connections in 10 s");
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut admin)
        .unwrap();
    let recovered = until_decided(&store, Duration::from_secs(1)).await;
    assert!(recovered.is_ok(), "{recovered:?} once a primary again");
}

/// One check of client `ip` against 1 per hour (GCRA) on the store's clock.
async fn check_one_per_hour(store: &RedisStore, ip: &str) -> Result<Decision, StoreError> {
    let key = RouteKey::new("rl", "GET", "/r", &[(IdentityPart::Ip, ip)]);
    let limits = [Limit::new(1, Window::from_secs(3600), Algorithm::Gcra)];
    store
        .check(CheckRequest {
            key: &key,
            limits: &limits,
            now_millis: None,
        })
        .await
}

/// The same with a route's real traffic: most clients are allowed (their checks write, and
/// a replica answers `READONLY`), a few are over their limit (their checks only read, and a
/// replica decides them). Those refusals say nothing about whether the connection can write:
/// they do not reset the back-off, which would bring back a new connection every second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_a_replica_decides_do_not_reset_the_back_off() {
    let (replica, primary) =
        tokio::task::spawn_blocking(|| (RedisServer::start(), RedisServer::start()))
            .await
            .unwrap();
    // A client over its limit on the primary, replicated to the replica below.
    let on_primary = RedisStore::builder(primary.url()).build().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while check_one_per_hour(&on_primary, "198.51.100.1")
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the primary's store never connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !check_one_per_hour(&on_primary, "198.51.100.1")
            .await
            .unwrap()
            .allowed
    );
    let store = RedisStore::builder(replica.url()).build().await.unwrap();
    until_connected(&store).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query(&mut replica.connection())
        .unwrap();
    // Once the replica holds the primary's data, the over-limit client is refused there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(check_one_per_hour(&store, "198.51.100.1").await, Ok(d) if !d.allowed) {
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = connections_received(&replica);
    let until = Instant::now() + Duration::from_secs(10);
    let (mut read_only, mut refused, mut i) = (0, 0, 0u32);
    while Instant::now() < until {
        for _ in 0..4 {
            i += 1;
            let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
            let checked = check_one_per_hour(&store, &ip).await;
            read_only +=
                usize::from(matches!(&checked, Err(e) if e.to_string().contains("ReadOnly")));
        }
        let checked = check_one_per_hour(&store, "198.51.100.1").await;
        refused += usize::from(matches!(checked, Ok(d) if !d.allowed));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(read_only > 100, "{read_only} checks answered READONLY");
    assert!(refused > 20, "{refused} refusals decided by the replica");
    // Less the one `connections_received` opens itself.
    let opened = connections_received(&replica) - before - 1;
    assert!(opened <= 4, "the store opened {opened} connections in 10 s");
}

/// A Redis busy with a long script answers every command `BUSY` at once, the probe's `PING`
/// on the old connection too: that is a busy server, not a refused connection, and it is
/// probed less and less often, not every second as a refused password is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_busy_with_a_script_is_not_sent_a_connection_a_second() {
    let server = tokio::task::spawn_blocking(|| {
        RedisServer::start_with_args(&["--busy-reply-threshold", "100"])
    })
    .await
    .unwrap();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    until_connected(&store).await;
    // A replacement waits at least a second after the connection was made.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = connections_received(&server);
    let script = run_script(
        &server,
        "local t = redis.call('TIME')[1] + 0; while redis.call('TIME')[1] + 0 - t < 10 do end",
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let until = Instant::now() + Duration::from_millis(9_000);
    let mut busy_errors = 0;
    while Instant::now() < until {
        let checked = futures_util::future::join_all((0..8).map(|k| {
            let store = &store;
            async move { check_one_per_hour(store, &format!("198.51.100.{}", 10 + k)).await }
        }))
        .await;
        busy_errors += checked
            .iter()
            .filter(|c| matches!(c, Err(e) if e.kind() != StoreErrorKind::Timeout))
            .count();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    script.join().unwrap();
    // Connection attempts queued in the listen backlog are accepted now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(busy_errors > 100, "{busy_errors} checks refused BUSY");
    // Less the two connections this test opened itself (the script's and the count's).
    let opened = connections_received(&server) - before - 2;
    assert!(
        opened <= 4,
        "{opened} connections opened while Redis ran a 10 s script"
    );
}

/// Runs the Lua `source` on `server` on a thread of its own, until it ends or is killed.
fn run_script(server: &RedisServer, source: &'static str) -> std::thread::JoinHandle<()> {
    let mut busy = server.connection();
    std::thread::spawn(move || {
        let _ = redis::cmd("EVAL")
            .arg(source)
            .arg(0)
            .query::<redis::Value>(&mut busy);
    })
}

/// A Redis that is busy (here `DEBUG SLEEP`; in life a slow command, a fork, `CLIENT
/// PAUSE`) rather than unreachable: a new connection would not help, and connections opened
/// at it every second would add to its load. Probes for one back off, and none replaces
/// the connection while Redis does not answer it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_redis_is_not_sent_a_stream_of_connections() {
    let server = tokio::task::spawn_blocking(|| {
        RedisServer::start_with_args(&["--enable-debug-command", "local"])
    })
    .await
    .unwrap();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let check = || check_login(&store);
    until_connected(&store).await;
    let received = |conn: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_connections_received")
    };
    let mut admin = server.connection();
    let before = received(&mut admin);
    let sleeper = std::thread::spawn(move || {
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(5)
            .query(&mut admin)
            .unwrap();
        admin
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let mut timeouts = 0;
    while started.elapsed() < Duration::from_millis(4_800) {
        // 8 checks in flight at a time, like a busy worker.
        let checked = futures_util::future::join_all((0..8).map(|_| check())).await;
        timeouts += checked
            .iter()
            .filter(|c| matches!(c, Err(e) if e.kind() == StoreErrorKind::Timeout))
            .count();
    }
    let mut admin = sleeper.join().unwrap();
    assert!(timeouts > 100, "{timeouts} timeouts while Redis slept");
    // Connection attempts queued in the listen backlog are accepted now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let opened = received(&mut admin) - before;
    // Probes at about 1, 3 and (not yet) 7 s; each opens one connection (a check of its
    // own may retry within the second it has).
    assert!(
        opened <= 4,
        "{opened} connections opened while Redis was busy for 5 s"
    );
    // And the store answers again on its own.
    let deadline = Instant::now() + Duration::from_secs(3);
    while check().await.is_err() {
        assert!(Instant::now() < deadline, "no answer after Redis woke");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
