//! `check_invariants` passes on a fresh node and names what broke on a deliberately broken one.

use std::collections::BTreeMap;

use crate::ids::{Instant, IoToken, NodeId, PartitionKey, TopicId};
use crate::node::owner::{Job, ReplyTo};
use crate::node::{Config, IoPurpose, Node};
use crate::partition::CommitId;
use crate::wal::WalIo;

fn fresh() -> Node {
    let config = Config::single(NodeId(1), 7);
    let node = Node::recover(config, Instant(1_700_000_000_000_000), BTreeMap::new());
    let node = node.expect("an empty data directory recovers");
    node.check_invariants_deep().expect("a fresh node is consistent");
    node
}

#[test]
fn a_completion_nobody_waits_for_is_caught() {
    let mut node = fresh();
    let token = IoToken(node.next_token);
    node.next_token += 1;
    node.io.insert(token, IoPurpose::Wal(WalIo::CursorRead { segment: 0, offset: 0 }));
    let failure = node.check_invariants().expect_err("a stray cursor read");
    assert!(failure.starts_with("io: WAL operations"), "{failure}");
}

#[test]
fn a_token_that_was_never_issued_is_caught() {
    let mut node = fresh();
    node.io.insert(
        IoToken(node.next_token + 3),
        IoPurpose::FileDelete(PartitionKey { topic: TopicId(1), partition: 0 }),
    );
    let failure = node.check_invariants().expect_err("a token from the future");
    assert!(failure.contains("past next token"), "{failure}");
}

#[test]
fn a_job_for_a_commit_the_dispatcher_never_started_is_caught() {
    let mut node = fresh();
    let key = PartitionKey { topic: TopicId(9), partition: 0 };
    let job = Job::new(key, NodeId(1), ReplyTo::Dispatcher(CommitId(12345)));
    node.jobs.insert(CommitId(1), job);
    let failure = node.check_invariants_deep().expect_err("an orphan job");
    assert!(failure.starts_with("commits:"), "{failure}");
}

#[test]
fn a_parked_consume_missing_from_the_deadline_index_is_caught() {
    use crate::node::parked::Waiter;
    let mut node = fresh();
    let key = PartitionKey { topic: TopicId(9), partition: 0 };
    let request = crate::ids::RequestId(1);
    let waiter = Waiter::Client { request, topic: "t".into(), key, offset: 0, max: 1 };
    node.parked.park(waiter, vec![(key, 0)], Instant(1)).expect("room");
    node.check_invariants().expect("a parked consume is consistent");
    node.parked.corrupt_for_test();
    let failure = node.check_invariants().expect_err("a stale deadline");
    assert!(failure.starts_with("parked:"), "{failure}");
}
