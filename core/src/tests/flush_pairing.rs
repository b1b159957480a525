//! Flush pairing (`node/flush_pairing.rs`): a lone producer's partition work waits for the next
//! group commit, goes just before it, and goes alone at the hold's deadline. The dispatch linger
//! is off here so the hold is seen alone; the last test has both.

use bytes::Bytes;

use super::harness::Harness;
use crate::api::{ClientOp, ClientReply, ProduceMessage};
use crate::io::{DiskOp, FileId};

fn harness(hold_us: u64) -> Harness {
    harness_with_linger(hold_us, false)
}

fn harness_with_linger(hold_us: u64, linger: bool) -> Harness {
    let mut config = Harness::config();
    config.flush_pairing_us = hold_us;
    config.dispatch_linger = linger;
    let mut h = Harness::with_config(Default::default(), config);
    h.run();
    let reply = h.call(ClientOp::CreateTopic {
        name: "t".into(),
        partitions: Some(1),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    });
    assert!(matches!(reply, ClientReply::TopicCreated(_)), "{reply:?}");
    // The first record creates the partition's segment; the tests look at the ones after it.
    produce(&mut h, "first");
    h.run();
    h
}

fn produce(h: &mut Harness, payload: &str) {
    let message =
        ProduceMessage { key: None, partition: None, payload: Bytes::from(payload.to_string()) };
    h.submit(ClientOp::Produce { topic: "t".into(), messages: vec![message], batch: true });
}

fn partition_writes(h: &Harness) -> usize {
    h.ops.iter().filter(|op| is_write(op, is_partition_segment)).count()
}

fn is_write(op: &DiskOp, file: impl Fn(FileId) -> bool) -> bool {
    matches!(op, DiskOp::Write { .. }) && file(op.file())
}

fn is_partition_segment(file: FileId) -> bool {
    matches!(file, FileId::PartitionSegment { .. })
}

#[test]
fn a_lone_produces_partition_write_waits_and_goes_just_before_the_next_group_commit() {
    let mut h = harness(1_000);
    let before = partition_writes(&h);
    produce(&mut h, "a");
    h.run_io_only();
    assert_eq!(partition_writes(&h), before, "held for the next group commit");
    let deadline = h.node.poll_timeout().expect("the hold has a deadline");
    assert!(deadline <= h.now.plus_micros(1_000), "{deadline:?}");

    let ops_before = h.ops.len();
    produce(&mut h, "b");
    let emitted = &h.ops[ops_before..];
    let first_wal = emitted
        .iter()
        .position(|op| is_write(op, |file| matches!(file, FileId::WalSegment { .. })))
        .expect("the second produce starts a group commit");
    let held = emitted[..first_wal].iter().filter(|op| is_write(op, is_partition_segment));
    assert!(
        held.count() > 0,
        "the held partition work goes just before the WAL write: {emitted:?}"
    );
    h.run();
    assert_eq!(h.read_partition_zero("t").len(), 3);
}

#[test]
fn with_no_next_group_commit_the_held_work_goes_at_the_deadline() {
    let mut h = harness(1_000);
    produce(&mut h, "a");
    h.run_io_only();
    let start = h.now;
    let before = partition_writes(&h);
    for _ in 0..100 {
        if partition_writes(&h) > before {
            break;
        }
        let at = h.node.poll_timeout().expect("the hold has a deadline");
        assert!(at <= start.plus_micros(1_000), "held past its deadline: {at:?}");
        h.fire_timeout(at);
        h.run_io_only();
    }
    assert!(partition_writes(&h) > before, "released by its deadline");
    h.run();
    assert_eq!(h.read_partition_zero("t").len(), 2);
}

#[test]
fn a_zero_hold_sends_partition_work_at_once() {
    let mut h = harness(0);
    let before = partition_writes(&h);
    produce(&mut h, "a");
    h.run_io_only();
    assert!(partition_writes(&h) > before, "nothing is held");
}

#[test]
fn with_the_linger_on_a_lone_produce_waits_for_the_linger_then_the_hold() {
    let mut h = harness_with_linger(1_000, true);
    produce(&mut h, "a");
    h.run_io_only();
    let start = h.now;
    let before = partition_writes(&h);
    let mut written_at = None;
    for _ in 0..100 {
        let Some(at) = h.node.poll_timeout() else { break };
        h.fire_timeout(at);
        h.run_io_only();
        if partition_writes(&h) > before {
            written_at = Some(h.now);
            break;
        }
    }
    let waited = written_at.expect("the partition write goes by the deadlines").micros_since(start);
    let linger = crate::constants::LINGER_FLOOR_MS * 1_000;
    assert!(waited >= linger, "the batch lingers first: {waited} µs");
    assert!(waited <= Harness::LONE_COMMIT_WAIT_US, "then at most the hold: {waited} µs");
    h.run();
    assert_eq!(h.read_partition_zero("t").len(), 2);
}
