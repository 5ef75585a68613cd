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
