//! `narad`: the production binary. `serve` runs a broker node on the tokio runtime (real disk,
//! HTTP); the other commands are small clients of a running node. All broker logic lives in
//! `narad-core`; this crate only executes its disk, timer, reply and peer-message effects
//! (node RPC over QUIC, `transport`). The modules live in the library (`lib.rs`).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use narad::cli::{Cli, Command};
use narad::{bench, client, cluster_cli, dev, server, sub, user_cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            init_logging();
            return match server::serve(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("narad serve failed: {error:#}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Topic(args) => client::topic(args),
        Command::Produce(args) => client::produce(args),
        Command::Consume(args) => client::consume(args),
        Command::Sub(args) => sub::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Cluster(args) => cluster_cli::run(args),
        Command::User(args) => user_cli::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by RUST_LOG (default `info`).
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
