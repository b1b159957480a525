//! Lag in time on a whole node: the timestamp of each partition's oldest unacked message, read
//! by the retention pass when nothing else told the owner (no consumer yet, or a restart), told
//! by the lease or the read-ahead otherwise, and gone once everything is acked.

use bytes::Bytes;

use super::harness::Harness;
use crate::api::{ClientOp, ClientReply, LeasedRecord, ProduceMessage, SettleAction};

fn create(name: &str) -> ClientOp {
    ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(1),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    }
}

fn produce_one(h: &mut Harness, name: &str, payload: &str) {
    let message =
        ProduceMessage { key: None, partition: Some(0), payload: Bytes::from(payload.to_string()) };
    let op = ClientOp::Produce { topic: name.into(), messages: vec![message], batch: false };
    assert!(matches!(h.call(op), ClientReply::Produced { .. }));
}

/// The timestamps of the partition's records, by offset (a replay).
fn timestamps(h: &mut Harness, name: &str) -> Vec<u64> {
    h.read_partition_zero(name).iter().map(|r| r.timestamp_ms).collect()
}

fn oldest(h: &mut Harness, name: &str) -> Option<u64> {
    match h.call(ClientOp::GetTopic { name: name.into(), partition: None }) {
        ClientReply::Topic(_, stats) => {
            stats[0].numbers.expect("our own partition").oldest_unsettled_ms
        }
        other => panic!("{other:?}"),
    }
}

fn receive(h: &mut Harness, name: &str, max: u32) -> Vec<LeasedRecord> {
    match h.call(ClientOp::Receive { topic: name.into(), partition: None, max, wait_ms: 0 }) {
        ClientReply::Leased(leased) => leased,
        other => panic!("{other:?}"),
    }
}

fn ack(h: &mut Harness, name: &str, leased: &[LeasedRecord]) {
    let handles = leased.iter().map(|l| l.receipt_handle.clone()).collect();
    let op =
        ClientOp::Settle { topic: name.into(), handles, action: SettleAction::Ack, batch: true };
    match h.call(op) {
        ClientReply::Settled(results) => assert!(results.iter().all(|r| r.is_ok()), "{results:?}"),
        other => panic!("{other:?}"),
    }
}

/// Three records seconds apart (each `call` lets 3 s pass): their distinct timestamps.
fn three_apart(h: &mut Harness) -> Vec<u64> {
    assert!(matches!(h.call(create("q")), ClientReply::TopicCreated(_)));
    for payload in ["a", "b", "c"] {
        produce_one(h, "q", payload);
    }
    let at = timestamps(h, "q");
    assert!(at.len() == 3 && at[0] < at[1] && at[1] < at[2], "{at:?}");
    at
}

#[test]
fn the_oldest_unacked_timestamp_follows_the_acks() {
    let mut h = Harness::new();
    let at = three_apart(&mut h);
    assert_eq!(oldest(&mut h, "q"), Some(at[0]), "no consumer yet: the retention pass read it");
    let first = receive(&mut h, "q", 1);
    assert_eq!(first[0].record.offset, 0);
    ack(&mut h, "q", &first);
    // Told by the read-ahead of the receive (no pass needed: `run_io_only`).
    let request = h.submit(ClientOp::GetTopic { name: "q".into(), partition: None });
    h.run_io_only();
    match h.replies.remove(&request) {
        Some(ClientReply::Topic(_, stats)) => {
            assert_eq!(stats[0].numbers.expect("ours").oldest_unsettled_ms, Some(at[1]));
        }
        other => panic!("{other:?}"),
    }
    let rest = receive(&mut h, "q", 2);
    assert_eq!(oldest(&mut h, "q"), Some(at[1]), "leased is not acked: the lease tells it");
    ack(&mut h, "q", &rest[1..]);
    assert_eq!(oldest(&mut h, "q"), Some(at[1]), "acked ahead of the frontier");
    ack(&mut h, "q", &rest[..1]);
    assert_eq!(oldest(&mut h, "q"), None, "everything acked");
    produce_one(&mut h, "q", "d");
    let at = timestamps(&mut h, "q");
    assert_eq!(oldest(&mut h, "q"), Some(at[3]), "a new message is the oldest unacked one");
}

#[test]
fn a_restart_reads_the_oldest_unacked_record_again() {
    let mut h = Harness::new();
    let at = three_apart(&mut h);
    let first = receive(&mut h, "q", 1);
    ack(&mut h, "q", &first);
    let mut h = h.restart();
    // Before any retention pass nothing says when the oldest unacked message was produced.
    let request = h.submit(ClientOp::GetTopic { name: "q".into(), partition: None });
    h.run_io_only();
    match h.replies.remove(&request) {
        Some(ClientReply::Topic(_, stats)) => {
            assert_eq!(stats[0].numbers.expect("ours").oldest_unsettled_ms, None);
        }
        other => panic!("{other:?}"),
    }
    h.run();
    assert_eq!(oldest(&mut h, "q"), Some(at[1]), "the pass read the record at the frontier");
}
