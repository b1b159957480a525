//! Raft messages from a node outside the voters: the transport authenticated the sender (it has
//! the cluster secret) but it is not in this metastore's configuration, as after a
//! misconfiguration. raft-rs panics on some of them (found by the `node` fuzz target); the
//! metastore must drop them all and go on.

use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};

use crate::ids::NodeId;

use super::harness::World;

fn message(kind: MessageType, from: u64, term: u64, commit: u64) -> Vec<u8> {
    let mut message = Message::default();
    message.set_msg_type(kind);
    message.from = from;
    message.to = 1;
    message.term = term;
    message.commit = commit;
    message.write_to_bytes().expect("invariant: raft messages encode")
}

#[test]
fn raft_messages_from_a_non_voter_are_dropped() {
    let mut world = World::new(1, 3);
    world.run_for(500);
    assert!(world.meta(1).is_leader());
    let before = world.meta(1).counters().messages_dropped;
    let now = world.now;
    let foreign = [
        // fuzz/regressions/node/raft-heartbeat-commit-past-log-from-non-voter: raft-rs panicked
        // "to_commit 200 is out of range".
        message(MessageType::MsgHeartbeat, 2, 50, 200),
        // fuzz/regressions/node/raft-timeout-now-from-non-voter: a campaign on unpersisted
        // entries failed raft-rs's `last_index == persisted` assertion.
        message(MessageType::MsgTimeoutNow, u64::from(u32::MAX), 124, 0),
    ];
    for (from, bytes) in [(NodeId(2), &foreign[0]), (NodeId(u32::MAX), &foreign[1])] {
        world
            .hosts
            .get_mut(&NodeId(1))
            .unwrap()
            .meta
            .as_mut()
            .unwrap()
            .handle_message(now, from, bytes);
        world.drain(NodeId(1));
    }
    world.run_for(500);
    assert_eq!(world.meta(1).counters().messages_dropped, before + 2);
    assert!(world.meta(1).is_leader(), "the single voter still leads");
}
