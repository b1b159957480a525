//! `narad serve`: lock and load the data directory, recover the node, start the disk threads,
//! the driver task and the HTTP server, then wait for SIGTERM/Ctrl-C and shut down in order:
//! stop accepting connections, let the node finish its in-flight group commits and flush its
//! checkpoint (bounded), and exit.

use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::serve::{Listener, ListenerExt};
use narad_core::{Config, Input, Node, Stats};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::auth::Gate;
use crate::auth::setup::{Access, bootstrap_admin};
use crate::cli::ServeArgs;
use crate::clock::Clock;
use crate::cluster_cli::ClusterPlan;
use crate::datadir::{self, Found};
use crate::disk::DiskExecutor;
use crate::driver::{Driver, NodeExit};
use crate::env::{DiskBackend, LogOnly, NodeObserver};
use crate::http;
use crate::http_server::{self, HttpLimits, Tls};
use crate::transport::TransportEnv;

/// How long the node may take to finish in-flight work after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long open HTTP connections may take to close once the node has stopped.
const HTTP_DRAIN_GRACE: Duration = Duration::from_secs(3);

/// Runs a node until it is told to stop.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let plan = ClusterPlan::new(args.node_id, &args.cluster)?;
    let tls = Tls::from_flags(args.tls_cert.as_deref(), args.tls_key.as_deref())?;
    http_server::raise_fd_limit(args.max_connections);
    let _lock = datadir::lock(&args.data_dir)?;
    let found = datadir::load(&args.data_dir)?;
    tracing::info!(
        data_dir = %args.data_dir.display(),
        files = found.files.len(),
        bytes = found.bytes(),
        partition_logs = found.partition_logs.len(),
        "recovering"
    );
    let seed = args.seed.unwrap_or_else(clock_seed);
    let mut config = plan.node_config(args.node_id, seed, args.http);
    config.partition_segment_bytes = args.partition_segment_bytes;
    config.produce_quota_bytes_per_sec = args.produce_quota;
    if args.produce_quota > 0 {
        tracing::info!(bytes_per_sec = args.produce_quota, "produce quota per user (per node)");
    }
    let mut clock = Clock::default();
    let node = recover(config, &mut clock, found)?;
    let has_users = !node.users().is_empty();
    let access = Access::from_args(&args.access, args.http, has_users)?;
    access.log(args.http, has_users);
    // Bound only once the node may serve: a refused start never listened.
    let listener = StdListener::bind(args.http)
        .with_context(|| format!("binding the HTTP API to {}", args.http))?;
    listener.set_nonblocking(true)?;
    http_server::deepen_backlog(&listener).context("deepening the HTTP accept queue")?;
    let runtime = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .thread_name("narad-rt")
            .build(),
    }
    .context("starting the tokio runtime")?;
    let http = HttpOptions { limits: args.http_limits(), tls };
    runtime.block_on(run(args, plan, listener, node, clock, (access, http)))
}

/// Rebuilds the node from what start-up found on disk (`datadir::load`, or the simulator's
/// disk): the small files whole, the partition logs a chunk at a time. Damage that cannot be
/// repaired without losing acknowledged records is logged loudly and refused.
pub fn recover(config: Config, clock: &mut Clock, found: Found) -> anyhow::Result<Node> {
    let found_bytes = found.bytes() as u64;
    let seed = config.seed;
    let recovered = match Node::begin_recovery(config, clock.now(), found.files) {
        Ok(mut recovery) => datadir::recover_partitions(&mut recovery, &found.partition_logs)?.map(
            |(partitions, count)| {
                log_partition_scan(count, found_bytes);
                recovery.finish(partitions)
            },
        ),
        Err(error) => Err(error),
    };
    match recovered {
        Ok(node) => {
            log_recovered(&node.stats(), seed);
            Ok(node)
        }
        Err(error) => {
            tracing::error!(
                %error,
                "RECOVERY FAILED: the data directory holds damage that cannot be repaired without \
                 losing acknowledged records; refusing to start (inspect or restore it)"
            );
            bail!("recovery failed: {error}");
        }
    }
}

async fn run(
    args: ServeArgs,
    plan: ClusterPlan,
    listener: StdListener,
    node: Node,
    clock: Clock,
    (access, http): (Access, HttpOptions),
) -> anyhow::Result<()> {
    let mut signals = Signals::register(args.exit_with_parent)?;
    reload_on_sighup(http.tls.clone())?;
    let (done_tx, disk_done) = mpsc::unbounded_channel();
    let disk = DiskExecutor::start(&args.data_dir, done_tx).context("starting disk threads")?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true); // Small 202s must not wait for Nagle.
    });
    let parts = NodeParts {
        id: args.node_id,
        node,
        clock,
        disk: Box::new(disk),
        disk_done,
        data_dir: Some(args.data_dir.clone()),
        observer: Box::new(LogOnly),
        transport: TransportEnv::os(),
        access,
    };
    run_node_with(parts, plan, listener, &mut signals, http).await.map(drop)
}

/// How the HTTP API is served: its bounds and, optionally, TLS.
#[derive(Clone, Default)]
pub struct HttpOptions {
    pub limits: HttpLimits,
    pub tls: Option<Tls>,
}

/// Everything a recovered node runs with, production's or the simulator's (see `env`).
pub struct NodeParts {
    /// The node's id (for the log).
    pub id: u32,
    pub node: Node,
    pub clock: Clock,
    /// Executes disk operations; sends their completions to `disk_done`.
    pub disk: Box<dyn DiskBackend>,
    pub disk_done: mpsc::UnboundedReceiver<Input>,
    /// The data directory (for the free-space gauge), when the node has a real one.
    pub data_dir: Option<std::path::PathBuf>,
    pub observer: Box<dyn NodeObserver>,
    pub transport: TransportEnv,
    /// Who may do what, and the first admin to create.
    pub access: Access,
}

/// What asks a node to stop: signals in production, the simulator's restarts in tier 2. A
/// first request starts the graceful shutdown, a second one cuts it short.
pub trait StopRequests: Send {
    /// Resolves with what asked, at the next request.
    fn next(&mut self) -> impl Future<Output = &'static str> + Send;
}

/// Serves a recovered node: starts the driver, the transport (for a cluster) and the HTTP API on
/// `listener`, and runs until the node stops. A stop request shuts down in order (no new
/// connections, in-flight group commits finish, the checkpoint is flushed, peers see the close)
/// and returns the node's last counters; a driver or server that stops on its own is an error.
/// The HTTP server has its default bounds and no TLS (`run_node_with` chooses).
pub async fn run_node<L, S>(
    parts: NodeParts,
    plan: ClusterPlan,
    listener: L,
    stop: &mut S,
) -> anyhow::Result<Stats>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
    S: StopRequests,
{
    run_node_with(parts, plan, listener, stop, HttpOptions::default()).await
}

/// `run_node`, with the HTTP server's bounds and TLS given.
pub async fn run_node_with<L, S>(
    parts: NodeParts,
    plan: ClusterPlan,
    listener: L,
    stop: &mut S,
    http: HttpOptions,
) -> anyhow::Result<Stats>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
    S: StopRequests,
{
    let NodeParts { id, node, clock, disk, disk_done, data_dir, observer, transport, access } =
        parts;
    let gate = Arc::new(Gate::new(access.settings, Arc::clone(&transport.entropy)));
    let (driver, handle) = Driver::new(node, clock, disk, disk_done);
    let driver = driver.with_observer(observer);
    let handle = match &data_dir {
        Some(dir) => handle.with_data_dir(dir),
        None => handle,
    };
    let handle = if access.settings.blocking_pool { handle.with_blocking_pool() } else { handle };
    let (driver, transport) = plan.attach(driver, transport)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let span = tracing::info_span!("node", id);
    let mut driver = tokio::spawn(driver.run(stop_rx.clone()).instrument(span));

    let addr = listener.local_addr()?;
    if let Some(hash) = access.bootstrap_admin {
        tokio::spawn(bootstrap_admin(handle.clone(), hash));
    }
    let tls = if http.tls.is_some() { "on" } else { "off" };
    let router = http::router(handle, gate);
    let server = http_server::serve(listener, router, http.limits, http.tls, stop_rx.clone());
    let mut server = tokio::spawn(server);
    match &data_dir {
        Some(dir) => tracing::info!(?addr, tls, data_dir = %dir.display(), "narad listening"),
        None => tracing::info!(?addr, tls, "narad listening"),
    }

    // Biased: a driver or server that stopped is reported even if a signal came at once.
    tokio::select! {
        biased;
        result = &mut driver => {
            let _ = stop_tx.send(true);
            if let Ok(NodeExit::Fatal(reason)) = result {
                bail!("fatal: {reason}");
            }
            if let Err(join) = &result
                && join.is_panic()
            {
                return Err(DriverPanicked(join.to_string()).into());
            }
            bail!("node driver stopped unexpectedly: {}", describe_exit(result));
        }
        result = &mut server => bail!("HTTP server stopped unexpectedly: {result:?}"),
        signal = stop.next() => tracing::info!(signal, "shutdown requested: no new connections"),
    }
    let _ = stop_tx.send(true);
    let stats = finish_node(&mut driver, stop).await?;
    if let Some(transport) = transport {
        transport.shutdown().await; // Peers see the close now rather than after a timeout.
    }
    tracing::info!(
        checkpoint = stats.wal_checkpoint,
        backlog = stats.dispatch_backlog,
        "node shut down cleanly (in-flight commits finished, checkpoint durable)"
    );
    if tokio::time::timeout(HTTP_DRAIN_GRACE, &mut server).await.is_err() {
        tracing::warn!("HTTP connections still open after the node stopped; closing them");
    }
    Ok(stats)
}

/// Waits (bounded) for the driver to finish shutting down; a second signal cuts it short.
async fn finish_node(
    driver: &mut JoinHandle<NodeExit>,
    stop: &mut impl StopRequests,
) -> anyhow::Result<Stats> {
    // Biased: a driver that finished wins over a second signal that came at once.
    tokio::select! {
        biased;
        result = tokio::time::timeout(SHUTDOWN_GRACE, &mut *driver) => match result {
            Ok(Ok(NodeExit::Clean(stats))) => Ok(*stats),
            Ok(Ok(NodeExit::Fatal(reason))) => bail!("fatal during shutdown: {reason}"),
            Ok(Err(join)) if join.is_panic() => Err(DriverPanicked(join.to_string()).into()),
            Ok(Err(join)) => bail!("node driver failed during shutdown: {join}"),
            Err(_) => {
                tracing::error!(grace = ?SHUTDOWN_GRACE, "node did not finish shutting down in time");
                bail!("shutdown timed out after {SHUTDOWN_GRACE:?}");
            }
        },
        signal = stop.next() => {
            tracing::warn!(signal, "second signal: exiting without waiting for the node");
            bail!("shutdown interrupted by a second {signal}");
        }
    }
}

/// The node's driver task panicked: an invariant of the core or of the driver broke. The process
/// exits 1 as for any unexpected stop; the simulator's second tier reports it as a violation.
#[derive(Debug, thiserror::Error)]
#[error("node driver panicked: {0}")]
pub struct DriverPanicked(pub String);

fn describe_exit(result: Result<NodeExit, tokio::task::JoinError>) -> String {
    match result {
        Ok(NodeExit::Fatal(reason)) => format!("fatal: {reason}"),
        Ok(NodeExit::Clean(_)) => "it returned without a shutdown request".to_string(),
        Err(join) => join.to_string(),
    }
}

/// SIGTERM and SIGINT (Ctrl-C) listeners, registered before the node serves anything so that an
/// early signal is never handled by the default action (instant death); with `--exit-with-parent`
/// also the death of the parent process, which counts as a SIGTERM.
struct Signals {
    term: Signal,
    int: Signal,
    /// The parent process id to watch (it changes when the parent dies and we are re-parented).
    parent: Option<u32>,
}

/// Re-reads the TLS certificate and key on every SIGHUP (registered now, so that a SIGHUP is never
/// the default action, death); without TLS there is nothing to reload and that is logged.
fn reload_on_sighup(tls: Option<Tls>) -> anyhow::Result<()> {
    let mut hup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match &tls {
                Some(tls) => tls.reload(),
                None => tracing::info!("SIGHUP: no TLS configured, nothing to reload"),
            }
        }
    });
    Ok(())
}

/// How often a node started with `--exit-with-parent` checks that its parent is alive.
const PARENT_POLL: Duration = Duration::from_millis(250);

impl Signals {
    fn register(exit_with_parent: bool) -> anyhow::Result<Signals> {
        let term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let parent = exit_with_parent.then(std::os::unix::process::parent_id);
        Ok(Signals { term, int, parent })
    }
}

impl StopRequests for Signals {
    /// Resolves with the name of the next signal (the parent's exit counts once).
    async fn next(&mut self) -> &'static str {
        // Biased: signals that came together are reported in one order.
        tokio::select! {
            biased;
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            () = parent_exit(self.parent) => {
                self.parent = None;
                "parent process exited"
            }
        }
    }
}

/// Resolves once the process's parent is no longer `parent` (never, for `None`).
async fn parent_exit(parent: Option<u32>) {
    let Some(parent) = parent else { return std::future::pending().await };
    while std::os::unix::process::parent_id() == parent {
        tokio::time::sleep(PARENT_POLL).await;
    }
}

/// How much start-up read: the small files (the WAL, the metastore, the seal files) whole, and
/// the partition segments it could not adopt from their seals.
fn log_partition_scan(count: datadir::ScanCount, found_bytes: u64) {
    let (adopted, scanned) = (count.adopted, count.scanned);
    let bytes = count.bytes_read + found_bytes;
    tracing::info!(
        adopted,
        scanned,
        bytes_read = bytes,
        segment_bytes_read = count.bytes_read,
        "recovered partition logs: {adopted} segments adopted from seals, {scanned} scanned, {bytes} bytes read"
    );
}

fn log_recovered(stats: &Stats, seed: u64) {
    tracing::info!(
        wal_segments = stats.wal_segments,
        wal_bytes = stats.wal_bytes_on_disk,
        wal_checkpoint = stats.wal_checkpoint,
        dispatch_backlog = stats.dispatch_backlog,
        partitions = stats.partitions.len(),
        records_visible =
            stats.partitions.iter().map(|p| p.2.high_watermark - p.2.log_start_offset).sum::<u64>(),
        partition_segments = stats.partitions.iter().map(|p| p.2.segments).sum::<u64>(),
        seed,
        "recovered"
    );
}

/// A seed from the wall clock and the process id, for runs that did not pin one.
fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}
