//! Test harness: `redis-server` processes the tests start themselves, and views into what
//! a store holds. Never the instance on 6379.
//!
//! Included by test files with `mod support;`; each test binary uses part of it.
#![allow(dead_code, unused_imports)]

pub mod auth;
mod backend;
mod cluster;
mod example;
mod log_capture;
mod proxy;
mod server;

pub use backend::{limit_states, Backend, T0, W};
pub use cluster::{key_slot, serves_slot_zero, RedisCluster};
pub use example::{example, free_port};
pub use log_capture::CapturedLog;
pub use proxy::Proxy;
pub use server::{dir_prefix, ping, RedisServer};
