//! Node RPC transport: moves the node's opaque peer messages (`Effect::Send` out,
//! `Input::Peer` in) between the processes of a cluster over QUIC (quinn + rustls).
//!
//! - One connection per pair of nodes: the node with the lower id dials, the higher one accepts
//!   (and refuses dials that break the rule), so a message never has two paths.
//! - A connection carries messages only after both ends proved they hold the cluster secret
//!   (`auth`); refusals are logged with the remote address.
//! - Each message is one length-prefixed frame on its own uni stream (`frame`). The sender and
//!   the receiver handle a peer's streams one after another, so messages arrive in the order they
//!   were sent (while the connection lives).
//! - Sending never blocks the driver: `Outbox::send` puts the message in the peer's bounded queue
//!   (dropped and counted when full; the core copes with loss). A peer that stays unreachable for
//!   `UNREACHABLE_DROP_AFTER` has its queue dropped too, so nothing stale piles up. Either way the
//!   node hears `Input::PeerUnreachable { to }`: what it awaits from that peer fails at once
//!   (commits retry after their backoff) instead of waiting out a 30 s timeout.
//! - The dialer reconnects with exponential backoff; QUIC keep-alives detect a dead peer within
//!   the idle timeout, and a restarted peer resets the old connection at once.

pub(crate) mod auth;
mod conn;
pub(crate) mod frame;
#[cfg(test)]
mod loopback_tests;
mod tls;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use narad_core::{Input, NodeId};
use quinn::{Connection, Endpoint, VarInt};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use auth::ClusterKey;

use crate::env::{DnsResolver, Entropy, GivenSocket, OsEntropy, Resolve};

/// Messages queued for one peer at most.
const QUEUE_MESSAGES_MAX: usize = 4_096;
/// Bytes queued for one peer at most (a few full commit batches).
const QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Messages received and not yet taken by the driver, across all peers: past it, receiving
/// waits, and QUIC flow control pushes back on the senders.
pub const INBOX_MESSAGES: usize = 1_024;
/// A queued message waits at most this long for a connection before the queue is dropped.
const UNREACHABLE_DROP_AFTER: Duration = Duration::from_secs(2);
/// Connections being set up (TLS + secret handshake) at once; more are refused.
const HANDSHAKES_MAX: usize = 32;
/// Application close code: a newer connection from the same peer replaced this one.
const CLOSE_REPLACED: VarInt = VarInt::from_u32(2);
/// Application close code: this node is shutting down.
const CLOSE_SHUTDOWN: VarInt = VarInt::from_u32(3);

/// Who this node is and whom it talks to.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This node's id.
    pub me: NodeId,
    /// UDP address the QUIC endpoint binds.
    pub bind: SocketAddr,
    /// Every other node's cluster address (`host:port`, resolved at each dial).
    pub peers: BTreeMap<NodeId, String>,
    /// The key derived from the cluster secret.
    pub key: ClusterKey,
}

/// What the transport takes from the world it runs in (see `env`).
#[derive(Clone)]
pub struct TransportEnv {
    /// The socket to run on; `None`: bind `TransportConfig::bind`.
    pub socket: Option<GivenSocket>,
    pub resolver: Arc<dyn Resolve>,
    pub entropy: Arc<dyn Entropy>,
}

impl TransportEnv {
    /// The host's own network stack, resolver and random source.
    pub fn os() -> TransportEnv {
        TransportEnv { socket: None, resolver: Arc::new(DnsResolver), entropy: Arc::new(OsEntropy) }
    }
}

/// The running transport. Drop it, or better `shutdown` it, to stop.
pub struct Transport {
    endpoint: Endpoint,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

/// The driver's side of the transport: queue a message for a peer, never waiting.
#[derive(Clone)]
pub struct Outbox {
    shared: Arc<Shared>,
}

/// Transport counters (for `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_received: u64,
    pub bytes_received: u64,
    /// Dropped because the peer's queue was full.
    pub dropped_queue_full: u64,
    /// Dropped because the peer stayed unreachable, or its connection failed mid-send.
    pub dropped_unreachable: u64,
    /// Dropped because the destination is not a configured peer (or too large to send).
    pub dropped_invalid: u64,
    /// Received frames refused (malformed or too large).
    pub frames_refused: u64,
    /// Connections refused or failed in the secret handshake (either direction).
    pub handshakes_refused: u64,
    /// Authenticated connections established (either direction).
    pub connections: u64,
}

impl Transport {
    /// Binds the endpoint and starts the dialers, the acceptor and one sender per peer. What the
    /// node must hear goes to `inbox`: `Input::Peer` for every message received, and
    /// `Input::PeerUnreachable` when a message to a peer was dropped without reaching a live
    /// connection.
    pub fn start(
        config: TransportConfig,
        env: TransportEnv,
        inbox: mpsc::Sender<Input>,
    ) -> anyhow::Result<(Transport, Outbox)> {
        let endpoint = bind_endpoint(&config, &env)?;
        let local = endpoint.local_addr().context("cluster endpoint address")?;
        let peers = config
            .peers
            .iter()
            .filter(|(id, _)| **id != config.me)
            .map(|(id, addr)| (*id, Arc::new(PeerSlot::new(*id, addr.clone()))))
            .collect();
        let shared = Arc::new(Shared {
            me: config.me,
            key: config.key,
            local,
            peers,
            inbox,
            counters: Counters::default(),
            handshakes: Arc::new(Semaphore::new(HANDSHAKES_MAX)),
            env,
        });
        let span = tracing::info_span!("node", id = config.me.0);
        let accept = conn::accept_loop(endpoint.clone(), Arc::clone(&shared));
        let mut tasks = vec![tokio::spawn(accept.instrument(span.clone()))];
        for slot in shared.peers.values() {
            let send = conn::send_loop(Arc::clone(&shared), Arc::clone(slot));
            tasks.push(tokio::spawn(send.instrument(span.clone())));
            if slot.id > shared.me {
                let dial = conn::dial_loop(endpoint.clone(), Arc::clone(&shared), Arc::clone(slot));
                tasks.push(tokio::spawn(dial.instrument(span.clone())));
            }
        }
        tracing::info!(%local, peers = shared.peers.len(), "cluster transport listening (QUIC)");
        let transport = Transport { endpoint, shared: Arc::clone(&shared), tasks };
        Ok((transport, Outbox { shared }))
    }

    /// Closes every connection (peers notice at once instead of after the idle timeout) and
    /// stops the tasks.
    pub async fn shutdown(mut self) {
        self.endpoint.close(CLOSE_SHUTDOWN, b"node shutting down");
        let _ = tokio::time::timeout(Duration::from_millis(500), self.endpoint.wait_idle()).await;
        for task in &self.tasks {
            task.abort();
        }
        for task in &mut self.tasks {
            let _ = task.await; // aborted: returns once the task's state is dropped
        }
        for slot in self.shared.peers.values() {
            slot.link.send_replace(None); // the last connection handles: the socket is freed
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Outbox {
    /// Queues `bytes` for node `to`. Never waits: a full queue drops the message (counted).
    pub fn send(&self, to: NodeId, bytes: Bytes) {
        let counters = &self.shared.counters;
        let Some(slot) = self.shared.peers.get(&to) else {
            counters.dropped_invalid.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(to = to.0, "message to a node that is not a configured peer dropped");
            return;
        };
        if frame::header(bytes.len()).is_none() {
            counters.dropped_invalid.fetch_add(1, Ordering::Relaxed);
            tracing::error!(to = to.0, bytes = bytes.len(), "message too large to send; dropped");
            return;
        }
        if slot.push(bytes) {
            slot.full_reported.store(false, Ordering::Relaxed);
            slot.wake.notify_one();
            return;
        }
        counters.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(to = to.0, "peer queue full; message dropped");
        // Once per run of drops; if the driver's inbox is full too, the next drop tries again.
        if !slot.full_reported.swap(true, Ordering::Relaxed)
            && self.shared.inbox.try_send(Input::PeerUnreachable { to }).is_err()
        {
            slot.full_reported.store(false, Ordering::Relaxed);
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> TransportStats {
        self.shared.counters.snapshot()
    }
}

/// State shared by the transport's tasks and the `Outbox`.
struct Shared {
    me: NodeId,
    key: ClusterKey,
    local: SocketAddr,
    peers: BTreeMap<NodeId, Arc<PeerSlot>>,
    inbox: mpsc::Sender<Input>,
    counters: Counters,
    handshakes: Arc<Semaphore>,
    env: TransportEnv,
}

impl Shared {
    /// Whether node `dialer` may open a connection to us.
    fn may_dial_us(&self, dialer: NodeId) -> Result<(), String> {
        if !self.peers.contains_key(&dialer) {
            return Err(format!("node {} is not among our --peers", dialer.0));
        }
        if dialer >= self.me {
            return Err(format!(
                "node {} must not dial node {} (the lower id dials)",
                dialer.0, self.me.0
            ));
        }
        Ok(())
    }
}

/// One peer: its outgoing queue and its current authenticated connection.
struct PeerSlot {
    id: NodeId,
    addr: String,
    queue: Mutex<Queue>,
    wake: Notify,
    link: watch::Sender<Option<Link>>,
    next_generation: AtomicU64,
    /// A queue-full drop was reported to the node (reset once a message is queued again).
    full_reported: AtomicBool,
}

#[derive(Default)]
struct Queue {
    messages: VecDeque<Bytes>,
    bytes: usize,
}

/// An authenticated connection, numbered so a replaced one cannot unpublish its successor.
#[derive(Clone)]
struct Link {
    generation: u64,
    conn: Connection,
}

impl PeerSlot {
    fn new(id: NodeId, addr: String) -> PeerSlot {
        PeerSlot {
            id,
            addr,
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            link: watch::Sender::new(None),
            next_generation: AtomicU64::new(1),
            full_reported: AtomicBool::new(false),
        }
    }

    /// Appends a message unless the queue is full.
    fn push(&self, bytes: Bytes) -> bool {
        let mut queue = self.queue.lock().expect("invariant: queue holders never panic");
        if queue.messages.len() >= QUEUE_MESSAGES_MAX || queue.bytes + bytes.len() > QUEUE_BYTES_MAX
        {
            return false;
        }
        queue.bytes += bytes.len();
        queue.messages.push_back(bytes);
        true
    }

    fn is_empty(&self) -> bool {
        let queue = self.queue.lock().expect("invariant: queue holders never panic");
        queue.messages.is_empty()
    }

    fn pop(&self) -> Option<Bytes> {
        let mut queue = self.queue.lock().expect("invariant: queue holders never panic");
        let bytes = queue.messages.pop_front()?;
        queue.bytes -= bytes.len();
        Some(bytes)
    }

    /// Empties the queue; returns how many messages were dropped.
    fn clear(&self) -> usize {
        let mut queue = self.queue.lock().expect("invariant: queue holders never panic");
        let dropped = queue.messages.len();
        *queue = Queue::default();
        dropped
    }

    /// Makes `conn` the peer's connection, closing the one it replaces. Returns its generation.
    fn publish(&self, conn: Connection) -> u64 {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let old = self.link.send_replace(Some(Link { generation, conn }));
        if let Some(old) = old {
            old.conn.close(CLOSE_REPLACED, b"replaced by a newer connection");
        }
        generation
    }

    /// Forgets the connection of `generation` if it is still the current one.
    fn unpublish(&self, generation: u64) {
        self.link.send_if_modified(|link| {
            if link.as_ref().is_some_and(|l| l.generation == generation) {
                *link = None;
                true
            } else {
                false
            }
        });
    }
}

#[derive(Default)]
struct Counters {
    messages_sent: AtomicU64,
    bytes_sent: AtomicU64,
    messages_received: AtomicU64,
    bytes_received: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_unreachable: AtomicU64,
    dropped_invalid: AtomicU64,
    frames_refused: AtomicU64,
    handshakes_refused: AtomicU64,
    connections: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> TransportStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStats {
            messages_sent: get(&self.messages_sent),
            bytes_sent: get(&self.bytes_sent),
            messages_received: get(&self.messages_received),
            bytes_received: get(&self.bytes_received),
            dropped_queue_full: get(&self.dropped_queue_full),
            dropped_unreachable: get(&self.dropped_unreachable),
            dropped_invalid: get(&self.dropped_invalid),
            frames_refused: get(&self.frames_refused),
            handshakes_refused: get(&self.handshakes_refused),
            connections: get(&self.connections),
        }
    }
}

/// Appends the transport's counters to a Prometheus text exposition (`/metrics`).
pub fn write_metrics(out: &mut String, stats: &TransportStats) {
    use std::fmt::Write;
    let counters: [(&str, &str, u64); 10] = [
        ("narad_peer_messages_sent_total", "Node RPC messages sent", stats.messages_sent),
        ("narad_peer_bytes_sent_total", "Node RPC bytes sent (framed)", stats.bytes_sent),
        (
            "narad_peer_messages_received_total",
            "Node RPC messages received",
            stats.messages_received,
        ),
        (
            "narad_peer_bytes_received_total",
            "Node RPC bytes received (framed)",
            stats.bytes_received,
        ),
        (
            "narad_peer_dropped_queue_full_total",
            "Messages dropped because a peer's send queue was full",
            stats.dropped_queue_full,
        ),
        (
            "narad_peer_dropped_unreachable_total",
            "Messages dropped because their peer was unreachable",
            stats.dropped_unreachable,
        ),
        (
            "narad_peer_dropped_invalid_total",
            "Messages dropped for an unknown peer or an oversized body",
            stats.dropped_invalid,
        ),
        (
            "narad_peer_frames_refused_total",
            "Received frames refused (malformed or oversized)",
            stats.frames_refused,
        ),
        (
            "narad_peer_handshakes_refused_total",
            "Cluster connections refused or failed in the secret handshake",
            stats.handshakes_refused,
        ),
        (
            "narad_peer_connections_total",
            "Authenticated cluster connections established",
            stats.connections,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
    }
}

/// The QUIC endpoint on the socket `env` gives, or on `config.bind`.
fn bind_endpoint(config: &TransportConfig, env: &TransportEnv) -> anyhow::Result<Endpoint> {
    let (server, client) = tls::configs()?;
    let mut endpoint_config = endpoint_config(&config.key, config.me);
    let runtime = Arc::new(quinn::TokioRuntime);
    let mut endpoint = match &env.socket {
        None => {
            let socket = std::net::UdpSocket::bind(config.bind)
                .with_context(|| format!("binding the cluster endpoint to UDP {}", config.bind))?;
            Endpoint::new(endpoint_config, Some(server), socket, runtime)
        }
        Some(given) => {
            endpoint_config.rng_seed(Some(given.rng_seed));
            let socket = Arc::clone(&given.socket);
            Endpoint::new_with_abstract_socket(endpoint_config, Some(server), socket, runtime)
        }
    }
    .context("starting the cluster endpoint")?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// The endpoint's keys, derived from the cluster secret and the node id rather than drawn at
/// each start (quinn's default): a restarted node then recognises the connection ids it made
/// before and resets the connections they name at once, so a peer that dialed it notices the
/// restart on its next packet instead of after its idle timeout.
fn endpoint_config(key: &ClusterKey, me: NodeId) -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::new(Arc::new(key.reset_key(me)));
    let cid_key = key.connection_id_key(me);
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_prometheus_counters() {
        let mut out = String::new();
        let stats =
            TransportStats { messages_sent: 3, handshakes_refused: 2, ..Default::default() };
        write_metrics(&mut out, &stats);
        assert!(out.contains("\nnarad_peer_messages_sent_total 3\n"));
        assert!(out.contains("\nnarad_peer_handshakes_refused_total 2\n"));
        assert_eq!(out.lines().filter(|l| l.starts_with("# TYPE")).count(), 10);
    }

    #[test]
    fn a_full_queue_refuses_and_clear_empties() {
        let slot = PeerSlot::new(NodeId(2), "127.0.0.1:1".into());
        for _ in 0..QUEUE_MESSAGES_MAX {
            assert!(slot.push(Bytes::from_static(b"x")));
        }
        assert!(!slot.push(Bytes::from_static(b"x")), "bounded by count");
        assert_eq!(slot.clear(), QUEUE_MESSAGES_MAX);
        assert!(slot.is_empty());
        let big = Bytes::from(vec![0u8; QUEUE_BYTES_MAX / 2]);
        assert!(slot.push(big.clone()));
        assert!(slot.push(big.clone()));
        assert!(!slot.push(Bytes::from_static(b"x")), "bounded by bytes");
        assert_eq!(slot.pop().map(|b| b.len()), Some(QUEUE_BYTES_MAX / 2));
        assert!(slot.push(Bytes::from_static(b"x")));
    }
}
