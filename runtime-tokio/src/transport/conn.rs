//! The transport's tasks: the acceptor (incoming connections, secret handshake, then receiving),
//! one dialer per higher-id peer (connect, handshake, receive, reconnect with backoff) and one
//! sender per peer (drains the peer's queue onto its current connection).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use narad_core::Input;
use quinn::{Connection, Endpoint, ReadToEndError, VarInt};
use tokio::sync::watch;
use tokio::time::timeout;
use tracing::Instrument;

use super::auth::{self, AuthError};
use super::frame::{self, FRAME_BYTES_MAX};
use super::tls::{self, SERVER_NAME};
use super::{Link, PeerSlot, Shared, UNREACHABLE_DROP_AFTER};
use crate::env::Entropy;

/// TLS plus the secret handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// First and longest pause between two dials of an unreachable peer.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(3);

/// Why a dial did not give an authenticated connection.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("cannot resolve `{addr}`: {reason}")]
    Resolve { addr: String, reason: String },
    #[error("{0}")]
    Connect(String),
    #[error(transparent)]
    Auth(AuthError),
    #[error("no answer within {HANDSHAKE_TIMEOUT:?}")]
    Timeout,
}

/// Accepts incoming connections for as long as the endpoint is open.
pub(super) async fn accept_loop(endpoint: Endpoint, shared: Arc<Shared>) {
    while let Some(incoming) = endpoint.accept().await {
        let remote = incoming.remote_address();
        let Ok(permit) = Arc::clone(&shared.handshakes).try_acquire_owned() else {
            shared.counters.handshakes_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%remote, "refused cluster connection: too many handshakes in progress");
            incoming.refuse();
            continue;
        };
        let shared = Arc::clone(&shared);
        let handshake = async move {
            let accepted = timeout(HANDSHAKE_TIMEOUT, accept_one(incoming, &shared)).await;
            drop(permit);
            match accepted {
                Ok(Ok((conn, peer))) => {
                    let slot = Arc::clone(&shared.peers[&peer]);
                    run_connection(&shared, &slot, conn, "accepted").await;
                }
                Ok(Err(error)) => {
                    shared.counters.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%remote, %error, "refused cluster connection");
                }
                Err(_) => {
                    shared.counters.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%remote, "refused cluster connection: handshake timed out");
                }
            }
        };
        tokio::spawn(handshake.in_current_span());
    }
}

async fn accept_one(
    incoming: quinn::Incoming,
    shared: &Shared,
) -> Result<(Connection, narad_core::NodeId), AuthError> {
    let conn = incoming.await.map_err(|e| AuthError::Connection(format!("TLS: {e}")))?;
    let peer = auth::accept(
        &conn,
        &shared.key,
        shared.me,
        |id| shared.may_dial_us(id),
        &*shared.env.entropy,
    )
    .await?;
    Ok((conn, peer))
}

/// Keeps a connection to `slot`'s peer (which has a higher id than ours), forever.
pub(super) async fn dial_loop(endpoint: Endpoint, shared: Arc<Shared>, slot: Arc<PeerSlot>) {
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u32;
    loop {
        let dialed = timeout(HANDSHAKE_TIMEOUT, dial_one(&endpoint, &shared, &slot)).await;
        match dialed.unwrap_or(Err(DialError::Timeout)) {
            Ok(conn) => {
                failures = 0;
                backoff = BACKOFF_MIN;
                run_connection(&shared, &slot, conn, "dialed").await;
            }
            Err(error) => {
                failures += 1;
                log_dial_failure(&shared, &slot, &error, failures);
            }
        }
        tokio::time::sleep(jittered(backoff, &*shared.env.entropy)).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn dial_one(
    endpoint: &Endpoint,
    shared: &Shared,
    slot: &PeerSlot,
) -> Result<Connection, DialError> {
    let addr = resolve(shared, &slot.addr).await?;
    let connecting =
        endpoint.connect(addr, SERVER_NAME).map_err(|e| DialError::Connect(e.to_string()))?;
    let conn = connecting.await.map_err(|e| DialError::Connect(e.to_string()))?;
    auth::dial(&conn, &shared.key, shared.me, slot.id, &*shared.env.entropy)
        .await
        .map_err(DialError::Auth)?;
    Ok(conn)
}

/// Resolves a peer's `host:port`, preferring the address family our endpoint is bound to.
async fn resolve(shared: &Shared, addr: &str) -> Result<SocketAddr, DialError> {
    let resolved: Vec<SocketAddr> = shared
        .env
        .resolver
        .resolve(addr)
        .await
        .map_err(|e| DialError::Resolve { addr: addr.to_string(), reason: e.to_string() })?;
    let same_family = resolved.iter().find(|a| a.is_ipv4() == shared.local.is_ipv4());
    same_family
        .or(resolved.first())
        .copied()
        .ok_or_else(|| DialError::Resolve { addr: addr.to_string(), reason: "no address".into() })
}

/// Refusals are always worth a warning; an unreachable peer is reported once per outage.
fn log_dial_failure(shared: &Shared, slot: &PeerSlot, error: &DialError, failures: u32) {
    let peer = slot.id.0;
    let addr = &slot.addr;
    if let DialError::Auth(auth) = error
        && !matches!(auth, AuthError::Connection(_))
    {
        shared.counters.handshakes_refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(peer, %addr, %error, "cluster connection refused");
        return;
    }
    if failures == 1 {
        tracing::info!(peer, %addr, %error, "peer unreachable; retrying with backoff");
    } else {
        tracing::debug!(peer, %addr, %error, failures, "peer still unreachable");
    }
}

/// Publishes an authenticated connection as the peer's, receives on it until it closes, then
/// withdraws it. A connection that ends takes with it whatever was in flight on it, requests
/// and their answers alike, whether it was lost or replaced by a newer one (a restarted peer
/// dials again while we still hold its old connection, and what we had just written to that
/// one is gone): the node hears `PeerUnreachable` so it retries now instead of when its
/// timeouts expire (a retried commit lands once: commits are idempotent per origin and
/// sequence).
async fn run_connection(shared: &Shared, slot: &PeerSlot, conn: Connection, how: &'static str) {
    tls::open_for_messages(&conn);
    let generation = slot.publish(conn.clone());
    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
    let remote = conn.remote_address();
    tracing::info!(peer = slot.id.0, %remote, how, "peer connected (cluster secret verified)");
    let reason = receive(shared, slot, &conn).await;
    let replaced = slot.link.borrow().as_ref().is_some_and(|l| l.generation != generation);
    slot.unpublish(generation);
    tracing::info!(peer = slot.id.0, %remote, %reason, replaced, "peer connection closed");
    report_unreachable(shared, slot).await;
}

/// Reads the peer's messages, one stream after another (so in the order they were sent), into
/// the driver's inbox. Returns why it stopped.
async fn receive(shared: &Shared, slot: &PeerSlot, conn: &Connection) -> String {
    let peer = slot.id.0;
    loop {
        let mut stream = match conn.accept_uni().await {
            Ok(stream) => stream,
            Err(error) => return error.to_string(),
        };
        let frame = match stream.read_to_end(FRAME_BYTES_MAX).await {
            Ok(frame) => frame,
            Err(ReadToEndError::TooLong) => {
                shared.counters.frames_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer, limit = FRAME_BYTES_MAX, "refused an oversized frame");
                let _ = stream.stop(VarInt::from_u32(0));
                continue;
            }
            Err(ReadToEndError::Read(quinn::ReadError::ConnectionLost(error))) => {
                return error.to_string();
            }
            Err(ReadToEndError::Read(error)) => {
                tracing::debug!(peer, %error, "peer stream failed; message lost");
                continue;
            }
        };
        let len = frame.len();
        match frame::decode(frame) {
            Ok(bytes) => {
                shared.counters.messages_received.fetch_add(1, Ordering::Relaxed);
                shared.counters.bytes_received.fetch_add(len as u64, Ordering::Relaxed);
                let input = Input::Peer { from: slot.id, bytes };
                if shared.inbox.send(input).await.is_err() {
                    return "the node stopped".to_string();
                }
            }
            Err(error) => {
                shared.counters.frames_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer, %error, "refused a malformed frame");
            }
        }
    }
}

/// Drains the peer's queue onto its current connection. A queue that finds no connection within
/// `UNREACHABLE_DROP_AFTER` is dropped: the core retries what matters, and stale messages would
/// only arrive late. Every such drop, and every send that failed before the whole frame was
/// handed to quinn, is reported to the node as `Input::PeerUnreachable`.
pub(super) async fn send_loop(shared: Arc<Shared>, slot: Arc<PeerSlot>) {
    let mut links = slot.link.subscribe();
    let mut dead: Option<u64> = None;
    loop {
        while slot.is_empty() {
            slot.wake.notified().await;
        }
        let Some(link) = usable_link(&mut links, dead).await else {
            let dropped = slot.clear();
            shared.counters.dropped_unreachable.fetch_add(dropped as u64, Ordering::Relaxed);
            tracing::debug!(peer = slot.id.0, dropped, "peer unreachable; queued messages dropped");
            report_unreachable(&shared, &slot).await;
            continue;
        };
        while let Some(bytes) = slot.pop() {
            let len = bytes.len();
            match send_one(&link.conn, bytes).await {
                Ok(()) => {
                    shared.counters.messages_sent.fetch_add(1, Ordering::Relaxed);
                    let framed = (len + frame::HEADER_BYTES) as u64;
                    shared.counters.bytes_sent.fetch_add(framed, Ordering::Relaxed);
                }
                Err(error) => {
                    shared.counters.dropped_unreachable.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = slot.id.0, %error, "send failed; message dropped");
                    dead = Some(link.generation);
                    report_unreachable(&shared, &slot).await;
                    break;
                }
            }
        }
    }
}

/// Tells the node that a message to this peer certainly did not go out. Waits for room in the
/// inbox (the driver never waits on us, so this cannot deadlock).
async fn report_unreachable(shared: &Shared, slot: &PeerSlot) {
    let _ = shared.inbox.send(Input::PeerUnreachable { to: slot.id }).await;
}

/// The current connection, waiting (bounded) for one that is open and not known dead.
async fn usable_link(links: &mut watch::Receiver<Option<Link>>, dead: Option<u64>) -> Option<Link> {
    let usable = |link: &Option<Link>| {
        link.as_ref().is_some_and(|l| Some(l.generation) != dead && l.conn.close_reason().is_none())
    };
    let found = timeout(UNREACHABLE_DROP_AFTER, links.wait_for(usable)).await;
    match found {
        Ok(Ok(link)) => link.clone(),
        _ => None,
    }
}

/// One message on its own uni stream. Returns once quinn has buffered it (not when it is acked).
async fn send_one(conn: &Connection, bytes: Bytes) -> Result<(), String> {
    let header = frame::header(bytes.len()).expect("invariant: Outbox::send checked the size");
    let mut stream = conn.open_uni().await.map_err(|e| e.to_string())?;
    let mut chunks = [Bytes::copy_from_slice(&header), bytes];
    stream.write_all_chunks(&mut chunks).await.map_err(|e| e.to_string())?;
    stream.finish().map_err(|e| e.to_string())
}

/// `base` scaled by a random factor in [0.75, 1.25), so peers that failed together do not
/// redial in lockstep.
fn jittered(base: Duration, entropy: &dyn Entropy) -> Duration {
    let mut byte = [0u8; 1];
    entropy.fill(&mut byte);
    base.mul_f64(0.75 + f64::from(byte[0]) / 512.0)
}
