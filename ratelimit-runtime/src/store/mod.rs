//! Where counters live: Redis (standalone, Sentinel or Cluster) or process memory, behind one
//! trait.

pub(crate) mod ban;
mod check;
pub(crate) use check::adjust_within;
mod cluster;
mod coalesce;
mod config_error;
mod decision;
mod error;
mod link;
mod memory;
mod redis;
pub(crate) mod script;
mod script_call;
pub(crate) use script_call::no_answer_within;
mod sentinel;
mod timer;
pub(crate) use timer::{until, within};
pub(crate) mod tls;

pub use check::{
    AdjustFuture, AdjustRequest, Adjustment, CheckFuture, CheckRequest, Share, ShareFuture, Store,
    MAX_INJECTED_MILLIS,
};
pub use cluster::{RedisClusterStore, RedisClusterStoreBuilder};
pub use config_error::{redact, StoreConfigError};
pub use decision::{Decision, LimitState, Receipt};
pub use error::{StoreError, StoreErrorKind};
pub use memory::{MemoryStore, MemoryStoreBuilder, StoredEntry, StoredValue, DEFAULT_CAPACITY};
pub use redis::{RedisStore, RedisStoreBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT};
pub use sentinel::{RedisSentinelStore, RedisSentinelStoreBuilder};
