//! Histories that break each queue invariant, and the ones that only look like they do.

use narad_core::api::{LeasedRecord, SettleAction};
use narad_core::{ConsumedRecord, Instant, PartitionKey, TopicId};

use super::SettleSeen;
use crate::checker::{Checker, ReadKind, inv};
use crate::payload::payload;

const TOPIC: TopicId = TopicId(1);
const KEY: PartitionKey = PartitionKey { topic: TOPIC, partition: 0 };
/// The visibility timeout of these histories.
const VIS_MS: u64 = 1_000;

fn at(ms: u64) -> Instant {
    Instant(crate::clock::START.0 + ms * 1_000)
}

/// A checker with topic `t1` live and `n` acknowledged messages (ids 0..n, message i at
/// offset i of partition 0).
fn history(n: u64) -> Checker {
    let mut checker = Checker::new(false);
    checker.queue_visibility(VIS_MS);
    checker.topic_live("t1", TOPIC);
    for _ in 0..n {
        let id = checker.next_id();
        let assigned = checker.new_message(TOPIC, None, payload(id, 32));
        checker.sent(&[assigned]);
        checker.acked(0, &[assigned], 1);
    }
    checker
}

fn record(checker: &Checker, id: u64, offset: u64) -> ConsumedRecord {
    ConsumedRecord {
        topic: "t1".into(),
        partition: 0,
        offset,
        key: None,
        payload: checker.msg(id).payload.clone(),
        timestamp_ms: 0,
    }
}

fn handle(offset: u64, count: u32) -> String {
    format!("0:{offset}:{count}")
}

/// Delivery `count` of message `id` (at offset `id`): asked at `sent_ms`, answered at `answered_ms`.
fn deliver(checker: &mut Checker, id: u64, count: u32, sent_ms: u64, answered_ms: u64) {
    let leased = LeasedRecord {
        record: record(checker, id, id),
        receipt_handle: handle(id, count),
        delivery_count: count,
    };
    checker.set_now(at(answered_ms));
    checker.queue_delivered(TOPIC, at(sent_ms), &[leased]);
}

fn settle(checker: &mut Checker, h: &str, action: SettleAction, sent_ms: u64, seen: SettleSeen) {
    checker.set_now(at(sent_ms + 1));
    checker.queue_settled(h, action, at(sent_ms), seen);
}

fn count(checker: &Checker, invariant: &str) -> usize {
    checker.violations().0.iter().filter(|v| v.invariant == invariant).count()
}

/// The end-of-run checks (leases and counts are judged once every answer is in).
fn judged(mut checker: Checker) -> Checker {
    checker.verdict(true, 0);
    checker
}

#[test]
fn an_acked_message_delivered_again_is_a_violation() {
    let mut checker = history(1);
    deliver(&mut checker, 0, 1, 0, 2);
    settle(&mut checker, &handle(0, 1), SettleAction::Ack, 10, SettleSeen::Ok);
    assert_eq!(count(&checker, inv::QUEUE_ACKED_REDELIVERED), 0);
    deliver(&mut checker, 0, 2, 5_000, 5_002);
    assert_eq!(count(&checker, inv::QUEUE_ACKED_REDELIVERED), 1);
}

#[test]
fn a_stale_handle_acking_a_redelivered_message_is_a_violation() {
    // Delivery 2 came after delivery 1 expired; then delivery 1's handle acks with 204.
    let mut checker = history(1);
    deliver(&mut checker, 0, 1, 0, 2);
    deliver(&mut checker, 0, 2, 1_500, 1_502);
    settle(&mut checker, &handle(0, 1), SettleAction::Ack, 1_600, SettleSeen::Ok);
    assert_eq!(count(&checker, inv::QUEUE_ACKED_REDELIVERED), 1);
}

#[test]
fn a_second_lease_before_the_first_ended_is_a_violation() {
    let mut checker = history(1);
    deliver(&mut checker, 0, 1, 0, 2);
    deliver(&mut checker, 0, 2, 400, 402);
    assert_eq!(count(&judged(checker), inv::QUEUE_DOUBLE_LEASE), 1);
}

#[test]
fn a_nack_answered_after_the_redelivery_still_excuses_it() {
    let mut checker = history(1);
    deliver(&mut checker, 0, 1, 0, 2);
    deliver(&mut checker, 0, 2, 400, 402);
    // Sent before the redelivery was answered, answered (seen) after it.
    checker.set_now(at(402));
    checker.queue_settled(&handle(0, 1), SettleAction::Nack, at(380), SettleSeen::Ok);
    assert_eq!(count(&judged(checker), inv::QUEUE_DOUBLE_LEASE), 0);
}

#[test]
fn nacks_restarts_and_expiry_free_a_lease_and_extends_push_its_end() {
    // Expired: fine.
    let mut checker = history(4);
    deliver(&mut checker, 0, 1, 0, 2);
    deliver(&mut checker, 0, 2, 1_100, 1_102);
    // Nacked (even ambiguously) before the redelivery: fine.
    deliver(&mut checker, 1, 1, 0, 2);
    settle(&mut checker, &handle(1, 1), SettleAction::Nack, 100, SettleSeen::Ambiguous);
    deliver(&mut checker, 1, 2, 150, 152);
    // The owner restarted: fine.
    deliver(&mut checker, 2, 1, 0, 2);
    checker.set_now(at(200));
    checker.on_crash(0);
    deliver(&mut checker, 2, 2, 300, 302);
    // Extended at 1,400 ms: the lease lasts past 2,000 ms, a delivery there is a second lease.
    // (Asked after the restart, so it does not excuse it.)
    deliver(&mut checker, 3, 1, 500, 502);
    settle(&mut checker, &handle(3, 1), SettleAction::Extend, 1_400, SettleSeen::Ok);
    deliver(&mut checker, 3, 2, 2_000, 2_002);
    let checker = judged(checker);
    let doubles: Vec<_> =
        checker.violations().0.iter().filter(|v| v.invariant == inv::QUEUE_DOUBLE_LEASE).collect();
    assert_eq!(doubles.len(), 1, "{doubles:?}");
    assert!(doubles[0].detail.contains("@3"), "only message 3's: {doubles:?}");
    let v = checker.queue_verdict();
    assert_eq!((v.deliveries, v.redeliveries), (8, 4));
    assert_eq!(
        (v.redelivered_expired, v.redelivered_nack, v.redelivered_restart),
        (2, 1, 1),
        "{v:?}"
    );
}

#[test]
fn only_a_restart_after_the_lease_was_asked_for_voids_it() {
    // The owner restarted while the reply of delivery 1 was on its way (after it was asked
    // for): excused. A restart before it was asked for excuses nothing.
    let mut checker = history(2);
    deliver(&mut checker, 0, 1, 100, 300);
    checker.set_now(at(200));
    checker.on_crash(0);
    deliver(&mut checker, 0, 2, 400, 402);
    deliver(&mut checker, 1, 1, 300, 302);
    deliver(&mut checker, 1, 2, 400, 402);
    let doubles: Vec<_> = judged(checker)
        .violations()
        .0
        .iter()
        .filter(|v| v.invariant == inv::QUEUE_DOUBLE_LEASE)
        .map(|v| v.detail.clone())
        .collect();
    assert_eq!(doubles.len(), 1, "{doubles:?}");
    assert!(doubles[0].contains("@1"), "{doubles:?}");
}

#[test]
fn delivery_counts_must_grow() {
    let mut checker = history(2);
    deliver(&mut checker, 0, 1, 0, 2);
    deliver(&mut checker, 0, 1, 2_000, 2_002);
    assert_eq!(count(&checker, inv::QUEUE_COUNT), 1, "the same count twice");
    // Count 3 answered before count 2 was asked for.
    deliver(&mut checker, 1, 3, 0, 2);
    deliver(&mut checker, 1, 2, 2_000, 2_002);
    let checker = judged(checker);
    assert!(count(&checker, inv::QUEUE_COUNT) >= 2);
    // A redelivery whose previous delivery no client saw is counted as a lost reply.
    let v = checker.queue_verdict();
    assert_eq!(v.redelivered_lost_reply, 1, "message 1's count 2: count 1 never seen: {v:?}");
}

#[test]
fn a_readable_message_the_drain_never_delivered_is_a_violation() {
    let mut checker = history(3);
    deliver(&mut checker, 0, 1, 0, 2);
    settle(&mut checker, &handle(0, 1), SettleAction::Ack, 10, SettleSeen::Ok);
    // Message 2 was delivered but never acked (the queue stopped offering it).
    deliver(&mut checker, 2, 1, 0, 2);
    checker.queue_drained();
    let records = [record(&checker, 0, 0), record(&checker, 1, 1), record(&checker, 2, 2)];
    checker.consumed(KEY, 0, &records, ReadKind::Final);
    checker.verdict(true, 0);
    assert_eq!(count(&checker, inv::QUEUE_UNDELIVERED), 2, "messages 1 and 2");
    // Without a completed drain, nothing is required.
    let mut checker = history(2);
    checker.consumed(KEY, 0, &records, ReadKind::Final);
    checker.verdict(true, 0);
    assert_eq!(count(&checker, inv::QUEUE_UNDELIVERED), 0);
}

#[test]
fn a_delivery_carrying_other_bytes_or_another_offsets_record_is_a_violation() {
    let mut checker = history(2);
    let mut bad = record(&checker, 0, 0);
    bad.payload = payload(0, 40);
    let leased = LeasedRecord { record: bad, receipt_handle: handle(0, 1), delivery_count: 1 };
    checker.queue_delivered(TOPIC, at(0), &[leased]);
    assert_eq!(count(&checker, inv::CORRUPT), 1);
    // Message 1 delivered as offset 0, which the final read finds holding message 0.
    let leased = LeasedRecord {
        record: record(&checker, 1, 0),
        receipt_handle: handle(0, 2),
        delivery_count: 2,
    };
    checker.queue_delivered(TOPIC, at(5_000), &[leased]);
    checker.consumed(KEY, 0, &[record(&checker, 0, 0)], ReadKind::Final);
    checker.verdict(true, 0);
    assert_eq!(count(&checker, inv::QUEUE_WRONG_RECORD), 1);
}

#[test]
fn in_a_cluster_a_nack_answered_410_may_still_have_freed_the_lease() {
    for (cluster, expected) in [(false, 1), (true, 0)] {
        let mut checker = history(1);
        checker.cluster = cluster;
        deliver(&mut checker, 0, 1, 0, 2);
        settle(&mut checker, &handle(0, 1), SettleAction::Nack, 100, SettleSeen::Stale);
        deliver(&mut checker, 0, 2, 150, 152);
        assert_eq!(count(&judged(checker), inv::QUEUE_DOUBLE_LEASE), expected, "cluster {cluster}");
    }
}
