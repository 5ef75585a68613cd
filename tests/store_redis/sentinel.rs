//! A primary watched by three sentinels (and one replica), killed under load while one
//! sentinel is stopped (its connections silent): no check waits past its timeout, checks are
//! decided again within 2 seconds of the promotion, they are exact before and after it, and
//! what the failover lost (what replication had not copied) is measured. The store never
//! sends a check to the replica while it is one.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use futures_util::future::join_all;
use ratelimit_runtime::{
    key::RouteKey,
    store::{CheckRequest, RedisSentinelStore, Store},
    Algorithm, IdentityPart, Limit, Window,
};

use crate::support::{LoneSentinel, Proxy, RedisServer, SentinelSetup, MASTER_NAME, T0};

const TIMEOUT: Duration = Duration::from_millis(50);

/// What every check must stay under: the timeout plus a margin for a shared 2-core machine.
const BOUND: Duration = Duration::from_millis(250);

fn key(client: &str) -> RouteKey {
    RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Ip, client)])
}

fn ten() -> [Limit; 1] {
    [Limit::new(10, Window::from_secs(60), Algorithm::SlidingLog)]
}

fn far() -> [Limit; 1] {
    [Limit::new(
        1_000_000,
        Window::from_secs(60),
        Algorithm::FixedWindow,
    )]
}

/// 30 concurrent checks of a fresh client under a limit of 10: exactly 10 allowed. A round
/// with an undecided check (a healthy Redis missing a 50 ms deadline on a loaded machine) is
/// repeated with another client.
async fn assert_exact(store: &RedisSentinelStore, tag: &str) {
    let limits = ten();
    for round in 0..3 {
        let key = key(&format!("{tag}-{round}"));
        let checks = join_all((0..30).map(|_| {
            store.check(CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(T0),
            })
        }))
        .await;
        if checks.iter().any(Result::is_err) {
            continue;
        }
        let allowed = checks
            .iter()
            .filter(|c| c.as_ref().unwrap().allowed)
            .count();
        assert_eq!(
            allowed, 10,
            "{tag}: {allowed} of 30 allowed under a limit of 10"
        );
        return;
    }
    panic!("{tag}: three rounds with undecided checks");
}

struct Sample {
    sent: Instant,
    latency: Duration,
    decided: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_under_load_fails_in_time_and_decides_again_exactly() {
    let mut setup = tokio::task::spawn_blocking(SentinelSetup::start)
        .await
        .unwrap();
    let store = RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let (far_limits, counted) = (far(), key("counted"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while store
        .peek(CheckRequest {
            key: &counted,
            limits: &far_limits,
            now_millis: Some(T0),
        })
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the store never reached the primary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_exact(&store, "before").await;

    // Load: 16 loops of fresh clients, and one that counts on one client throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let loops = (0..16).map(|l| {
        let (store, stop, samples) = (store.clone(), Arc::clone(&stop), Arc::clone(&samples));
        tokio::spawn(async move {
            let limits = far();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let key = key(&format!("load-{l}-{n}"));
                let sent = Instant::now();
                let checked = store
                    .check(CheckRequest {
                        key: &key,
                        limits: &limits,
                        now_millis: Some(T0),
                    })
                    .await;
                let decided = checked.is_ok();
                samples.lock().unwrap().push(Sample {
                    sent,
                    latency: sent.elapsed(),
                    decided,
                });
                // An undecided check pauses its loop, so an outage is not a busy loop.
                if !decided {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        })
    });
    let loops: Vec<_> = loops.collect();
    let counter = tokio::spawn({
        let (store, stop) = (store.clone(), Arc::clone(&stop));
        async move {
            let (limits, key) = (far(), key("counted"));
            let mut allowed = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let checked = store
                    .check(CheckRequest {
                        key: &key,
                        limits: &limits,
                        now_millis: Some(T0),
                    })
                    .await;
                allowed += u32::from(checked.is_ok_and(|d| d.allowed));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            allowed
        }
    });

    tokio::time::sleep(Duration::from_millis(500)).await;
    let replica_scripts = setup.replica().scripts_run();
    let replica_port = setup.replica().port();
    // A sentinel that stopped answering holds no round of asking: the other two agree.
    setup.pause_sentinel(0);
    let killed = Instant::now();
    setup.kill_primary();
    let promoted = loop {
        let port = tokio::task::block_in_place(|| setup.named_primary_port());
        if port == Some(replica_port) {
            break Instant::now();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the sentinels never promoted the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.unwrap();
    }
    let allowed = counter.await.unwrap();
    println!(
        "the sentinels promoted the replica {:?} after the primary was killed",
        promoted - killed
    );

    assert_eq!(
        replica_scripts, 0,
        "a check was sent to the replica while it was one"
    );
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    let slowest = samples.iter().map(|s| s.latency).max().unwrap();
    println!("{} checks, the slowest {slowest:?}", samples.len());
    assert!(slowest < BOUND, "a check took {slowest:?}");
    let first_decided_after = samples
        .iter()
        .filter(|s| s.sent > promoted && s.decided)
        .map(|s| s.sent + s.latency)
        .min()
        .expect("checks were decided after the promotion");
    println!(
        "decided again {:?} after the promotion was seen",
        first_decided_after.saturating_duration_since(promoted)
    );
    assert!(first_decided_after < promoted + Duration::from_secs(2));
    let late: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.sent > promoted + Duration::from_secs(2))
        .collect();
    let late_decided = late.iter().filter(|s| s.decided).count();
    assert!(
        late.len() > 100 && late_decided * 100 >= late.len() * 99,
        "from 2 s after the promotion {late_decided} of {} checks were decided",
        late.len()
    );
    let before: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.sent + s.latency < killed)
        .collect();
    assert!(
        before.iter().all(|s| s.decided),
        "a check failed before the kill"
    );

    // What the promoted replica holds of the counted client: every allowed check but what
    // replication had not copied when the primary died.
    let state = store
        .peek(CheckRequest {
            key: &counted,
            limits: &far_limits,
            now_millis: Some(T0),
        })
        .await
        .unwrap();
    let held = 1_000_000 - state.limits[0].remaining;
    println!(
        "the counted client was allowed {allowed} times; the new primary holds {held}: the failover lost {}",
        i64::from(allowed) - i64::from(held)
    );
    // A check in flight when the primary died may have counted without its answer arriving.
    assert!(
        held <= allowed + 1 && allowed <= held + 3,
        "allowed {allowed}, held {held}"
    );
    assert_exact(&store, "after").await;
}

/// `(script calls, connections received)` of the server behind `conn`.
fn script_calls_and_connections(conn: &mut redis::Connection) -> (u64, u64) {
    let stats: String = redis::cmd("INFO").arg("all").query(conn).unwrap();
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split(name)
            .nth(1)?
            .split(',')
            .next()?
            .trim()
            .parse()
            .ok()
    };
    let scripts = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| field(l, "calls="))
        .sum();
    let connections = stats
        .lines()
        .find_map(|l| field(l, "total_connections_received:"))
        .expect("total_connections_received");
    (scripts, connections)
}

/// Sentinels and a primary that want passwords of their own: the store signs in to each
/// with its own, and then, as the standalone store does, sends one script call per check over
/// one connection; with a wrong password for either, nothing is decided.
/// A primary that stops answering (paused: its connections stay open and go silent) is left
/// for the one the sentinels name as soon as the store learns of it: an attempt to connect to
/// the silent one, which waits out its timeout (here over 10 s), does not hold back the
/// attempt to the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_primary_is_left_as_soon_as_the_sentinels_name_another() {
    let setup = tokio::task::spawn_blocking(SentinelSetup::start)
        .await
        .unwrap();
    let store = RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let (limits, client) = (far(), key("silent"));
    let check = || {
        store.check(CheckRequest {
            key: &client,
            limits: &limits,
            now_millis: Some(T0),
        })
    };
    let reached = Instant::now();
    while check().await.is_err() {
        assert!(
            reached.elapsed() < Duration::from_secs(5),
            "the store never reached the primary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replica_port = setup.replica().port();
    setup.primary().pause();
    let paused = Instant::now();
    let mut promoted = None;
    // Checks keep coming, as under load, until one is decided after the promotion.
    loop {
        let decided = check().await.is_ok();
        match promoted {
            None if tokio::task::block_in_place(|| setup.named_primary_port())
                == Some(replica_port) =>
            {
                promoted = Some(Instant::now());
            }
            Some(_) if decided => break,
            _ => {}
        }
        assert!(
            paused.elapsed() < Duration::from_secs(30),
            "not decided again (the promotion seen {:?} after the pause)",
            promoted.map(|at| at - paused)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = promoted.expect("seen").elapsed();
    println!("decided again {after:?} after the promotion was seen");
    assert!(
        after < Duration::from_secs(2),
        "decided again {after:?} after the promotion"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_signs_in_to_the_sentinels_and_the_primary_with_their_own_credentials() {
    let setup = tokio::task::spawn_blocking(|| {
        SentinelSetup::start_with_passwords("sentinel-secret", "primary-secret")
    })
    .await
    .unwrap();
    let limits = far();
    let client = key("signed-in");
    let check = |store: RedisSentinelStore| {
        let (limits, client) = (limits, client.clone());
        async move {
            store
                .check(CheckRequest {
                    key: &client,
                    limits: &limits,
                    now_millis: Some(T0),
                })
                .await
        }
    };
    let anonymous: Vec<String> = setup
        .sentinel_urls()
        .iter()
        .map(|url| url.replace(":sentinel-secret@", ""))
        .collect();
    let without_sentinel_password = RedisSentinelStore::builder(anonymous, MASTER_NAME)
        .master_password("primary-secret")
        .build()
        .await
        .unwrap();
    let wrong_primary_password = RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
        .master_password("not-it")
        .build()
        .await
        .unwrap();
    // The first round of asking may outlast a check; after it, the sentinels' refusal is
    // the answer at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let refused = check(without_sentinel_password.clone()).await.unwrap_err();
        assert!(refused.to_string().contains("sentinel"), "{refused}");
        check(wrong_primary_password.clone()).await.unwrap_err();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let store = RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
        .master_password("primary-secret")
        .build()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while check(store.clone()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the store never reached the primary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut primary = redis::Client::open(format!(
        "redis://:primary-secret@127.0.0.1:{}",
        setup.primary().port()
    ))
    .and_then(|c| c.get_connection())
    .unwrap();
    let (scripts, connections) = script_calls_and_connections(&mut primary);
    for _ in 0..100 {
        assert!(check(store.clone()).await.unwrap().allowed);
    }
    let (scripts_after, connections_after) = script_calls_and_connections(&mut primary);
    assert_eq!(scripts_after - scripts, 100, "script calls for 100 checks");
    assert_eq!(
        connections_after, connections,
        "a check opened a connection"
    );

    // An ACL user on the primary (`master_username`): its name and password are sent, and
    // a wrong name with the right password is refused.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "app",
            "reset",
            "on",
            ">app-secret",
            "~rl:*",
            "+@all",
        ])
        .query(&mut primary)
        .unwrap();
    let as_user = |name: &str| {
        RedisSentinelStore::builder(setup.sentinel_urls(), MASTER_NAME)
            .master_username(name)
            .master_password("app-secret")
            .build()
    };
    let user = as_user("app").await.unwrap();
    let stranger = as_user("nobody").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while check(user.clone()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the store never reached the primary as `app`"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut primary)
        .unwrap();
    assert!(
        clients.lines().any(|line| line.contains(" user=app ")),
        "no connection of `app`: {clients}"
    );
    for _ in 0..3 {
        check(stranger.clone()).await.unwrap_err();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The connection to the primary goes silent while the path to it works (a NAT entry or a
/// proxy's connection dropped), and every caller gives up sooner than the store would (its
/// own timer of 30 ms over the store's 200): the checks it abandoned count as that
/// connection's timeouts all the same, so it is dropped after three and a new one made,
/// rather than kept for as long as the kernel retransmits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_primary_connection_is_replaced_under_a_callers_shorter_timeout() {
    let primary = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let proxy = Proxy::start(primary.port()).await;
    let port = proxy.port();
    let sentinel = tokio::task::spawn_blocking(move || LoneSentinel::start(port))
        .await
        .unwrap();
    let store = RedisSentinelStore::builder(vec![sentinel.url()], MASTER_NAME)
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let (limits, client) = (far(), key("abandoned"));
    let check = || {
        tokio::time::timeout(
            Duration::from_millis(30),
            store.check(CheckRequest {
                key: &client,
                limits: &limits,
                now_millis: Some(T0),
            }),
        )
    };
    let (took, given_up) = crate::decided_again_after_silence(&proxy, "the primary", check).await;
    assert!(
        given_up >= 3,
        "the silent connection failed only {given_up} checks"
    );
    assert!(
        took < Duration::from_secs(2),
        "decided again only {took:?} after the connection went silent"
    );
}
