//! Whole-cluster flows through several `Node`s: topic admin through any node, remote commits,
//! consume through any node, an owner's death and reroute, losing the quorum, and discards that
//! wait for the leader's word.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::cluster_harness::{Cluster, Ix};
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage, TopicInfo};
use crate::constants::MAX_MESSAGE_BYTES;
use crate::ids::PartitionKey;
use crate::peer::{PeerMessage, WireCommitResult, WireRecord};

fn create(c: &mut Cluster, via: Ix, name: &str, partitions: u32) -> TopicInfo {
    let op = super::cluster_harness::create_op(name, partitions);
    match c.call(via, op, 10_000) {
        Some(ClientReply::TopicCreated(topic)) => topic,
        other => panic!("create via node {via}: {other:?}"),
    }
}

fn produce(
    c: &mut Cluster,
    via: Ix,
    topic: &str,
    payload: String,
    key: Option<String>,
) -> ClientReply {
    let message = ProduceMessage {
        key: key.map(Bytes::from),
        partition: None,
        payload: Bytes::from(payload),
    };
    let op = ClientOp::Produce { topic: topic.into(), messages: vec![message], batch: false };
    c.call(via, op, 10_000).expect("produce answered")
}

/// Every payload readable through node `via`, per partition.
fn read_all(c: &mut Cluster, via: Ix, topic: &str, partitions: u32) -> BTreeMap<u32, Vec<String>> {
    let mut out = BTreeMap::new();
    for partition in 0..partitions {
        let mut offset = 0;
        let mut payloads = Vec::new();
        loop {
            let op =
                ClientOp::Consume { topic: topic.into(), partition, offset, max: 100, wait_ms: 0 };
            let reply = c.call(via, op, 10_000).expect("consume answered");
            let ClientReply::Records(records) = reply else {
                panic!("partition {partition}: {reply:?}")
            };
            if records.is_empty() {
                break;
            }
            offset += records.len() as u64;
            payloads.extend(
                records.into_iter().map(|r| String::from_utf8(r.payload.to_vec()).unwrap()),
            );
        }
        out.insert(partition, payloads);
    }
    out
}

fn backlog(c: &Cluster) -> u64 {
    c.nodes.iter().flatten().map(|n| n.stats().dispatch_backlog).sum()
}

#[test]
fn any_node_administers_accepts_and_serves() {
    let mut c = Cluster::new(3);
    let topic = create(&mut c, 2, "t", 6);
    assert_eq!(topic.partitions, 6);
    c.run_for(500);
    let owners: Vec<u32> =
        match c.call(0, ClientOp::GetTopic { name: "t".into(), partition: None }, 1_000) {
            Some(ClientReply::Topic(_, stats)) => stats.iter().map(|p| p.owner_node).collect(),
            other => panic!("{other:?}"),
        };
    for node in 1..=3 {
        assert_eq!(owners.iter().filter(|&&o| o == node).count(), 2, "owners {owners:?}");
    }
    for i in 0..300 {
        let reply = produce(&mut c, i % 3, "t", format!("m{i}"), Some(format!("k{i}")));
        assert_eq!(reply, ClientReply::Produced { accepted: 1 });
    }
    c.run_until(20_000, |c| backlog(c) == 0);
    assert_eq!(backlog(&c), 0);
    let read = read_all(&mut c, 1, "t", 6);
    let mut all: Vec<String> = read.values().flatten().cloned().collect();
    all.sort();
    let mut expected: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(all, expected, "every record exactly once, read through one node");
    let remote: u64 = c.nodes.iter().flatten().map(|n| n.stats().remote_commits_ok).sum();
    assert!(remote > 0, "records accepted on one node were committed on others");
    let Some(ClientReply::Topic(_, stats)) =
        c.call(1, ClientOp::GetTopic { name: "t".into(), partition: None }, 5_000)
    else {
        panic!("topic stats");
    };
    let watermarks: Option<Vec<u64>> =
        stats.iter().map(|p| p.numbers.map(|n| n.high_watermark)).collect();
    let watermarks = watermarks.expect("every owner answered with its partitions' statistics");
    assert_eq!(watermarks.iter().sum::<u64>(), 300, "{stats:?}");
}

#[test]
fn a_dead_owners_share_is_rerouted_to_live_siblings() {
    let mut c = Cluster::new(3);
    create(&mut c, 0, "t", 6);
    c.run_for(500);
    c.kill(2);
    for i in 0..200 {
        let reply = produce(&mut c, i % 2, "t", format!("m{i}"), Some(format!("k{i}")));
        assert_eq!(reply, ClientReply::Produced { accepted: 1 }, "data plane stays available");
    }
    // Node 3 is marked dead after 5 s; its share then moves to live siblings.
    c.run_until(15_000, |c| backlog(c) == 0);
    assert_eq!(backlog(&c), 0, "everything committed somewhere while node 3 is dead");
    let rerouted: u64 = c.nodes.iter().flatten().map(|n| n.stats().records_rerouted).sum();
    assert!(rerouted > 0);
    c.start(2);
    c.run_until(20_000, |c| c.all_ready());
    c.run_for(2_000); // every replica sees node 3 alive again
    let read = read_all(&mut c, 0, "t", 6);
    let mut all: Vec<String> = read.values().flatten().cloned().collect();
    all.sort();
    let mut expected: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(all, expected, "nothing lost, nothing twice");
}

#[test]
fn without_a_quorum_produce_is_accepted_and_admin_fails_fast() {
    let mut c = Cluster::new(3);
    create(&mut c, 0, "t", 3);
    c.run_for(500);
    c.kill(1);
    c.kill(2);
    let reply = produce(&mut c, 0, "t", "alone".into(), None);
    assert_eq!(reply, ClientReply::Produced { accepted: 1 });
    let op = ClientOp::CreateTopic {
        name: "u".into(),
        partitions: None,
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    };
    let reply = c.call(0, op, 10_000).expect("answered within 10 s, not hanging");
    assert!(matches!(reply, ClientReply::Error(ClientError::Unavailable(_))), "{reply:?}");
    // The majority returns: what the lone node accepted for their partitions flows at once
    // (commits to unreachable owners failed fast and retry), not after a 30 s commit timeout.
    c.start(1);
    c.start(2);
    c.run_until(10_000, |c| backlog(c) == 0 && c.all_ready());
    assert_eq!(backlog(&c), 0);
    let read = read_all(&mut c, 1, "t", 3);
    assert_eq!(read.values().flatten().filter(|p| *p == "alone").count(), 1);
}

#[test]
fn a_stale_owner_makes_nobody_discard_and_records_land_once_it_catches_up() {
    let mut c = Cluster::new(3);
    let leader = c.leader();
    let stale = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    // The stale node hears nothing from the others while the topic is created.
    c.partition(stale, leader);
    c.partition(stale, other);
    create(&mut c, leader, "t", 3);
    c.run_for(300);
    for i in 0..60 {
        let reply = produce(&mut c, other, "t", format!("m{i}"), Some(format!("k{i}")));
        assert_eq!(reply, ClientReply::Produced { accepted: 1 });
    }
    c.run_for(3_000);
    let discarded: u64 = c.nodes.iter().flatten().map(|n| n.stats().records_discarded).sum();
    assert_eq!(discarded, 0, "a live topic's records are never discarded");
    c.heal();
    // Commits sent into the cut were lost: they time out (30 s, generous on purpose) and retry.
    c.run_until(45_000, |c| backlog(c) == 0);
    let read = read_all(&mut c, leader, "t", 3);
    assert_eq!(read.values().map(Vec::len).sum::<usize>(), 60);
}

#[test]
fn deleted_topic_records_are_discarded_only_after_the_leaders_word() {
    let mut c = Cluster::new(3);
    let leader = c.leader();
    let acceptor = (leader + 1) % 3;
    create(&mut c, leader, "t", 3);
    c.run_for(300);
    // The acceptor cannot reach anyone: its records wait in its WAL.
    c.partition(acceptor, leader);
    c.partition(acceptor, (leader + 2) % 3);
    for i in 0..30 {
        let reply = produce(&mut c, acceptor, "t", format!("m{i}"), Some(format!("k{i}")));
        assert_eq!(reply, ClientReply::Produced { accepted: 1 });
    }
    let own = c.node(acceptor).stats().dispatch_backlog;
    assert!(own > 0, "records for other owners wait");
    assert_eq!(
        c.call(leader, ClientOp::DeleteTopic { name: "t".into() }, 5_000),
        Some(ClientReply::TopicDeleted)
    );
    c.run_for(3_000);
    assert_eq!(
        c.node(acceptor).stats().records_discarded,
        0,
        "cut off from the leader: keeps them"
    );
    c.heal();
    c.run_until(45_000, |c| backlog(c) == 0);
    assert!(c.node(acceptor).stats().records_discarded > 0, "discarded once the leader confirmed");
    create(&mut c, leader, "t", 3);
    c.run_for(2_000);
    let read = read_all(&mut c, leader, "t", 3);
    assert_eq!(
        read.values().map(Vec::len).sum::<usize>(),
        0,
        "the new incarnation gets nothing old"
    );
}

/// C4 (sim seeds 0x3fe5, 0x8e1c): a DELETE forwarded to the leader over a stalled link times
/// out; the client deletes through another node and creates the topic again; then the stall
/// ends and the leader gets the old forward. It names the incarnation it was meant for, so the
/// new one and its records survive.
#[test]
fn a_late_forwarded_delete_leaves_a_later_incarnation_alone() {
    let mut c = Cluster::new(3);
    let leader = c.leader();
    let stalled = (leader + 1) % 3;
    let first = create(&mut c, leader, "t", 2);
    c.run_for(500);
    let known = c.call(stalled, ClientOp::GetTopic { name: "t".into(), partition: None }, 5_000);
    assert!(matches!(known, Some(ClientReply::Topic(t, _)) if t.id == first.id));
    c.clogged.insert((stalled, leader));
    let late = c.submit(stalled, ClientOp::DeleteTopic { name: "t".into() });
    c.run_until(10_000, |c| c.replies.contains_key(&late));
    assert!(
        matches!(c.replies.remove(&late), Some(ClientReply::Error(ClientError::Unavailable(_)))),
        "the held forward times out (ambiguous)"
    );
    let retry = c.call(leader, ClientOp::DeleteTopic { name: "t".into() }, 5_000);
    assert_eq!(retry, Some(ClientReply::TopicDeleted));
    let second = create(&mut c, leader, "t", 2);
    assert_ne!(second.id, first.id);
    for i in 0..10 {
        let reply = produce(&mut c, leader, "t", format!("m{i}"), None);
        assert_eq!(reply, ClientReply::Produced { accepted: 1 });
    }
    c.release();
    c.run_until(10_000, |c| backlog(c) == 0);
    c.run_for(2_000);
    for ix in 0..3 {
        let reply = c.call(ix, ClientOp::GetTopic { name: "t".into(), partition: None }, 5_000);
        let Some(ClientReply::Topic(topic, _)) = reply else { panic!("node {ix}: {reply:?}") };
        assert_eq!(topic.id, second.id, "node {ix} still has the new incarnation");
    }
    let discarded: u64 = c.nodes.iter().flatten().map(|n| n.stats().records_discarded).sum();
    assert_eq!(discarded, 0, "the new incarnation's records are never discarded");
    let read = read_all(&mut c, leader, "t", 2);
    assert_eq!(read.values().map(Vec::len).sum::<usize>(), 10);
}

/// The mirror of the test above: a create held on a clogged link reaches the leader after the
/// client's retry created the name through another node and then deleted it. Applied as is, it
/// would bring the deleted name back; it is refused and the name stays deleted everywhere.
#[test]
fn a_late_forwarded_create_does_not_bring_back_a_deleted_name() {
    let mut c = Cluster::new(3);
    let leader = c.leader();
    let stalled = (leader + 1) % 3;
    c.clogged.insert((stalled, leader));
    let create_op = || ClientOp::CreateTopic {
        name: "t".into(),
        partitions: Some(2),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    };
    let late = c.submit(stalled, create_op());
    c.run_until(10_000, |c| c.replies.contains_key(&late));
    assert!(
        matches!(c.replies.remove(&late), Some(ClientReply::Error(ClientError::Unavailable(_)))),
        "the held forward times out (ambiguous)"
    );
    let retry = create(&mut c, leader, "t", 2);
    let deleted = c.call(leader, ClientOp::DeleteTopic { name: "t".into() }, 5_000);
    assert_eq!(deleted, Some(ClientReply::TopicDeleted));
    c.release();
    c.run_for(3_000);
    for ix in 0..3 {
        let reply = c.call(ix, ClientOp::GetTopic { name: "t".into(), partition: None }, 5_000);
        assert!(
            matches!(reply, Some(ClientReply::Error(ClientError::NotFound(_)))),
            "node {ix}: the deleted name came back: {reply:?}"
        );
    }
    // A create made now, after the delete, works.
    let again = create(&mut c, leader, "t", 2);
    assert!(again.id > retry.id);
}

/// Issue 9, defect 3: a commit batch whose record exceeds the produce limits (2 MiB + 1 byte fits
/// the transport's 16 MiB frame but not a partition frame) used to panic the owner in
/// `codec::put_frame`. It is refused with a clean error, nothing lands, and the owner keeps serving.
#[test]
fn an_oversized_record_in_a_peer_commit_batch_is_refused_cleanly() {
    let mut c = Cluster::new(3);
    let topic = create(&mut c, 0, "t", 3);
    let Some(ClientReply::Topic(_, partitions)) =
        c.call(0, ClientOp::GetTopic { name: "t".into(), partition: None }, 10_000)
    else {
        panic!("get topic");
    };
    let owner = partitions[0].owner_node as usize - 1;
    let sender = (owner + 1) % 3;
    let record = |seq, len| WireRecord {
        seq,
        timestamp_ms: 1,
        key: None,
        payload: Bytes::from(vec![7u8; len]),
    };
    let message = PeerMessage::CommitBatch {
        id: 4242,
        origin_checkpoint: 0,
        target: PartitionKey { topic: topic.id, partition: 0 },
        records: vec![record(1, 10), record(2, 2 * 1024 * 1024 + 1)],
    };
    c.deliver(sender, owner, message.encode());
    c.run_for(100);
    let reply = c.sent.iter().find_map(|(from, to, bytes)| {
        let decoded = PeerMessage::decode(bytes).ok()?;
        match decoded {
            PeerMessage::CommitReply { id: 4242, result } if (*from, *to) == (owner, sender) => {
                Some(result)
            }
            _ => None,
        }
    });
    match reply {
        Some(WireCommitResult::Failed(reason)) => {
            assert!(reason.starts_with("record 1:"), "{reason}");
            assert!(reason.contains(&MAX_MESSAGE_BYTES.to_string()), "{reason}");
        }
        other => panic!("expected a Failed reply, got {other:?}"),
    }
    assert_eq!(c.node(owner).stats().peer_messages_refused, 1);
    let read = read_all(&mut c, owner, "t", 1);
    assert!(read[&0].is_empty(), "nothing of a refused batch lands");
    let reply = produce(&mut c, owner, "t", "after".into(), None);
    assert!(matches!(reply, ClientReply::Produced { accepted: 1 }), "{reply:?}");
}
