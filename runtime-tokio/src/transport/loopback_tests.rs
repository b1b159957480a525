//! Transports talking over real QUIC on 127.0.0.1, in one process: messages flow both ways in
//! order once both sides hold the secret; a wrong secret delivers nothing and is refused on both
//! sides; a peer that restarts is redialed.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use bytes::Bytes;
use narad_core::{Input, NodeId};
use tokio::sync::mpsc;

use super::{ClusterKey, Outbox, Transport, TransportConfig, TransportEnv};

const WAIT: Duration = Duration::from_secs(10);

fn free_addr() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind an ephemeral UDP port");
    socket.local_addr().expect("local addr")
}

fn key(secret: &str) -> ClusterKey {
    ClusterKey::from_secret(secret.as_bytes()).expect("long enough")
}

struct Pair {
    addrs: BTreeMap<NodeId, SocketAddr>,
}

impl Pair {
    fn new() -> Pair {
        let addrs = [(NodeId(1), free_addr()), (NodeId(2), free_addr())].into_iter().collect();
        Pair { addrs }
    }

    async fn start(&self, me: u32, secret: &str) -> (Transport, Outbox, mpsc::Receiver<Input>) {
        let me = NodeId(me);
        let peers = self
            .addrs
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(id, addr)| (*id, addr.to_string()))
            .collect();
        let config = TransportConfig { me, bind: self.addrs[&me], peers, key: key(secret) };
        // A restarted transport may find its old socket not yet released: retry briefly.
        for _ in 0..50 {
            let (tx, rx) = mpsc::channel(super::INBOX_MESSAGES);
            if let Ok((transport, outbox)) =
                Transport::start(config.clone(), TransportEnv::os(), tx)
            {
                return (transport, outbox, rx);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("transport {} cannot bind {}", me.0, config.bind);
    }
}

/// The next message received (skipping reports of unreachable peers); `None` after `wait`.
async fn next_message(
    inbox: &mut mpsc::Receiver<Input>,
    wait: Duration,
) -> Option<(NodeId, Bytes)> {
    tokio::time::timeout(wait, async {
        loop {
            match inbox.recv().await.expect("inbox open") {
                Input::Peer { from, bytes } => return (from, bytes),
                _ => continue,
            }
        }
    })
    .await
    .ok()
}

/// Drains what is waiting: (messages, unreachable reports).
fn drain(inbox: &mut mpsc::Receiver<Input>) -> (usize, usize) {
    let (mut messages, mut unreachable) = (0, 0);
    while let Ok(input) = inbox.try_recv() {
        match input {
            Input::Peer { .. } => messages += 1,
            Input::PeerUnreachable { .. } => unreachable += 1,
            other => panic!("unexpected input {other:?}"),
        }
    }
    (messages, unreachable)
}

/// Sends numbered messages until the first arrives (the connection may still be forming), then
/// checks that everything after it arrives in order.
async fn exchange(from: &Outbox, to: NodeId, inbox: &mut mpsc::Receiver<Input>) -> NodeId {
    let first = tokio::time::timeout(WAIT, async {
        loop {
            from.send(to, Bytes::from_static(b"probe"));
            if let Some(message) = next_message(inbox, Duration::from_millis(200)).await {
                return message;
            }
        }
    })
    .await
    .expect("a probe got through");
    for i in 0..100u32 {
        from.send(to, Bytes::from(i.to_be_bytes().to_vec()));
    }
    let mut next = 0u32;
    while next < 100 {
        let (_, bytes) = next_message(inbox, WAIT).await.expect("messages keep coming");
        if bytes.as_ref() == b"probe" {
            continue; // late probes from before the connection settled
        }
        assert_eq!(bytes.as_ref(), next.to_be_bytes(), "in order, none missing");
        next += 1;
    }
    first.0
}

#[tokio::test]
async fn messages_flow_both_ways_in_order_with_the_sender_named() {
    let pair = Pair::new();
    let (t1, out1, mut in1) = pair.start(1, "the same secret, 32 bytes long!!").await;
    let (t2, out2, mut in2) = pair.start(2, "the same secret, 32 bytes long!!").await;
    assert_eq!(exchange(&out1, NodeId(2), &mut in2).await, NodeId(1));
    assert_eq!(exchange(&out2, NodeId(1), &mut in1).await, NodeId(2));
    let big = Bytes::from(vec![7u8; 9 * 1024 * 1024]); // a full commit batch and then some
    out1.send(NodeId(2), big.clone());
    let (from, got) = next_message(&mut in2, WAIT).await.expect("the big one");
    assert_eq!((from, got.len()), (NodeId(1), big.len()));
    assert_eq!(out1.stats().connections, 1, "one connection per pair");
    assert_eq!(out2.stats().connections, 1, "one connection per pair");
    out1.send(NodeId(9), Bytes::from_static(b"nobody"));
    out1.send(NodeId(2), Bytes::from(vec![0u8; super::frame::MESSAGE_BYTES_MAX + 1]));
    assert_eq!(out1.stats().dropped_invalid, 2);
    t1.shutdown().await;
    t2.shutdown().await;
}

#[tokio::test]
async fn a_wrong_secret_delivers_nothing_and_both_sides_refuse() {
    let pair = Pair::new();
    let (t1, out1, mut in1) = pair.start(1, "the right secret, 32 bytes long!").await;
    let (t2, out2, mut in2) = pair.start(2, "a wrong secret, also long enough").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        out1.send(NodeId(2), Bytes::from_static(b"secret data"));
        out2.send(NodeId(1), Bytes::from_static(b"secret data"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(drain(&mut in1).0, 0, "node 1 accepted nothing");
    assert_eq!(drain(&mut in2).0, 0, "node 2 accepted nothing");
    assert!(out1.stats().handshakes_refused >= 1, "the dialer saw a refusal");
    assert!(out2.stats().handshakes_refused >= 1, "the acceptor refused");
    assert_eq!(out1.stats().connections + out2.stats().connections, 0);
    t1.shutdown().await;
    t2.shutdown().await;
}

#[tokio::test]
async fn a_restarted_peer_is_reconnected() {
    let pair = Pair::new();
    let secret = "the same secret, 32 bytes long!!";
    let (t1, out1, mut in1) = pair.start(1, secret).await;
    let (t2, _out2, mut in2) = pair.start(2, secret).await;
    exchange(&out1, NodeId(2), &mut in2).await;
    drain(&mut in1);
    t2.shutdown().await; // closes its connections: node 1 reports the loss, then redials
    drop(in2);
    let lost = tokio::time::timeout(WAIT, in1.recv()).await.expect("reported in time");
    assert!(matches!(lost, Some(Input::PeerUnreachable { to: NodeId(2) })), "{lost:?}");
    let (t2, _out2, mut in2) = pair.start(2, secret).await;
    assert_eq!(exchange(&out1, NodeId(2), &mut in2).await, NodeId(1));
    assert!(out1.stats().connections >= 2);
    t1.shutdown().await;
    t2.shutdown().await;
}

#[tokio::test]
async fn a_stranger_that_skips_the_handshake_can_send_nothing_and_is_dropped() {
    let pair = Pair::new();
    let (t2, out2, mut in2) = pair.start(2, "the same secret, 32 bytes long!!").await;
    let (_, client) = super::tls::configs().expect("configs");
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client endpoint");
    endpoint.set_default_client_config(client);
    let conn = endpoint
        .connect(pair.addrs[&NodeId(2)], super::tls::SERVER_NAME)
        .expect("connect")
        .await
        .expect("TLS alone succeeds");
    let opened = tokio::time::timeout(Duration::from_secs(1), conn.open_uni()).await;
    assert!(opened.is_err(), "no message stream before the secret handshake");
    let closed = tokio::time::timeout(WAIT, conn.closed()).await;
    assert!(closed.is_ok(), "the acceptor drops a connection that never authenticates");
    assert_eq!(drain(&mut in2).0, 0);
    assert!(out2.stats().handshakes_refused >= 1);
    t2.shutdown().await;
}

#[tokio::test]
async fn a_message_to_an_unreachable_peer_is_reported_to_the_node() {
    let pair = Pair::new();
    let (t1, out1, mut in1) = pair.start(1, "the same secret, 32 bytes long!!").await;
    out1.send(NodeId(2), Bytes::from_static(b"commit batch")); // node 2 is not running
    let reported = tokio::time::timeout(WAIT, in1.recv()).await.expect("reported in time");
    assert!(matches!(reported, Some(Input::PeerUnreachable { to: NodeId(2) })), "{reported:?}");
    assert_eq!(out1.stats().dropped_unreachable, 1);
    t1.shutdown().await;
}

/// A transport on a runtime of its own, so that dropping the runtime kills it the way a crash
/// does: no close frame, no goodbye.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a test runtime")
}

#[test]
fn a_crashed_and_restarted_acceptor_is_noticed_at_once_by_its_reset_key() {
    let pair = Pair::new();
    let secret = "the same secret, 32 bytes long!!";
    let main = runtime();
    let (t1, out1, mut in1) = main.block_on(pair.start(1, secret)); // node 1 dials node 2
    let crashed = runtime();
    let (t2, out2, mut in2) = crashed.block_on(pair.start(2, secret));
    main.block_on(exchange(&out1, NodeId(2), &mut in2));
    drain(&mut in1);
    drop(crashed); // cancels its tasks where they stand
    drop((t2, out2, in2));
    let restarted = runtime();
    let (t2, _out2, mut in2) = restarted.block_on(pair.start(2, secret));
    let started = std::time::Instant::now();
    // Node 1's packets on its old connection reach the new endpoint, which answers with a
    // stateless reset the old connection's token matches: node 1 redials at once, instead of
    // after its 5 s idle timeout.
    main.block_on(exchange(&out1, NodeId(2), &mut in2));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "reconnected after {took:?}; the idle timeout is 5 s");
    assert!(out1.stats().connections >= 2);
    main.block_on(t1.shutdown());
    restarted.block_on(t2.shutdown());
}

/// A connection replaced by a newer dial from the same peer (a restarted peer dials again
/// while the acceptor still holds the old connection) takes what was in flight on it: the
/// acceptor reports the peer unreachable, so its node retries now rather than after its 30 s
/// commit timeout. Found by tier 2's transport ledger (seed 0x22e in seeds/runtime.txt).
#[tokio::test]
async fn an_acceptor_whose_connection_is_replaced_reports_the_peer_unreachable() {
    let pair = Pair::new();
    let secret = "the same secret, 32 bytes long!!";
    let (t1, out1, _in1) = pair.start(1, secret).await; // node 1 dials node 2
    let (t2, _out2, mut in2) = pair.start(2, secret).await;
    exchange(&out1, NodeId(2), &mut in2).await;
    drain(&mut in2);
    // Node 1 again, from another address, while the first connection still lives.
    let peers = [(NodeId(2), pair.addrs[&NodeId(2)].to_string())].into_iter().collect();
    let config = TransportConfig { me: NodeId(1), bind: free_addr(), peers, key: key(secret) };
    let (tx, _in1b) = mpsc::channel(super::INBOX_MESSAGES);
    let (t1b, out1b) = Transport::start(config, TransportEnv::os(), tx).expect("second node 1");
    exchange(&out1b, NodeId(2), &mut in2).await;
    let reported = tokio::time::timeout(WAIT, async {
        loop {
            match in2.recv().await.expect("inbox open") {
                Input::PeerUnreachable { to } => return to,
                _ => continue,
            }
        }
    })
    .await;
    assert_eq!(reported.ok(), Some(NodeId(1)), "the replaced connection was reported");
    t1b.shutdown().await;
    t1.shutdown().await;
    t2.shutdown().await;
}
