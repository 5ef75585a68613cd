//! The demo service and the `ratelimit-admin` command as processes, for tests that drive
//! them as an operator would.

use std::{
    io::Write as _,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use super::{admin_command, example, free_port};

/// The settings that name the demo's and the command's Redis, unset unless a test gives
/// them (the demo refuses two).
const REDIS_VARS: [&str; 5] = [
    "REDIS_URL",
    "REDIS_CLUSTER_NODES",
    "REDIS_SENTINEL_NODES",
    "REDIS_SENTINEL_MASTER",
    "REDIS_SENTINEL_MASTER_PASSWORD",
];

/// A demo process, killed on drop.
pub struct DemoProcess {
    child: Child,
    base: String,
    client: awc::Client,
}

impl Drop for DemoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DemoProcess {
    /// A demo with these settings (no other Redis setting, no key secret unless given), up
    /// and answering `/health`.
    pub async fn start(envs: &[(&str, &str)]) -> DemoProcess {
        let port = free_port();
        let mut command = Command::new(example("demo"));
        for var in REDIS_VARS
            .iter()
            .chain(&["RATELIMIT_KEY_SECRET", "RATELIMIT_OVERRIDES_FILE"])
        {
            command.env_remove(var);
        }
        let child = command
            .envs(envs.iter().copied())
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the demo");
        let demo = DemoProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
            // Idle connections are not reused past 1 s: the demo closes them after 5 s, and a
            // request sent on one it just closed fails without reaching it.
            client: awc::Client::builder()
                .connector(awc::Connector::new().conn_keep_alive(Duration::from_secs(1)))
                .timeout(Duration::from_secs(5))
                .finish(),
        };
        let started = Instant::now();
        while demo.send("GET", "/health", &[], None).await != 200 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the demo did not come up"
            );
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
        demo
    }

    /// The status of one request (0 when it got no answer).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> u16 {
        let mut request = self
            .client
            .request(method.parse().unwrap(), format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.insert_header((*name, *value));
        }
        let answer = match body {
            Some(body) => {
                request
                    .insert_header(("content-type", "application/json"))
                    .send_body(body.to_owned())
                    .await
            }
            None => request.send().await,
        };
        match answer {
            Ok(mut response) => {
                // Drained, so the connection is reused.
                let _ = response.body().await;
                response.status().as_u16()
            }
            Err(_) => 0,
        }
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let mut response = self
            .client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics");
        let body = response.body().await.expect("metrics body");
        String::from_utf8_lossy(&body).into_owned()
    }
}

/// `ratelimit-admin` with these settings (no other Redis setting, no key secret unless
/// given) and `stdin` on its standard input.
pub fn run_admin(envs: &[(&str, &str)], args: &[&str], stdin: &str) -> Output {
    let mut command = Command::new(admin_command());
    for var in REDIS_VARS
        .iter()
        .chain(&["RATELIMIT_KEY_SECRET", "RATELIMIT_OVERRIDES_FILE"])
    {
        command.env_remove(var);
    }
    let mut child = command
        .envs(envs.iter().copied())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ratelimit-admin");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("ratelimit-admin output")
}
