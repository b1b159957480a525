//! Long-poll replay consumes through whole nodes: a parked consume is woken by the commit that
//! makes its offset visible (well before its deadline), answered empty at its deadline, 404 when
//! its topic is deleted, empty at shutdown, refused past the bound; through a non-owner too.

use bytes::Bytes;

use super::cluster_harness::Cluster;
use super::harness::Harness;
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage};
use crate::constants::{MAX_CONSUME_WAIT_MS, PARKED_MAX};
use crate::io::Input;

fn create(h: &mut Harness, name: &str) {
    let op = ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(1),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    };
    assert!(matches!(h.call(op), ClientReply::TopicCreated(_)));
}

fn produce_op(topic: &str, partition: u32, payload: &str) -> ClientOp {
    let message = ProduceMessage {
        key: None,
        partition: Some(partition),
        payload: Bytes::from(payload.to_string()),
    };
    ClientOp::Produce { topic: topic.into(), messages: vec![message], batch: false }
}

fn consume(topic: &str, offset: u64, wait_ms: u64) -> ClientOp {
    ClientOp::Consume { topic: topic.into(), partition: 0, offset, max: 10, wait_ms }
}

fn payloads(reply: &ClientReply) -> Vec<String> {
    let ClientReply::Records(records) = reply else { panic!("{reply:?}") };
    records.iter().map(|r| String::from_utf8(r.payload.to_vec()).expect("utf-8")).collect()
}

#[test]
fn a_parked_consume_is_woken_by_the_commit_not_the_deadline() {
    let mut h = Harness::new();
    create(&mut h, "t");
    let start = h.now;
    let request = h.submit(consume("t", 0, 10_000));
    h.run(); // 3 s pass: nothing visible, so it stays parked
    assert!(!h.replies.contains_key(&request), "answered before anything was visible");
    assert_eq!(h.node.parked_consumes(), 1);
    h.node.check_invariants().expect("consistent while parked");
    let produced_at = h.now;
    let produce = h.submit(produce_op("t", 0, "hello"));
    // A lone producer's commit may wait out the linger and the flush pairing hold.
    h.run_for_micros(Harness::LONE_COMMIT_WAIT_US + 1);
    assert!(matches!(h.replies.remove(&produce), Some(ClientReply::Produced { accepted: 1 })));
    let reply = h.replies.remove(&request).expect("woken by the commit");
    assert_eq!(payloads(&reply), vec!["hello".to_string()]);
    assert_eq!(h.node.parked_consumes(), 0);
    assert!(h.now.micros_since(produced_at) < 50_000, "woken at once, not at the deadline");
    assert!(h.now.micros_since(start) < 10_000_000);
    h.run();
    assert!(h.replies.is_empty(), "answered exactly once");
}

#[test]
fn a_consume_at_a_visible_offset_does_not_park_and_one_past_it_waits_for_its_own_offset() {
    let mut h = Harness::new();
    create(&mut h, "t");
    assert!(matches!(h.call(produce_op("t", 0, "a")), ClientReply::Produced { .. }));
    assert_eq!(payloads(&h.call(consume("t", 0, 5_000))), vec!["a".to_string()]);
    // Offset 2 waits for two more records: the first commit (offset 1) does not wake it.
    let request = h.submit(consume("t", 2, 10_000));
    assert!(matches!(h.call(produce_op("t", 0, "b")), ClientReply::Produced { .. }));
    assert!(!h.replies.contains_key(&request), "offset 1 visible does not answer offset 2");
    assert!(matches!(h.call(produce_op("t", 0, "c")), ClientReply::Produced { .. }));
    assert_eq!(payloads(&h.replies.remove(&request).expect("woken")), vec!["c".to_string()]);
}

#[test]
fn a_parked_consume_ends_empty_at_its_deadline() {
    let mut h = Harness::new();
    create(&mut h, "t");
    let start = h.now;
    let request = h.submit(consume("t", 0, 700));
    h.run();
    let reply = h.replies.remove(&request).expect("answered at the deadline");
    assert!(payloads(&reply).is_empty());
    assert_eq!(h.node.parked_consumes(), 0);
    // A wait past the clamp parks for the clamp, not longer.
    let request = h.submit(consume("t", 0, 10 * MAX_CONSUME_WAIT_MS));
    let parked_at = h.now;
    while !h.replies.contains_key(&request) {
        h.run();
    }
    assert!(payloads(&h.replies.remove(&request).expect("answered")).is_empty());
    assert!(h.now.micros_since(start) >= 700_000);
    assert!(h.now.micros_since(parked_at) < (MAX_CONSUME_WAIT_MS + 3_000) * 1_000);
}

#[test]
fn deleting_the_topic_answers_its_parked_consumes_404() {
    let mut h = Harness::new();
    create(&mut h, "t");
    let request = h.submit(consume("t", 0, 15_000));
    assert!(matches!(
        h.call(ClientOp::DeleteTopic { name: "t".into() }),
        ClientReply::TopicDeleted
    ));
    let reply = h.replies.remove(&request).expect("answered on the delete");
    assert!(matches!(reply, ClientReply::Error(ClientError::NotFound(_))), "{reply:?}");
    assert_eq!(h.node.parked_consumes(), 0);
}

#[test]
fn shutdown_answers_parked_consumes_empty_and_parks_no_more() {
    let mut h = Harness::new();
    create(&mut h, "t");
    let request = h.submit(consume("t", 0, 15_000));
    h.deliver(Input::BeginShutdown);
    assert!(payloads(&h.replies.remove(&request).expect("answered at shutdown")).is_empty());
    let late = h.submit(consume("t", 0, 15_000));
    assert!(payloads(&h.replies.remove(&late).expect("answered at once")).is_empty());
    h.run_io_only();
    assert!(h.node.is_shut_down());
}

#[test]
fn past_the_bound_a_consume_is_refused_not_spun() {
    let mut h = Harness::new();
    create(&mut h, "t");
    for _ in 0..PARKED_MAX {
        h.submit(consume("t", 0, 15_000));
    }
    assert_eq!(h.node.parked_consumes(), PARKED_MAX);
    h.node.check_invariants().expect("full but consistent");
    let refused = h.submit(consume("t", 0, 15_000));
    let reply = h.replies.remove(&refused).expect("answered at once");
    assert!(matches!(reply, ClientReply::Error(ClientError::Overloaded(_))), "{reply:?}");
    let woken = h.call(produce_op("t", 0, "x"));
    assert!(matches!(woken, ClientReply::Produced { .. }));
    assert_eq!(h.node.parked_consumes(), 0, "one commit wakes every parked consume");
    assert_eq!(h.replies.len(), PARKED_MAX);
}

/// A node that does not own the partition forwards the wait; the owner parks it and answers
/// once the record is visible (or empty at the deadline, before the forward's own timeout).
#[test]
fn a_long_poll_through_a_non_owner_is_woken_on_the_owner() {
    let mut c = Cluster::new(3);
    let op = ClientOp::CreateTopic {
        name: "t".into(),
        partitions: Some(3),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    };
    let Some(ClientReply::TopicCreated(_)) = c.call(0, op, 10_000) else { panic!() };
    c.run_for(2_000);
    let Some(ClientReply::Topic(_, stats)) =
        c.call(0, ClientOp::GetTopic { name: "t".into(), partition: None }, 5_000)
    else {
        panic!("topic stats");
    };
    let remote = stats.iter().find(|p| p.owner_node != 1).expect("a partition node 1 does not own");
    let partition = remote.index;
    let wait =
        ClientOp::Consume { topic: "t".into(), partition, offset: 0, max: 5, wait_ms: 8_000 };
    let request = c.submit(0, wait);
    c.run_for(3_000);
    assert!(!c.replies.contains_key(&request), "nothing visible yet");
    let owner = remote.owner_node as usize - 1;
    assert_eq!(c.node(owner).parked_consumes(), 1, "parked on the owner");
    let message =
        ProduceMessage { key: None, partition: Some(partition), payload: Bytes::from("p") };
    let produce = ClientOp::Produce { topic: "t".into(), messages: vec![message], batch: false };
    let produce = c.submit(2, produce);
    c.run_until(3_000, |c| c.replies.contains_key(&request));
    assert!(matches!(c.replies.remove(&produce), Some(ClientReply::Produced { .. })));
    let reply = c.replies.remove(&request).expect("woken through the forward");
    let ClientReply::Records(records) = reply else { panic!("{reply:?}") };
    assert_eq!((records.len(), records[0].partition), (1, partition));
    // Nothing at offset 1: the owner answers empty at the deadline; the forward has not timed out.
    let wait =
        ClientOp::Consume { topic: "t".into(), partition, offset: 1, max: 5, wait_ms: 1_000 };
    let request = c.submit(0, wait);
    c.run_until(5_000, |c| c.replies.contains_key(&request));
    let reply = c.replies.remove(&request).expect("answered at the deadline");
    assert!(matches!(&reply, ClientReply::Records(r) if r.is_empty()), "{reply:?}");
}
