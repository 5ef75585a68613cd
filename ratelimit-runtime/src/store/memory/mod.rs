//! The in-memory store: the scripts' algorithms ported to Rust, for one instance and tests.

mod adjust;
mod fixed_window;
mod gcra;
mod peek;
mod sliding_log;
mod sliding_window;
mod store;
mod table;

pub use store::{MemoryStore, MemoryStoreBuilder, DEFAULT_CAPACITY};
pub use table::{StoredEntry, StoredValue};
