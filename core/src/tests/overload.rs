//! Overload: past the bound on produces waiting for the group commit, a produce is answered
//! `Overloaded` at once, before anything is staged; the produces already waiting still land.

use bytes::Bytes;

use super::harness::Harness;
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage};
use crate::node::PRODUCE_WAITERS_MAX;

fn one(payload: &str) -> ClientOp {
    let message =
        ProduceMessage { key: None, partition: None, payload: Bytes::from(payload.to_string()) };
    ClientOp::Produce { topic: "t".into(), messages: vec![message], batch: false }
}

#[test]
fn an_overloaded_node_refuses_a_produce_before_staging_it() {
    let mut h = Harness::new();
    let create = ClientOp::CreateTopic {
        name: "t".into(),
        partitions: Some(1),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    };
    assert!(matches!(h.call(create), ClientReply::TopicCreated(_)));
    // The first produce's group commit is in flight (not completed); the rest stage behind it.
    let waiting: Vec<_> =
        (0..PRODUCE_WAITERS_MAX).map(|i| h.submit(one(&format!("m{i}")))).collect();
    let next_seq = h.node.stats().wal_records_synced;
    let refused = h.submit(one("one too many"));
    let reply = h.replies.remove(&refused).expect("refused at once, without waiting for disk");
    assert!(matches!(reply, ClientReply::Error(ClientError::Overloaded(_))), "{reply:?}");
    assert_eq!(reply_status(&reply), 503);
    h.node.check_invariants_deep().expect("consistent at the bound");
    h.run();
    assert!(waiting.iter().all(|r| matches!(h.replies[r], ClientReply::Produced { .. })));
    let stats = h.node.stats();
    assert_eq!(stats.records_accepted, PRODUCE_WAITERS_MAX as u64, "the refused one never staged");
    assert_eq!(stats.wal_records_synced - next_seq, PRODUCE_WAITERS_MAX as u64);
    assert!(matches!(h.call(one("after")), ClientReply::Produced { .. }), "room again");
}

fn reply_status(reply: &ClientReply) -> u16 {
    let ClientReply::Error(error) = reply else { panic!("{reply:?}") };
    error.http_status()
}
