//! One server variant per process, for the benchmark driver:
//!
//! ```text
//! bench_server --variant <none|limitation|governor|floor|floor-per-worker|answer-only|project>
//!              --port <port, 0 for any>
//!              [--redis redis://127.0.0.1:<port>] [--workers <n>] [--route <algorithm>]
//! ```
//!
//! Every variant serves the same trivial handler on the routes of `ratelimit_bench::route`
//! (`/allow`, `/flood`; this project one route per algorithm under each, or with `--route`
//! only that algorithm's, as the driver runs it), with the same
//! number of actix workers (default 1), on 127.0.0.1; `answer-only` answers `/flood` with
//! this project's 429 instead. No logger and no metrics recorder is installed in any
//! variant.

mod answer_only;
mod client_ip;
mod floor;
mod governor;
mod handler;
mod limitation;
mod no_limiter;
mod options;
mod project;

use std::{net::TcpListener, process::ExitCode};

use options::Options;
use ratelimit_bench::{Variant, LISTENING};

#[actix_web::main]
async fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench_server: {message}\n{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    match serve(&options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_server: variant `{}`: {error}", options.variant);
            ExitCode::FAILURE
        }
    }
}

/// Binds `--port` (0: any free port), starts the variant, then says on stdout where it
/// listens (`listening on 127.0.0.1:<port>`): the driver reads the port from that line, so
/// it never takes another process's server on a port it picked for this one.
async fn serve(options: &Options) -> std::io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", options.port))?;
    let address = listener.local_addr()?;
    let server = match options.variant {
        Variant::NoLimiter => no_limiter::serve(options, listener).await,
        Variant::Limitation => limitation::serve(options, listener).await,
        Variant::Governor => governor::serve(options, listener).await,
        Variant::Floor => floor::serve(options, false, false, listener).await,
        Variant::FloorPerWorker => floor::serve(options, true, false, listener).await,
        Variant::FloorHeaders => floor::serve(options, true, true, listener).await,
        Variant::AnswerOnly => answer_only::serve(options, listener).await,
        Variant::Project => project::serve(options, listener).await,
    }?;
    println!("{LISTENING}{address}");
    server.await
}
