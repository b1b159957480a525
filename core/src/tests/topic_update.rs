//! Changing a topic's retention through the metastore (`ClientOp::UpdateTopic`): on one node
//! (validation before proposing, unknown names, restarts) and in a cluster (through a follower,
//! read-your-writes on the node that took the request, every replica agrees, no quorum).

use super::cluster_harness::Cluster;
use super::harness::Harness;
use crate::api::{ClientError, ClientOp, ClientReply, TopicChange, TopicInfo};
use crate::constants::{DEFAULT_RETENTION_MS, MIN_RETENTION_BYTES};

fn create_op(name: &str) -> ClientOp {
    ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(2),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    }
}

fn update_op(
    name: &str,
    retention_ms: Option<u64>,
    retention_bytes: Option<Option<u64>>,
) -> ClientOp {
    ClientOp::UpdateTopic {
        name: name.into(),
        change: TopicChange { retention_ms, retention_bytes },
    }
}

fn shown(reply: ClientReply) -> TopicInfo {
    match reply {
        ClientReply::Topic(topic, _) | ClientReply::TopicUpdated(topic) => topic,
        other => panic!("{other:?}"),
    }
}

fn status(reply: &ClientReply) -> u16 {
    match reply {
        ClientReply::Error(error) => error.http_status(),
        _ => 200,
    }
}

#[test]
fn an_update_changes_what_it_names_and_survives_a_restart() {
    let mut h = Harness::new();
    let ClientReply::TopicCreated(created) = h.call(create_op("t")) else { panic!("create") };
    assert_eq!(created.retention_ms_in_force(), DEFAULT_RETENTION_MS, "the default applies");
    let bytes = 8 * MIN_RETENTION_BYTES;
    let updated = shown(h.call(update_op("t", Some(60_000), Some(Some(bytes)))));
    assert_eq!((updated.id, updated.partitions), (created.id, 2), "same incarnation");
    assert_eq!((updated.retention_ms, updated.retention_bytes), (Some(60_000), Some(bytes)));
    // Only what is named changes; `Some(None)` removes the size limit.
    let cleared = shown(h.call(update_op("t", None, Some(None))));
    assert_eq!((cleared.retention_ms, cleared.retention_bytes), (Some(60_000), None));
    let forever = shown(h.call(update_op("t", Some(0), Some(Some(bytes)))));
    assert_eq!(forever.retention_ms_in_force(), 0);
    let mut h = h.restart();
    h.run();
    let after = shown(h.call(ClientOp::GetTopic { name: "t".into(), partition: None }));
    assert_eq!(after, forever, "the update is in the metastore's log and survives a restart");
}

#[test]
fn bad_updates_are_refused_before_they_are_proposed_and_unknown_names_are_404() {
    let mut h = Harness::new();
    h.call(create_op("t"));
    let before = shown(h.call(ClientOp::GetTopic { name: "t".into(), partition: None }));
    for (bad, what) in [
        (update_op("t", None, None), "nothing to change"),
        (update_op("t", Some(999), None), "retention_ms"),
        (update_op("t", None, Some(Some(MIN_RETENTION_BYTES - 1))), "retention_bytes"),
        (update_op("t", Some(u64::MAX), None), "retention_ms"),
    ] {
        let reply = h.call(bad);
        assert!(
            matches!(&reply, ClientReply::Error(ClientError::BadRequest(m)) if m.contains(what)),
            "{reply:?}"
        );
    }
    assert_eq!(
        shown(h.call(ClientOp::GetTopic { name: "t".into(), partition: None })),
        before,
        "unchanged"
    );
    let unknown = h.call(update_op("nope", Some(1_000), None));
    assert!(matches!(unknown, ClientReply::Error(ClientError::NotFound(_))), "{unknown:?}");
    h.call(ClientOp::DeleteTopic { name: "t".into() });
    let gone = h.call(update_op("t", Some(1_000), None));
    assert!(matches!(gone, ClientReply::Error(ClientError::NotFound(_))), "{gone:?}");
}

#[test]
fn a_create_takes_retention_bytes_and_refuses_bad_retention() {
    let mut h = Harness::new();
    let with = |ms, bytes| ClientOp::CreateTopic {
        name: "r".into(),
        partitions: Some(1),
        retention_ms: ms,
        retention_bytes: bytes,
        queue: Default::default(),
    };
    for (ms, bytes) in [(Some(1), None), (None, Some(1)), (None, Some(0))] {
        assert_eq!(status(&h.call(with(ms, bytes))), 400, "{ms:?} {bytes:?}");
    }
    let ClientReply::TopicCreated(topic) = h.call(with(Some(1_000), Some(MIN_RETENTION_BYTES)))
    else {
        panic!("create")
    };
    assert_eq!(
        (topic.retention_ms, topic.retention_bytes),
        (Some(1_000), Some(MIN_RETENTION_BYTES))
    );
    let mut h = h.restart();
    h.run();
    assert_eq!(shown(h.call(ClientOp::GetTopic { name: "r".into(), partition: None })), topic);
}

/// Through a follower: forwarded to the leader, answered once the follower's own replica shows
/// the change (so a read right after the answer sees it), and every replica agrees.
#[test]
fn an_update_through_a_follower_reaches_every_replica() {
    let mut c = Cluster::new(3);
    let follower = (c.leader() + 1) % 3;
    let Some(ClientReply::TopicCreated(created)) = c.call(follower, create_op("t"), 10_000) else {
        panic!("create")
    };
    let bytes = Some(Some(5 * MIN_RETENTION_BYTES));
    let reply = c.call(follower, update_op("t", Some(3_600_000), bytes), 10_000);
    let Some(ClientReply::TopicUpdated(updated)) = reply else { panic!("{reply:?}") };
    assert_eq!(updated.id, created.id);
    let on = |c: &mut Cluster, ix| {
        shown(c.call(ix, ClientOp::GetTopic { name: "t".into(), partition: None }, 5_000).unwrap())
    };
    assert_eq!(on(&mut c, follower), updated, "read-your-writes on the node that took it");
    c.run_for(1_000);
    for ix in 0..3 {
        assert_eq!(on(&mut c, ix), updated, "node {ix}");
    }
}

#[test]
fn without_a_quorum_an_update_fails_fast() {
    let mut c = Cluster::new(3);
    let leader = c.leader();
    c.call(leader, create_op("t"), 10_000);
    c.run_for(500);
    let lone = (leader + 1) % 3;
    c.kill(leader);
    c.kill((leader + 2) % 3);
    let reply = c.call(lone, update_op("t", Some(1_000), None), 10_000);
    let reply = reply.expect("answered within 10 s, not hanging");
    assert_eq!(status(&reply), 503, "{reply:?}");
}
