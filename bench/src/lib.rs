//! What the benchmark driver (`http_bench`) and the servers it starts (`bench_server`) agree
//! on: the server variants, the routes each one serves and the limits behind them.

pub mod goal_line;
pub mod redis_server;
pub mod route;
pub mod variant;

pub use goal_line::Goal;
pub use redis_server::RedisServer;
pub use route::{Budget, ProjectRoute};
pub use variant::Variant;

/// What `bench_server` prints on stdout, followed by its address, once it serves: the
/// driver starts it on port 0 and reads the port from that line.
pub const LISTENING: &str = "bench_server listening on ";
