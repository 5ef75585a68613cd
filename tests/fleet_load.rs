//! A fleet under load: four app processes (`examples/fleet_node`) sharing one Redis, 2,000
//! concurrent requests for one client spread round-robin across them, per algorithm. The
//! shared counter allows exactly the limit across the fleet, not once per process; while
//! Redis is down, a route that fails `local` allows each process its share, and Redis
//! decides again once it is back.

mod support;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use futures_util::future::join_all;
use support::{example, free_port, RedisServer, T0};

const PROCESSES: usize = 4;
const REQUESTS: usize = 2000;
const LIMIT: usize = 100;

/// The fleet's processes, killed on drop.
struct Fleet {
    children: Vec<Child>,
    bases: Vec<String>,
}

impl Fleet {
    async fn start(redis_url: &str, client: &awc::Client) -> Fleet {
        Fleet::start_with(redis_url, client, &[]).await
    }

    /// The fleet with `env` set on every process too (later values win).
    async fn start_with(redis_url: &str, client: &awc::Client, env: &[(&str, &str)]) -> Fleet {
        let exe = example("fleet_node");
        let mut fleet = Fleet {
            children: Vec::new(),
            bases: Vec::new(),
        };
        for _ in 0..PROCESSES {
            let port = free_port();
            let child = Command::new(&exe)
                .env("REDIS_URL", redis_url)
                .env("BIND", format!("127.0.0.1:{port}"))
                .env("WORKERS", "2")
                // This test is about counting; latency under faults is tests/faults/' business.
                .env("STORE_TIMEOUT_MS", "5000")
                // Mid-window, so the burst never straddles a window boundary (a fixed
                // window would then rightly allow a second 100).
                .env("FLEET_NOW_MS", (T0 + 30_000).to_string())
                .env("RUST_LOG", "error")
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start a fleet node");
            fleet.children.push(child);
            fleet.bases.push(format!("http://127.0.0.1:{port}"));
        }
        let started = Instant::now();
        for base in &fleet.bases {
            loop {
                if let Ok(res) = client.get(format!("{base}/health")).send().await {
                    if res.status() == 200 {
                        break;
                    }
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{base} did not come up"
                );
                actix_web::rt::time::sleep(Duration::from_millis(20)).await;
            }
        }
        fleet
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[actix_web::test]
async fn two_thousand_concurrent_requests_across_four_processes_allow_exactly_the_limit() {
    let server = RedisServer::start();
    // At most 256 connections at a time; all 2,000 requests are issued at once and queue
    // for them.
    let client = awc::Client::builder()
        .connector(awc::Connector::new().limit(256))
        .timeout(Duration::from_secs(30))
        .finish();
    let fleet = Fleet::start(&server.url(), &client).await;
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();

    for algorithm in ["fixed_window", "sliding_window", "sliding_log", "gcra"] {
        // One client (API key) per algorithm and run.
        let api_key = format!("fleet-{algorithm}-{run}");
        let started = Instant::now();
        let answers = join_all((0..REQUESTS).map(|i| {
            let url = format!("{}/{algorithm}", fleet.bases[i % PROCESSES]);
            let request = client
                .get(url)
                .insert_header(("x-api-key", api_key.as_str()));
            async move {
                let res = request.send().await.expect("request to a fleet node");
                let retry_after = res.headers().contains_key("retry-after");
                (i % PROCESSES, res.status().as_u16(), retry_after)
            }
        }))
        .await;
        let elapsed = started.elapsed();

        let mut allowed_per_process = [0usize; PROCESSES];
        let mut rejected = 0;
        for (process, status, retry_after) in &answers {
            match status {
                200 => allowed_per_process[*process] += 1,
                429 => {
                    assert!(retry_after, "a 429 without Retry-After");
                    rejected += 1;
                }
                other => panic!("{algorithm}: unexpected status {other}"),
            }
        }
        let allowed: usize = allowed_per_process.iter().sum();
        println!(
            "{algorithm}: {allowed} allowed ({allowed_per_process:?} per process), {rejected} rejected, {REQUESTS} requests in {elapsed:?}"
        );
        assert_eq!(
            allowed, LIMIT,
            "{algorithm}: exactly the limit across the fleet"
        );
        assert_eq!(rejected, REQUESTS - LIMIT);
        assert!(
            allowed_per_process.iter().filter(|&&n| n > 0).count() > 1,
            "{algorithm}: the budget was spent through more than one process"
        );
    }
    drop(fleet);
}

/// `/local` fails `local` with 100 per minute over `INSTANCES=4`: while Redis is down each
/// process allows its 25 per client, the fleet 100, and Redis decides again once it is back.
#[actix_web::test]
async fn during_a_redis_outage_each_process_allows_its_share_of_a_local_route() {
    let mut server = RedisServer::start();
    let client = awc::Client::builder()
        .connector(awc::Connector::new().limit(256))
        .timeout(Duration::from_secs(30))
        .finish();
    let fleet = Fleet::start_with(
        &server.url(),
        &client,
        &[("INSTANCES", "4"), ("STORE_TIMEOUT_MS", "200")],
    )
    .await;
    let get = |process: usize, api_key: &str| {
        client
            .get(format!("{}/local", fleet.bases[process]))
            .insert_header(("x-api-key", api_key.to_owned()))
            .send()
    };
    let status = |res: Result<awc::ClientResponse<_>, awc::error::SendRequestError>| {
        res.expect("request to a fleet node").status().as_u16()
    };
    assert_eq!(status(get(0, "before").await), 200);

    server.kill();
    let answers = join_all(
        (0..4 * LIMIT)
            .map(|i| async move { (i % PROCESSES, status(get(i % PROCESSES, "outage").await)) }),
    )
    .await;
    let mut allowed_per_process = [0usize; PROCESSES];
    for (process, code) in answers {
        match code {
            200 => allowed_per_process[process] += 1,
            429 => {}
            other => panic!("unexpected status {other} during the outage"),
        }
    }
    let allowed: usize = allowed_per_process.iter().sum();
    println!("outage: {allowed_per_process:?} allowed per process");
    assert!(allowed_per_process.iter().all(|&n| n <= LIMIT / PROCESSES));
    assert!(allowed <= LIMIT && allowed > 0, "{allowed}");

    server.start_again();
    let back = Instant::now();
    let mut con = server.connection();
    loop {
        let code = status(get(1, "after").await);
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        if code == 200 && !keys.is_empty() {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "Redis was not deciding again 5 s after it came back"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    println!("Redis decides again {:?} after it is back", back.elapsed());
    assert!(
        back.elapsed() < Duration::from_secs(1),
        "{:?}",
        back.elapsed()
    );
    drop(fleet);
}

/// `/export` lets 5 requests per API key run at once across the fleet, leases of one second
/// renewed every third of it. 500 requests at once, spread over the four processes: never
/// more than 5 handlers run at once (the handlers count themselves in Redis), and every
/// place is used. Then 5 long exports hold every place through one
/// process, which is killed with SIGKILL: its places are free again within the lease (the
/// last renewal was at most a third of it before the kill), and not at once.
#[actix_web::test]
async fn concurrency_across_four_processes_and_a_killed_process_frees_its_places_in_the_lease() {
    let server = RedisServer::start();
    let client = awc::Client::builder()
        .connector(awc::Connector::new().limit(512))
        .timeout(Duration::from_secs(30))
        .finish();
    // Redis's own clock: leases expire in real time.
    let mut fleet = Fleet::start_with(&server.url(), &client, &[("FLEET_NOW_MS", "")]).await;
    let export = |process: usize, api_key: &str, ms: u64| {
        client
            .get(format!("{}/export?ms={ms}", fleet.bases[process]))
            .insert_header(("x-api-key", api_key.to_owned()))
            .send()
    };
    let answers = join_all((0..500).map(|i| async move {
        let res = export(i % PROCESSES, "burst", 100)
            .await
            .expect("request to a fleet node");
        (i % PROCESSES, res.status().as_u16())
    }))
    .await;
    let mut con = server.connection();
    let most: u64 = redis::cmd("GET")
        .arg("fleet:most:burst")
        .query(&mut con)
        .unwrap();
    let served: Vec<usize> = (0..PROCESSES)
        .map(|p| answers.iter().filter(|(q, s)| *q == p && *s == 200).count())
        .collect();
    let refused = answers.iter().filter(|(_, s)| *s == 429).count();
    println!(
        "concurrency: at most {most} running, {served:?} served per process, {refused} refused"
    );
    assert!((1..=5).contains(&most), "{most} handlers ran at once");
    assert_eq!(served.iter().sum::<usize>() + refused, 500);
    // Every place was used; which processes won them depends on which requests reached
    // Redis first (one process may win all five).
    assert!(served.iter().sum::<usize>() >= 5, "{served:?}");

    // Five long exports through process 0 hold every place.
    let held: Vec<_> = (0..5)
        .map(|_| actix_web::rt::spawn(export(0, "held", 30_000)))
        .collect();
    let started = Instant::now();
    loop {
        let running: Option<u64> = redis::cmd("GET")
            .arg("fleet:running:held")
            .query(&mut con)
            .unwrap();
        if running == Some(5) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "5 exports did not start"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    let status = |res: Result<awc::ClientResponse<_>, awc::error::SendRequestError>| {
        res.expect("request to a fleet node").status().as_u16()
    };
    assert_eq!(status(export(1, "held", 10).await), 429, "every place held");
    // Past a first lease: held by renewals.
    actix_web::rt::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(
        status(export(1, "held", 10).await),
        429,
        "renewed past the lease"
    );

    fleet.children[0].kill().expect("SIGKILL");
    let killed = Instant::now();
    fleet.children[0].wait().expect("reaped");
    for export in held {
        let _ = export.await;
    }
    loop {
        if status(export(1, "held", 10).await) == 200 {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "the killed process's places still held"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    let freed = killed.elapsed();
    println!("concurrency: the killed process's places were free {freed:?} after SIGKILL");
    // Within the lease of the last renewal, a third of it before the kill at most; the
    // slack is the polling's (a request a few ms apart, on a loaded machine).
    assert!(
        freed >= Duration::from_millis(300) && freed <= Duration::from_millis(1_500),
        "freed {freed:?} after the kill; the lease is 1 s"
    );
    drop(fleet);
}
