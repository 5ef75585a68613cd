//! Test harness: `redis-server` processes the tests start themselves, views into what a
//! store holds, and fake stores that stand in for a Redis in trouble. Never the instance on
//! 6379.
//!
//! Included by test files with `mod support;` (from `tests/<area>/main.rs`, with
//! `#[path = "../support/mod.rs"] mod support;`); each test binary uses part of it.
#![allow(dead_code, unused_imports)]

pub mod auth;
mod backend;
mod cluster;
mod demo_process;
mod example;
mod fake_stores;
mod log_capture;
mod overrides_file;
mod proxy;
mod ratelimit_fields;
mod sentinel;
mod server;

pub use backend::{limit_states, Backend, T0, W};
pub use cluster::{key_slot, serves_slot_zero, RedisCluster};
pub use demo_process::{run_admin, DemoProcess};
pub use example::{admin_command, example, free_port};
pub use fake_stores::{Down, Hung};
pub use log_capture::CapturedLog;
pub use overrides_file::{replace_file, until};
pub use proxy::Proxy;
pub use ratelimit_fields::{quota_policies, service_limits, QuotaPolicy, ServiceLimit};
pub use sentinel::{LoneSentinel, SentinelSetup, MASTER_NAME};
pub use server::{dir_prefix, ping, RedisServer};

/// A limiter counting in `server` (a 500 ms store timeout), its clock injected at `now` ms.
pub async fn limiter_on(server: &RedisServer, now: u64) -> ratelimit_runtime::RateLimiter {
    let store = ratelimit_runtime::store::RedisStore::builder(server.url())
        .timeout(std::time::Duration::from_millis(500))
        .build()
        .await
        .expect("store");
    ratelimit_runtime::RateLimiter::new(store).clock(ratelimit_runtime::clock::ManualClock::at(now))
}

/// One test per case and store: modules `standalone` (`RedisStore` on a harness-started
/// server), `cluster` (`RedisClusterStore` on a harness-started 3-master cluster), `valkey`
/// and `memory`, each with a test per case, an `async fn(&Backend)` of the calling file
/// (which imports `Backend`).
#[macro_export]
macro_rules! on_every_store {
    ($($case:ident),* $(,)?) => {
        mod standalone {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = super::Backend::standalone().await;
                    super::$case(&backend).await;
                    backend.finish().await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = super::Backend::cluster().await;
                    super::$case(&backend).await;
                    backend.finish().await;
                }
            )*
        }
        mod valkey {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = super::Backend::valkey().await;
                    super::$case(&backend).await;
                    backend.finish().await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = super::Backend::memory();
                    super::$case(&backend).await;
                    backend.finish().await;
                }
            )*
        }
    };
}

/// Calls `attempt` every 50 ms until it succeeds or `within` has passed: its value and how
/// long that took, or the errors seen (each once, in order).
pub async fn until_ok<T, E, F>(
    within: std::time::Duration,
    mut attempt: impl FnMut() -> F,
) -> Result<(T, std::time::Duration), Vec<String>>
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<T, E>>,
{
    let started = std::time::Instant::now();
    let mut errors: Vec<String> = Vec::new();
    while started.elapsed() < within {
        match attempt().await {
            Ok(value) => return Ok((value, started.elapsed())),
            Err(error) => {
                let text = error.to_string();
                if errors.last() != Some(&text) {
                    errors.push(text);
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err(errors)
}
