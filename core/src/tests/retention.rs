//! The retention pass on whole nodes: a topic's old records go on the owner's clock (a quiet
//! partition too), a consume below the start answers 410, new records keep flowing, the start
//! survives a restart, and a `PATCH` applies at the owners' next pass, also when it went through
//! another node of a cluster.

use bytes::Bytes;

use super::cluster_harness::Cluster;
use super::harness::Harness;
use crate::api::{
    ClientError, ClientOp, ClientReply, PartitionNumbers, ProduceMessage, TopicChange,
};
use crate::io::NodeEvent;

fn create(name: &str, partitions: u32, retention_ms: Option<u64>) -> ClientOp {
    ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(partitions),
        retention_ms,
        retention_bytes: None,
        queue: Default::default(),
    }
}

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

fn consume(name: &str, offset: u64) -> ClientOp {
    ClientOp::Consume { topic: name.into(), partition: 0, offset, max: 100, wait_ms: 0 }
}

fn numbers(reply: ClientReply) -> PartitionNumbers {
    let ClientReply::Topic(_, stats) = reply else { panic!("{reply:?}") };
    stats[0].numbers.expect("the owner answered")
}

fn get(name: &str) -> ClientOp {
    ClientOp::GetTopic { name: name.into(), partition: None }
}

fn deletions(h: &mut Harness) -> Vec<u64> {
    let events = std::iter::from_fn(|| h.node.poll_event());
    events
        .filter_map(|e| match e {
            NodeEvent::SegmentDeleted { trimmed, .. } => Some(trimmed.log_start_offset),
            _ => None,
        })
        .collect()
}

#[test]
fn a_quiet_partition_ages_out_answers_410_below_its_start_and_takes_new_records() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("r", 1, Some(1_000))), ClientReply::TopicCreated(_)));
    assert!(matches!(h.call(produce("r", 5)), ClientReply::Produced { .. }));
    // `run` lets 3 s pass: the active segment rolls at 1 s of age, and its records are past
    // 1 s of retention soon after.
    h.run();
    h.run();
    assert_eq!(deletions(&mut h), [5]);
    let after = numbers(h.call(get("r")));
    assert_eq!(
        after,
        PartitionNumbers {
            log_start_offset: 5,
            high_watermark: 5,
            segments: 1,
            size_bytes: 0,
            ..PartitionNumbers::default()
        }
    );
    let gone = h.call(consume("r", 0));
    assert_eq!(gone, ClientReply::Error(ClientError::Gone { log_start_offset: 5 }));
    let stats = h.node.stats();
    assert_eq!((stats.retention_segments_deleted, stats.retention_records_deleted), (1, 5));
    // A new record goes on at offset 5 (and, with 1 s of retention and 3 s per call here, it
    // has aged out too by the time the call returns).
    assert!(matches!(h.call(produce("r", 1)), ClientReply::Produced { .. }));
    assert_eq!(numbers(h.call(get("r"))).high_watermark, 6);
    assert_eq!(deletions(&mut h), [6]);
    // The start and the offsets survive a restart.
    let mut h = h.restart();
    h.run();
    let restarted = numbers(h.call(get("r")));
    assert_eq!((restarted.log_start_offset, restarted.high_watermark), (6, 6));
}

#[test]
fn a_topic_kept_by_default_loses_nothing_until_a_patch_shortens_its_retention() {
    let mut h = Harness::new();
    assert!(matches!(h.call(create("p", 1, None)), ClientReply::TopicCreated(_)));
    assert!(matches!(h.call(produce("p", 3)), ClientReply::Produced { .. }));
    h.run();
    h.run();
    assert!(deletions(&mut h).is_empty(), "the default keeps records 7 days");
    let change = TopicChange { retention_ms: Some(1_000), retention_bytes: None };
    let patch = ClientOp::UpdateTopic { name: "p".into(), change };
    assert!(matches!(h.call(patch), ClientReply::TopicUpdated(_)));
    h.run();
    h.run();
    assert_eq!(deletions(&mut h), [3], "applied at the next passes");
}

#[test]
fn a_patch_through_any_node_of_a_cluster_is_applied_by_the_owners() {
    let mut c = Cluster::new(3);
    let leader = c.leader();
    let created = c.call(leader, create("c", 3, None), 10_000);
    assert!(matches!(created, Some(ClientReply::TopicCreated(_))), "{created:?}");
    c.run_for(1_000);
    for ix in 0..3 {
        let messages = (0..3)
            .map(|p| ProduceMessage { key: None, partition: Some(p), payload: Bytes::from("x") })
            .collect();
        let op = ClientOp::Produce { topic: "c".into(), messages, batch: true };
        assert!(matches!(c.call(ix, op, 10_000), Some(ClientReply::Produced { .. })));
    }
    c.run_for(3_000);
    let follower = (leader + 1) % 3;
    let change = TopicChange { retention_ms: Some(1_000), retention_bytes: None };
    let patch = ClientOp::UpdateTopic { name: "c".into(), change };
    assert!(matches!(c.call(follower, patch, 10_000), Some(ClientReply::TopicUpdated(_))));
    c.run_for(4_000);
    let through = (leader + 2) % 3;
    let Some(ClientReply::Topic(_, stats)) = c.call(through, get("c"), 10_000) else {
        panic!("topic")
    };
    for p in &stats {
        let numbers = p.numbers.expect("every owner is up and answers");
        assert_eq!(
            (numbers.log_start_offset, numbers.high_watermark),
            (3, 3),
            "partition {} on node {}: every record aged out",
            p.index,
            p.owner_node
        );
    }
}
