//! Queue consume on whole nodes: receives lease, acks are durable and never redelivered, a nack
//! or an expiry makes a message available again with a higher delivery count, stale handles
//! answer 410, a restart voids leases but keeps acks and counts, and acks share journal syncs.
//! Through another node of a cluster too.

use bytes::Bytes;

use super::cluster_harness::Cluster;
use super::harness::Harness;
use crate::api::{
    ClientError, ClientOp, ClientReply, DeadLetter, LeasedRecord, ProduceMessage, QueueSettings,
    SettleAction,
};
use crate::io::{DiskOp, FileId};

use super::cluster_harness::create_op as create;

fn produce(name: &str, count: usize) -> ClientOp {
    let message = |i: usize| ProduceMessage {
        key: None,
        partition: Some(0),
        payload: Bytes::from(format!("m{i}")),
    };
    ClientOp::Produce {
        topic: name.into(),
        messages: (0..count).map(message).collect(),
        batch: true,
    }
}

fn receive(name: &str, max: u32) -> ClientOp {
    ClientOp::Receive { topic: name.into(), partition: None, max, wait_ms: 0 }
}

fn settle(name: &str, handles: &[&str], action: SettleAction) -> ClientOp {
    let handles = handles.iter().map(|h| (*h).to_string()).collect();
    ClientOp::Settle { topic: name.into(), handles, action, batch: true }
}

fn leased(reply: ClientReply) -> Vec<LeasedRecord> {
    match reply {
        ClientReply::Leased(leased) => leased,
        other => panic!("{other:?}"),
    }
}

fn results(reply: ClientReply) -> Vec<Result<(), ClientError>> {
    match reply {
        ClientReply::Settled(results) => results,
        other => panic!("{other:?}"),
    }
}

fn offsets(leased: &[LeasedRecord]) -> Vec<(u64, u32)> {
    leased.iter().map(|l| (l.record.offset, l.delivery_count)).collect()
}

fn ready(name: &str, count: usize) -> Harness {
    let mut h = Harness::new();
    assert!(matches!(h.call(create(name, 1)), ClientReply::TopicCreated(_)));
    assert!(matches!(h.call(produce(name, count)), ClientReply::Produced { .. }));
    h.run();
    h
}

#[test]
fn leases_acks_nacks_and_stale_handles() {
    let mut h = ready("q", 5);
    let first = leased(h.call(receive("q", 2)));
    assert_eq!(offsets(&first), [(0, 1), (1, 1)]);
    assert_eq!(first[0].record.payload, Bytes::from("m0"));
    let rest = leased(h.call(receive("q", 10)));
    assert_eq!(offsets(&rest), [(2, 1), (3, 1), (4, 1)], "leased ones are not offered again");
    assert!(leased(h.call(receive("q", 10))).is_empty(), "everything is leased");
    let handles: Vec<&str> = first.iter().map(|l| l.receipt_handle.as_str()).collect();
    assert_eq!(results(h.call(settle("q", &handles, SettleAction::Ack))), [Ok(()), Ok(())]);
    assert_eq!(
        results(h.call(settle("q", &handles[..1], SettleAction::Ack))),
        [Err(ClientError::StaleHandle(
            "receipt handle matches no lease: it expired, was settled or was delivered again; \
             do not retry"
                .into()
        ))],
        "an acked handle is stale"
    );
    let nacked = rest[0].receipt_handle.as_str();
    assert_eq!(results(h.call(settle("q", &[nacked], SettleAction::Nack))), [Ok(())]);
    let again = leased(h.call(receive("q", 10)));
    assert_eq!(offsets(&again), [(2, 2)], "a nacked message comes back, its count grown");
    assert_ne!(again[0].receipt_handle, nacked, "a new delivery, a new handle");
    let stale = results(h.call(settle("q", &[nacked], SettleAction::Ack)));
    assert!(matches!(stale[..], [Err(ClientError::StaleHandle(_))]), "{stale:?}");
}

#[test]
fn expired_leases_come_back_and_extend_keeps_them() {
    let mut h = ready("q", 2);
    let leases = leased(h.call(receive("q", 2)));
    let keep = leases[1].receipt_handle.clone();
    // `run` lets 3 s pass per call; extend the second lease every call, not the first.
    for _ in 0..11 {
        assert_eq!(results(h.call(settle("q", &[&keep], SettleAction::Extend))), [Ok(())]);
    }
    let expired = leased(h.call(receive("q", 2)));
    assert_eq!(offsets(&expired), [(0, 2)], "only the lease left to expire is offered");
}

#[test]
fn a_restart_voids_leases_but_keeps_acks_and_counts() {
    let mut h = ready("q", 3);
    let leases = leased(h.call(receive("q", 3)));
    let acked = leases[1].receipt_handle.as_str();
    assert_eq!(results(h.call(settle("q", &[acked], SettleAction::Ack))), [Ok(())]);
    let mut h = h.restart();
    h.run();
    let after = leased(h.call(receive("q", 10)));
    assert_eq!(offsets(&after), [(0, 2), (2, 2)], "leased ones are available at once");
    let old = leases[0].receipt_handle.as_str();
    let stale = results(h.call(settle("q", &[old], SettleAction::Ack)));
    assert!(matches!(stale[..], [Err(ClientError::StaleHandle(_))]), "{stale:?}");
    assert!(h.files.keys().any(|f| matches!(f, FileId::ConsumerJournal { .. })));
}

/// A receive is answered without waiting for its delivery count's journal sync (the count of
/// a message delivered before is durable): the journal failing under it does not take back the
/// lease; it latches the journal, and what follows answers 500.
#[test]
fn a_receive_is_answered_ahead_of_its_journal_sync() {
    let mut h = ready("q", 2);
    h.fault = Some(Box::new(|op| {
        matches!(op, DiskOp::Sync { file: FileId::ConsumerJournal { .. } })
            .then(|| crate::io::DiskError::Io("EIO".into()))
    }));
    let first = leased(h.call(receive("q", 1)));
    assert_eq!(offsets(&first), [(0, 1)], "answered ahead of the failed sync");
    let reply = h.call(receive("q", 1));
    assert!(matches!(reply, ClientReply::Error(ClientError::Internal(_))), "{reply:?}");
    let handle = first[0].receipt_handle.as_str();
    let acked = results(h.call(settle("q", &[handle], SettleAction::Ack)));
    assert!(matches!(acked[..], [Err(ClientError::Internal(_))]), "{acked:?}");
    h.fault = None;
    let mut h = h.restart();
    h.run();
    let again = leased(h.call(receive("q", 1)));
    assert_eq!(offsets(&again), [(0, 1)], "the count was never durable: it repeats, never less");
}

/// Seed 0x23d9: start-up deleted a stale journal file while the sync of the newer one (whose
/// directory entry a crash had left unsynced) was in flight; a crash then left neither.
#[test]
fn a_stale_journal_file_is_deleted_only_after_the_start_up_syncs() {
    let mut h = ready("q", 3);
    let leases = leased(h.call(receive("q", 3)));
    let acked = leases[1].receipt_handle.as_str();
    assert_eq!(results(h.call(settle("q", &[acked], SettleAction::Ack))), [Ok(())]);
    let (&current, bytes) = h
        .files
        .iter()
        .find(|(f, _)| matches!(f, FileId::ConsumerJournal { .. }))
        .expect("a journal file");
    let FileId::ConsumerJournal { number } = current else { unreachable!() };
    let newer = FileId::ConsumerJournal { number: number + 1 };
    let bytes = bytes.clone();
    h.files.insert(newer, bytes);
    let mut h = h.restart();
    assert!(h.ops.contains(&DiskOp::Sync { file: newer }), "the newer file is synced");
    assert!(
        !h.ops.iter().any(|op| matches!(op, DiskOp::Delete { .. })),
        "nothing is deleted while the start-up syncs run: {:?}",
        h.ops
    );
    h.run_io_only();
    assert!(h.ops.contains(&DiskOp::Delete { file: current }), "the stale file is deleted after");
    assert!(!h.files.contains_key(&current));
    h.run();
    let after = leased(h.call(receive("q", 10)));
    assert_eq!(offsets(&after), [(0, 2), (2, 2)], "the ack and the counts held");
}

#[test]
fn acks_submitted_together_share_one_journal_sync() {
    let mut h = ready("q", 50);
    let leases = leased(h.call(receive("q", 50)));
    assert_eq!(leases.len(), 50);
    let syncs_before = journal_syncs(&h);
    let requests: Vec<_> = leases
        .iter()
        .map(|l| {
            let op = ClientOp::Settle {
                topic: "q".into(),
                handles: vec![l.receipt_handle.clone()],
                action: SettleAction::Ack,
                batch: false,
            };
            h.submit(op)
        })
        .collect();
    h.run();
    for request in requests {
        assert_eq!(h.replies.remove(&request), Some(ClientReply::Settled(vec![Ok(())])));
    }
    let syncs = journal_syncs(&h) - syncs_before;
    assert!(syncs <= 2, "50 acks took {syncs} journal syncs");
    let mut h = h.restart();
    h.run();
    assert!(leased(h.call(receive("q", 100))).is_empty(), "every ack held");
}

/// Journal syncs so far, counted by the harness's disk.
fn journal_syncs(h: &Harness) -> usize {
    h.ops
        .iter()
        .filter(|op| matches!(op, DiskOp::Sync { file: FileId::ConsumerJournal { .. } }))
        .count()
}

#[test]
fn bad_handles_answer_each_in_its_slot() {
    let mut h = ready("q", 1);
    let leases = leased(h.call(receive("q", 1)));
    let good = leases[0].receipt_handle.as_str();
    let out = results(h.call(settle("q", &["nope", "7:0:1", good, "0:0:1"], SettleAction::Ack)));
    assert!(matches!(out[0], Err(ClientError::BadRequest(_))), "{out:?}");
    assert!(matches!(out[1], Err(ClientError::StaleHandle(_))), "no partition 7: {out:?}");
    assert_eq!(out[2], Ok(()));
    assert!(matches!(out[3], Err(ClientError::StaleHandle(_))), "a forged nonce: {out:?}");
}

#[test]
fn receives_and_settles_through_another_node() {
    let mut c = Cluster::new(3);
    c.run_until(20_000, Cluster::all_ready);
    let created = c.call(0, create("q", 3), 10_000).expect("answered");
    assert!(matches!(created, ClientReply::TopicCreated(_)), "{created:?}");
    for partition in 0..3 {
        let message =
            ProduceMessage { key: None, partition: Some(partition), payload: Bytes::from("x") };
        let op = ClientOp::Produce { topic: "q".into(), messages: vec![message], batch: false };
        assert!(matches!(c.call(0, op, 10_000), Some(ClientReply::Produced { .. })));
    }
    c.run_for(3_000);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let got = leased(c.call(1, receive("q", 1), 10_000).expect("answered"));
        assert_eq!(got.len(), 1, "every partition has one message");
        seen.push(got[0].record.partition);
        let handle = got[0].receipt_handle.as_str();
        let settled = c.call(2, settle("q", &[handle], SettleAction::Ack), 10_000);
        assert_eq!(settled, Some(ClientReply::Settled(vec![Ok(())])));
    }
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2], "the receives went through every partition");
    let none = leased(c.call(2, receive("q", 10), 10_000).expect("answered"));
    assert!(none.is_empty(), "everything acked");
}

fn create_with(name: &str, queue: QueueSettings) -> ClientOp {
    ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(1),
        retention_ms: None,
        retention_bytes: None,
        queue,
    }
}

fn dead_letter_to(topic: &str, max_deliveries: u32) -> QueueSettings {
    let dead_letter = Some(DeadLetter { max_deliveries, topic: topic.into() });
    QueueSettings { visibility_timeout_ms: None, dead_letter }
}

/// The payloads of partition 0 of `topic` from offset 0.
fn replay(h: &mut Harness, topic: &str) -> Vec<Bytes> {
    h.read_partition_zero(topic).into_iter().map(|r| r.payload).collect()
}

/// Receives the one message of `q` and nacks it; its delivery count.
fn receive_and_nack(h: &mut Harness) -> u32 {
    let lease = leased(h.call(receive("q", 1)));
    assert_eq!(lease.len(), 1, "the message is offered");
    let handle = lease[0].receipt_handle.as_str();
    assert_eq!(results(h.call(settle("q", &[handle], SettleAction::Nack))), [Ok(())]);
    lease[0].delivery_count
}

#[test]
fn a_topic_sets_its_own_lease() {
    let mut h = Harness::new();
    let queue = QueueSettings { visibility_timeout_ms: Some(10_000), dead_letter: None };
    let ClientReply::TopicCreated(info) = h.call(create_with("q", queue.clone())) else {
        panic!("created")
    };
    assert_eq!(info.queue, queue);
    assert!(matches!(h.call(produce("q", 1)), ClientReply::Produced { .. }));
    h.run();
    // Every call and run lets 3 s pass.
    assert_eq!(offsets(&leased(h.call(receive("q", 1)))), [(0, 1)]);
    h.run();
    assert!(leased(h.call(receive("q", 1))).is_empty(), "6 s in: still leased");
    h.run();
    let again = leased(h.call(receive("q", 1)));
    assert_eq!(offsets(&again), [(0, 2)], "12 s in: the topic's 10 s lease is over, not 30 s");
}

#[test]
fn a_dead_letter_topic_must_exist_and_be_another_topic() {
    let mut h = Harness::new();
    let missing = h.call(create_with("q", dead_letter_to("dlq", 2)));
    assert!(matches!(missing, ClientReply::Error(ClientError::BadRequest(_))), "{missing:?}");
    let itself = h.call(create_with("q", dead_letter_to("q", 2)));
    assert!(matches!(itself, ClientReply::Error(ClientError::BadRequest(_))), "{itself:?}");
    assert!(matches!(h.call(create("dlq", 1)), ClientReply::TopicCreated(_)));
    let ok = h.call(create_with("q", dead_letter_to("dlq", 2)));
    assert!(matches!(ok, ClientReply::TopicCreated(ref t) if t.queue == dead_letter_to("dlq", 2)));
}

#[test]
fn a_message_delivered_max_deliveries_times_moves_to_the_dead_letter_topic() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("dlq", 1)), ClientReply::TopicCreated(_)));
    assert!(matches!(
        h.call(create_with("q", dead_letter_to("dlq", 2))),
        ClientReply::TopicCreated(_)
    ));
    assert!(matches!(h.call(produce("q", 1)), ClientReply::Produced { .. }));
    h.run();
    assert_eq!([receive_and_nack(&mut h), receive_and_nack(&mut h)], [1, 2]);
    assert!(leased(h.call(receive("q", 1))).is_empty(), "a third delivery moves it instead");
    h.run();
    assert_eq!(replay(&mut h, "dlq"), [Bytes::from("m0")], "the copy is in the dead-letter topic");
    assert_eq!(h.node.stats().queue_dead_lettered, 1);
    let mut h = h.restart();
    h.run();
    assert!(leased(h.call(receive("q", 1))).is_empty(), "the original's ack is durable");
    assert_eq!(replay(&mut h, "dlq"), [Bytes::from("m0")], "moved once");
}

#[test]
fn a_dead_letter_copy_that_cannot_be_made_durable_leaves_the_message_in_place() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("dlq", 1)), ClientReply::TopicCreated(_)));
    let created = h.call(create_with("q", dead_letter_to("dlq", 1)));
    assert!(matches!(created, ClientReply::TopicCreated(_)), "{created:?}");
    assert!(matches!(h.call(produce("q", 1)), ClientReply::Produced { .. }));
    h.run();
    assert_eq!(receive_and_nack(&mut h), 1);
    // Every WAL write fails from now on: the copy's group commit fails and the WAL latches.
    h.fault = Some(Box::new(|op| {
        matches!(op, DiskOp::Write { file: FileId::WalSegment { .. }, .. })
            .then(|| crate::io::DiskError::Io("EIO".into()))
    }));
    assert!(leased(h.call(receive("q", 1))).is_empty());
    h.run();
    assert!(leased(h.call(receive("q", 1))).is_empty(), "the latched WAL takes no copy");
    assert!(replay(&mut h, "dlq").is_empty());
    assert_eq!(h.node.stats().queue_dead_lettered, 0);
    // After a restart with a healthy disk the move runs again, and completes.
    let mut h = h.restart();
    h.run();
    assert!(leased(h.call(receive("q", 1))).is_empty());
    h.run();
    assert_eq!(replay(&mut h, "dlq"), [Bytes::from("m0")], "not lost on the way");
}

/// Found by the simulator (seed 0x278, one node): a receive whose reserved offsets were all
/// due for the dead-letter topic answered empty although later messages were available, and a
/// worker (the final drain) took the empty answer for "nothing left".
#[test]
fn a_receive_that_only_moved_messages_goes_on_to_the_next_available_one() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("dlq", 1)), ClientReply::TopicCreated(_)));
    let created = h.call(create_with("q", dead_letter_to("dlq", 1)));
    assert!(matches!(created, ClientReply::TopicCreated(_)), "{created:?}");
    assert!(matches!(h.call(produce("q", 3)), ClientReply::Produced { .. }));
    h.run();
    assert_eq!(receive_and_nack(&mut h), 1, "offset 0, delivered once: its last delivery");
    let next = leased(h.call(receive("q", 1)));
    assert_eq!(offsets(&next), [(1, 1)], "offset 0 is moved, and offset 1 is offered");
    h.run();
    assert_eq!(replay(&mut h, "dlq"), [Bytes::from("m0")]);
}

fn receive_waiting(name: &str, wait_ms: u64) -> ClientOp {
    ClientOp::Receive { topic: name.into(), partition: None, max: 1, wait_ms }
}

#[test]
fn a_waiting_receive_is_answered_by_the_commit_that_brings_a_message() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("q", 2)), ClientReply::TopicCreated(_)));
    let parked = h.submit(receive_waiting("q", 10_000));
    h.run(); // 3 s: nothing to lease yet
    assert!(!h.replies.contains_key(&parked), "it waits");
    assert_eq!(h.node.stats().consumes_parked, 1);
    let before = h.now;
    assert!(matches!(h.call(produce("q", 1)), ClientReply::Produced { .. }));
    let leased = leased(h.replies.remove(&parked).expect("answered by the commit"));
    assert_eq!(offsets(&leased), [(0, 1)]);
    assert!(h.now.micros_since(before) < 3_100_000, "within the produce's own run, not at 10 s");
    let ended = h.submit(receive_waiting("q", 2_000));
    h.run();
    assert!(leased_of(h.replies.remove(&ended)).is_empty(), "a wait that ends answers empty");
}

#[test]
fn a_nack_or_an_expired_lease_wakes_a_waiting_receive() {
    let mut h = Harness::new();
    let queue = QueueSettings { visibility_timeout_ms: Some(1_000), dead_letter: None };
    assert!(matches!(h.call(create_with("q", queue)), ClientReply::TopicCreated(_)));
    assert!(matches!(h.call(produce("q", 1)), ClientReply::Produced { .. }));
    h.run();
    // No time passes between these requests (`run_io_only`): the 1 s lease holds.
    let now = |h: &mut Harness, op: ClientOp| {
        let request = h.submit(op);
        h.run_io_only();
        h.replies.remove(&request)
    };
    let first = leased_of(now(&mut h, receive("q", 1)));
    assert_eq!(offsets(&first), [(0, 1)]);
    let waiting = h.submit(receive_waiting("q", 20_000));
    h.run_io_only();
    assert!(!h.replies.contains_key(&waiting), "nothing available: it parks");
    let nack = settle("q", &[first[0].receipt_handle.as_str()], SettleAction::Nack);
    assert_eq!(results(now(&mut h, nack).expect("answered")), [Ok(())]);
    assert_eq!(offsets(&leased_of(h.replies.remove(&waiting))), [(0, 2)], "woken by the nack");
    // The lease of delivery 2 runs for 1 s; a receive waiting 20 s gets the message once it
    // expires.
    let waiting = h.submit(receive_waiting("q", 20_000));
    h.run_io_only();
    assert!(!h.replies.contains_key(&waiting), "leased: it parks");
    let before = h.now;
    h.run();
    assert_eq!(offsets(&leased_of(h.replies.remove(&waiting))), [(0, 3)], "woken by the expiry");
    assert!(h.now.micros_since(before) <= 3_000_000);
}

fn leased_of(reply: Option<ClientReply>) -> Vec<LeasedRecord> {
    leased(reply.expect("answered"))
}

/// The owners of `topic`'s partitions, as cluster indexes (node ids are 1-based).
fn owner_indexes(c: &mut Cluster, topic: &str) -> Vec<usize> {
    match c.call(0, ClientOp::GetTopic { name: topic.into(), partition: None }, 5_000) {
        Some(ClientReply::Topic(_, stats)) => {
            stats.iter().map(|p| p.owner_node as usize - 1).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// A topic-wide waiting receive through a node that owns none of the topic's partitions, or
/// only another one: the owner of the partition a message lands on watches for it and wakes
/// it, long before its wait ends.
#[test]
fn a_topic_wide_waiting_receive_is_woken_by_a_message_on_another_owner() {
    let mut c = Cluster::new(3);
    c.run_until(20_000, Cluster::all_ready);
    for (name, partitions) in [("one", 1), ("two", 2)] {
        let created = c.call(0, create(name, partitions), 10_000).expect("answered");
        assert!(matches!(created, ClientReply::TopicCreated(_)), "{created:?}");
    }
    c.run_for(1_000);
    let one = owner_indexes(&mut c, "one")[0];
    let two = owner_indexes(&mut c, "two");
    // "one": through a node that owns nothing of it. "two": through the owner of partition 0
    // when the two partitions have different owners, the message going to partition 1.
    let mut cases = vec![("one", (one + 1) % 3, 0)];
    if two[0] != two[1] {
        cases.push(("two", two[0], 1));
    }
    for (name, via, partition) in cases {
        let waiting = c.submit(via, receive_waiting(name, 15_000));
        c.run_for(1_000);
        assert!(!c.replies.contains_key(&waiting), "{name}: nothing yet: it waits");
        let message = ProduceMessage { key: None, partition: Some(partition), payload: "w".into() };
        let op = ClientOp::Produce { topic: name.into(), messages: vec![message], batch: false };
        assert!(matches!(c.call((via + 2) % 3, op, 5_000), Some(ClientReply::Produced { .. })));
        let produced = c.now;
        c.run_until(10_000, |c| c.replies.contains_key(&waiting));
        let got = leased_of(c.replies.remove(&waiting));
        assert_eq!(offsets(&got), [(0, 1)], "{name}: woken by the message");
        assert_eq!(got[0].record.partition, partition);
        let waited = c.now.micros_since(produced);
        assert!(waited < 2_000_000, "{name}: answered {waited} µs after the produce's 202");
    }
}

fn produce_one_each(partitions: u32) -> ClientOp {
    let message = |p| ProduceMessage { key: None, partition: Some(p), payload: Bytes::from("x") };
    ClientOp::Produce {
        topic: "f".into(),
        messages: (0..partitions).map(message).collect(),
        batch: true,
    }
}

/// A receive of several partitions fills up to `max` from the partitions this node owns, in
/// turn, instead of answering with the first one that has something.
#[test]
fn a_receive_fills_up_to_max_from_the_partitions_this_node_owns() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("f", 3)), ClientReply::TopicCreated(_)));
    assert!(matches!(h.call(produce_one_each(3)), ClientReply::Produced { .. }));
    h.run();
    let two = leased(h.call(receive("f", 2)));
    assert_eq!(two.len(), 2, "max bounds the fill: {two:?}");
    let rest = leased(h.call(receive("f", 10)));
    assert_eq!(rest.len(), 1, "the one message left");
    let mut partitions: Vec<u32> = two.iter().chain(&rest).map(|l| l.record.partition).collect();
    partitions.sort_unstable();
    assert_eq!(partitions, [0, 1, 2], "each message leased once");
    assert!(leased(h.call(receive("f", 10))).is_empty(), "all leased");
}

/// In a cluster the fill goes on only through partitions the node that took the receive owns:
/// the leases already granted are answered rather than held for a hop to another owner.
#[test]
fn a_receive_in_a_cluster_fills_only_from_its_own_partitions() {
    let mut c = Cluster::new(3);
    c.run_until(20_000, Cluster::all_ready);
    let created = c.call(0, create("f", 6), 10_000).expect("answered");
    assert!(matches!(created, ClientReply::TopicCreated(_)), "{created:?}");
    assert!(matches!(c.call(0, produce_one_each(6), 10_000), Some(ClientReply::Produced { .. })));
    c.run_for(3_000);
    let op = ClientOp::GetTopic { name: "f".into(), partition: None };
    let Some(ClientReply::Topic(_, stats)) = c.call(0, op, 10_000) else { panic!("stats") };
    let owner = |p: u32| stats[p as usize].owner_node;
    let mut seen = Vec::new();
    for round in 0..6 {
        let via = round % 3;
        let got = leased(c.call(via, receive("f", 10), 10_000).expect("answered"));
        let me = via as u32 + 1; // the harness numbers node `ix` as id `ix + 1`
        for filled in got.iter().skip(1) {
            assert_eq!(owner(filled.record.partition), me, "filled from its own: {got:?}");
        }
        seen.extend(got.iter().map(|l| l.record.partition));
    }
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3, 4, 5], "each message leased once");
}
