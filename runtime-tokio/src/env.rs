//! The seams between the runtime and the world it runs in. Production fills them with the real
//! thing (the system clock, the OS random source, DNS, a bound UDP socket, disk threads); the
//! simulator's second tier (docs/contributing.md, "Tiers") fills them with simulated ones and runs the
//! very same driver, router and transport on turmoil hosts. Nothing else in the runtime reads a
//! clock, draws randomness or resolves a name.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use narad_core::{ClientReply, DiskOp, Input, IoToken, Node, NodeEvent, NodeId};
use ring::rand::SecureRandom;

/// Wall-clock time, in microseconds since the Unix epoch (it may step backwards: `Clock` clamps).
pub trait WallClock: Send + Sync + 'static {
    fn unix_micros(&self) -> u64;

    /// Milliseconds since the Unix epoch (for what is shown, never for the core).
    fn unix_millis(&self) -> u64 {
        self.unix_micros() / 1_000
    }
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn unix_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// Random bytes: dial jitter and the handshake nonces.
pub trait Entropy: Send + Sync + 'static {
    fn fill(&self, out: &mut [u8]);
}

/// The operating system's random source.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, out: &mut [u8]) {
        ring::rand::SystemRandom::new().fill(out).expect("invariant: the OS random source works");
    }
}

/// A future that resolves a peer's `host:port`.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>;

/// Name resolution for peer addresses (resolved again at each dial).
pub trait Resolve: Send + Sync + 'static {
    fn resolve<'a>(&'a self, addr: &'a str) -> Resolving<'a>;
}

/// The system's resolver (`getaddrinfo` on tokio's blocking pool).
#[derive(Clone, Copy, Debug, Default)]
pub struct DnsResolver;

impl Resolve for DnsResolver {
    fn resolve<'a>(&'a self, addr: &'a str) -> Resolving<'a> {
        Box::pin(async move { Ok(tokio::net::lookup_host(addr).await?.collect()) })
    }
}

/// A UDP socket for node RPC (QUIC) that someone else made (the simulator's network), with the
/// seed of quinn's own random choices (connection ids, tokens) so that a run repeats. Without
/// one, the transport binds its configured address on the host's network stack.
#[derive(Clone)]
pub struct GivenSocket {
    pub socket: Arc<dyn quinn::AsyncUdpSocket>,
    pub rng_seed: [u8; 32],
}

/// Executes the core's disk operations. Completions arrive as `Input::Disk` on the channel the
/// backend was made with; operations on one file complete in the order they were submitted.
pub trait DiskBackend: Send + 'static {
    /// Queues `op`; its completion arrives later.
    fn submit(&mut self, token: IoToken, op: DiskOp);

    /// The driver was handed the completion of `token`.
    fn completed(&mut self, token: IoToken);

    /// Runs a WAL operation at once and returns its completion, when nothing of the WAL is
    /// pending (it is then next in its file's order either way); otherwise hands `op` back.
    fn run_wal_inline(&mut self, token: IoToken, op: DiskOp) -> Result<Input, DiskOp>;
}

/// Hears what the node reports, beside the log: the simulator's checker listens here.
pub trait NodeObserver: Send + 'static {
    /// An event the node reported (after the runtime logged it).
    fn event(&mut self, event: &NodeEvent);

    /// The node serves for the first time since it started.
    fn serving(&mut self, node: &Node);

    /// The node answered a client request with `reply` (before the answer is sent).
    fn replied(&mut self, _reply: &ClientReply) {}

    /// The node finished a graceful shutdown with `unanswered` client requests never answered,
    /// `produces` of them produces (those it must always answer: their group commits finish
    /// before the shutdown does; a read or admin request waiting on a peer may be left).
    fn shut_down(&mut self, _produces: usize, _unanswered: usize) {}

    /// The node handed a message to the transport, or the driver fed it one from the transport
    /// (a message, or a report that a peer is unreachable).
    fn peer(&mut self, _traffic: PeerTraffic<'_>) {}
}

/// Node RPC as the driver sees it, at the boundary between the core and the transport.
#[derive(Clone, Copy, Debug)]
pub enum PeerTraffic<'a> {
    /// `Effect::Send`: handed to the transport.
    Sent { to: NodeId, bytes: &'a [u8] },
    /// `Input::Peer`: fed to the node.
    Received { from: NodeId, bytes: &'a [u8] },
    /// `Input::PeerUnreachable`: fed to the node.
    Unreachable { to: NodeId },
}

/// The production observer: the log is enough.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogOnly;

impl NodeObserver for LogOnly {
    fn event(&mut self, _event: &NodeEvent) {}

    fn serving(&mut self, _node: &Node) {}
}
