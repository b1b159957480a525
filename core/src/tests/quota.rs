//! Produce quotas on a node (`quota.rs`): past its quota a payer's produce is answered 429
//! with when to retry, before anything is staged; the produce that spent the quota says so
//! (`NodeEvent::QuotaSpent`); the node's own work pays nothing.

use bytes::Bytes;

use super::cluster_harness::create_op;
use super::harness::Harness;
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage};
use crate::io::NodeEvent;
use crate::quota::Payer;

fn produce(bytes: usize) -> ClientOp {
    let payload = Bytes::from(vec![b'x'; bytes]);
    let message = ProduceMessage { key: None, partition: None, payload };
    ClientOp::Produce { topic: "t".into(), messages: vec![message], batch: false }
}

fn node_with_quota(bytes_per_sec: u64) -> Harness {
    let mut config = Harness::config();
    config.produce_quota_bytes_per_sec = bytes_per_sec;
    let mut h = Harness::with_config(Default::default(), config);
    h.run();
    assert!(matches!(h.call(create_op("t", 1)), ClientReply::TopicCreated(_)));
    h
}

#[test]
fn past_its_quota_a_produce_is_refused_429_before_it_is_staged() {
    let mut h = node_with_quota(1_000);
    while h.node.poll_event().is_some() {}
    // 1.6 s worth at once: the second passes (within the 1 s burst) and spends the quota.
    let first = h.submit(produce(800));
    let second = h.submit(produce(800));
    let third = h.submit(produce(10));
    let reply = h.replies.remove(&third).expect("refused at once, without waiting for disk");
    let ClientReply::Error(ClientError::QuotaExceeded { retry_after_us, message }) = &reply else {
        panic!("{reply:?}");
    };
    assert_eq!(*retry_after_us, 600_000, "1.6 s paid ahead, 1 s of it burst");
    assert!(message.contains("1000 bytes/s") && message.contains("retry after 1 s"), "{message}");
    assert_eq!(reply_status(&reply), 429);
    let spent: Vec<_> = std::iter::from_fn(|| h.node.poll_event())
        .filter(|e| matches!(e, NodeEvent::QuotaSpent { .. }))
        .collect();
    assert_eq!(spent, [NodeEvent::QuotaSpent { payer: Payer::Anonymous, wait_us: 600_000 }]);
    h.run();
    assert!(matches!(h.replies[&first], ClientReply::Produced { .. }));
    assert!(matches!(h.replies[&second], ClientReply::Produced { .. }));
    let stats = h.node.stats();
    assert_eq!(
        (stats.records_accepted, stats.wal_records_synced),
        (2, 2),
        "the refused one never staged"
    );
    assert_eq!(stats.produce_requests_throttled, 1);
    // `run` moved the clock on by seconds: paid up again.
    assert!(matches!(h.call(produce(10)), ClientReply::Produced { .. }));
}

#[test]
fn a_produce_refused_before_the_quota_is_not_charged() {
    let mut h = node_with_quota(1_000);
    let missing = ClientOp::Produce {
        topic: "nope".into(),
        messages: vec![ProduceMessage {
            key: None,
            partition: None,
            payload: Bytes::from(vec![0; 5_000]),
        }],
        batch: false,
    };
    // At one instant: had the 404 been charged its 5 s worth, the next would be refused.
    let refused = h.submit(missing);
    assert_eq!(reply_status(&h.replies[&refused]), 404);
    let request = h.submit(produce(900));
    assert!(!h.replies.contains_key(&request), "staged, waiting for its group commit");
    h.run();
    assert!(matches!(h.replies[&request], ClientReply::Produced { .. }), "nothing was owed");
}

fn reply_status(reply: &ClientReply) -> u16 {
    let ClientReply::Error(error) = reply else { panic!("{reply:?}") };
    error.http_status()
}
