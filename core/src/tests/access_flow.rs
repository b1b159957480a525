//! Users and grants across a cluster (docs/design.md §8): a user created through one node is
//! known to the others once they applied it, grants decide what it may do on every node, a
//! deleted user is refused everywhere, and a node that runs a request another node forwarded
//! checks the grant again with what it has applied.

use bytes::Bytes;

use super::cluster_harness::{Cluster, Ix};
use crate::access::{Action, Grant, PasswordHash, Principal, TopicPattern};
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage};
use crate::ids::PartitionKey;
use crate::peer::PeerMessage;

const WAIT_MS: u64 = 10_000;

fn grant(action: Action, topics: &str) -> Grant {
    Grant { action, topics: TopicPattern::parse(topics).expect("pattern") }
}

fn hash() -> PasswordHash {
    PasswordHash::new("$argon2id$v=19$opaque-to-the-core".into()).expect("hash")
}

/// Creates `name` with `grants` through node `via` (trusted) and returns its principal.
fn create_user(c: &mut Cluster, via: Ix, name: &str, grants: Vec<Grant>) -> Principal {
    let op = ClientOp::CreateUser { name: name.into(), hash: hash(), grants };
    match c.call(via, op, WAIT_MS) {
        Some(ClientReply::UserCreated(user)) => Principal::User { name: user.name, id: user.id },
        other => panic!("create user via node {via}: {other:?}"),
    }
}

fn create_topic(c: &mut Cluster, name: &str, partitions: u32) {
    let op = super::cluster_harness::create_op(name, partitions);
    assert!(matches!(c.call(0, op, WAIT_MS), Some(ClientReply::TopicCreated(_))));
}

fn produce(topic: &str) -> ClientOp {
    let message = ProduceMessage { key: None, partition: None, payload: Bytes::from("m") };
    ClientOp::Produce { topic: topic.into(), messages: vec![message], batch: false }
}

fn consume(topic: &str, partition: u32) -> ClientOp {
    ClientOp::Consume { topic: topic.into(), partition, offset: 0, max: 10, wait_ms: 0 }
}

fn status(reply: Option<ClientReply>) -> u16 {
    match reply.expect("answered") {
        ClientReply::Error(error) => error.http_status(),
        ClientReply::TopicCreated(_) | ClientReply::UserCreated(_) => 201,
        ClientReply::Produced { .. } => 202,
        ClientReply::TopicDeleted | ClientReply::UserDeleted => 204,
        _ => 200,
    }
}

/// Issue 14's first acceptance item, on the core: a `produce` grant on `orders.*` produces to
/// `orders.eu` through every node, and is refused create, delete, consume and `payments`.
#[test]
fn a_produce_grant_allows_producing_to_its_topics_and_nothing_else_on_every_node() {
    let mut c = Cluster::new(3);
    create_topic(&mut c, "orders.eu", 3);
    create_topic(&mut c, "payments", 3);
    let ann = create_user(&mut c, 0, "ann", vec![grant(Action::Produce, "orders.*")]);
    c.run_until(WAIT_MS, |c| (0..3).all(|ix| c.node(ix).users().get("ann").is_some()));
    for via in 0..3 {
        assert_eq!(status(c.call_as(via, produce("orders.eu"), &ann, WAIT_MS)), 202, "node {via}");
        assert_eq!(status(c.call_as(via, produce("payments"), &ann, WAIT_MS)), 403);
        assert_eq!(status(c.call_as(via, consume("orders.eu", 0), &ann, WAIT_MS)), 403);
        let create = ClientOp::CreateTopic {
            name: "orders.us".into(),
            partitions: None,
            retention_ms: None,
            retention_bytes: None,
            queue: Default::default(),
        };
        assert_eq!(status(c.call_as(via, create, &ann, WAIT_MS)), 403);
        let delete = ClientOp::DeleteTopic { name: "orders.eu".into() };
        assert_eq!(status(c.call_as(via, delete, &ann, WAIT_MS)), 403);
        assert_eq!(status(c.call_as(via, ClientOp::ListUsers, &ann, WAIT_MS)), 403);
        let listed = c.call_as(via, ClientOp::list_topics(), &ann, WAIT_MS);
        let Some(ClientReply::Topics { topics, .. }) = listed else { panic!("{listed:?}") };
        let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["orders.eu"], "a listing shows only what the user has a grant on");
    }
    assert_eq!(c.node(0).stats().requests_refused_access, 5, "each refusal counted where made");
}

/// A deleted user is refused everywhere (401 on a node that applied the delete); a user created
/// again under the name is another incarnation, and the old principal stays refused.
#[test]
fn a_deleted_user_is_refused_everywhere_and_its_name_taken_again_is_someone_else() {
    let mut c = Cluster::new(3);
    create_topic(&mut c, "t", 1);
    let old = create_user(&mut c, 1, "bob", vec![grant(Action::Produce, "*")]);
    c.run_until(WAIT_MS, |c| (0..3).all(|ix| c.node(ix).users().get("bob").is_some()));
    assert_eq!(status(c.call_as(2, produce("t"), &old, WAIT_MS)), 202);
    let delete = ClientOp::DeleteUser { name: "bob".into() };
    assert_eq!(status(c.call(2, delete, WAIT_MS)), 204);
    c.run_until(WAIT_MS, |c| (0..3).all(|ix| c.node(ix).users().get("bob").is_none()));
    for via in 0..3 {
        let reply = c.call_as(via, produce("t"), &old, WAIT_MS);
        assert!(matches!(reply, Some(ClientReply::Error(ClientError::Unauthenticated(_)))));
    }
    let new = create_user(&mut c, 0, "bob", vec![grant(Action::Produce, "*")]);
    assert_ne!(new, old, "a new incarnation");
    c.run_until(WAIT_MS, |c| (0..3).all(|ix| c.node(ix).users().get("bob").is_some()));
    assert_eq!(status(c.call_as(1, produce("t"), &old, WAIT_MS)), 401);
    assert_eq!(status(c.call_as(1, produce("t"), &new, WAIT_MS)), 202);
}

/// The node that runs a forwarded request checks the grant again with what it has applied: a
/// consume forwarded for a user whose grant the owner has seen revoked is refused there (an
/// entry node that had not applied the revoke yet would have forwarded it).
#[test]
fn the_owner_of_a_forwarded_consume_checks_the_grant_again() {
    let mut c = Cluster::new(3);
    create_topic(&mut c, "t", 1);
    let (key, owner) = topic_key(&mut c, "t");
    let entry = (owner + 1) % 3;
    let carl = create_user(&mut c, 0, "carl", vec![grant(Action::Consume, "t")]);
    c.run_until(WAIT_MS, |c| (0..3).all(|ix| c.node(ix).users().get("carl").is_some()));
    assert_eq!(status(c.call_as(entry, consume("t", 0), &carl, WAIT_MS)), 200);
    let revoke = ClientOp::SetGrants { name: "carl".into(), grants: vec![] };
    assert_eq!(status(c.call(owner, revoke, WAIT_MS)), 200);
    let forwarded = PeerMessage::Consume {
        id: 77,
        who: carl.clone(),
        target: key,
        offset: 0,
        max: 10,
        wait_ms: 0,
    };
    let sent_before = c.sent.len();
    c.deliver(entry, owner, forwarded.encode());
    c.run_for(100);
    let answers: Vec<PeerMessage> = c.sent[sent_before..]
        .iter()
        .filter(|(from, to, _)| (*from, *to) == (owner, entry))
        .filter_map(|(_, _, bytes)| PeerMessage::decode(bytes).ok())
        .filter(|m| matches!(m, PeerMessage::ConsumeReply { id: 77, .. }))
        .collect();
    let [PeerMessage::ConsumeReply { result: Err(error), .. }] = answers.as_slice() else {
        panic!("one refusal expected: {answers:?}")
    };
    assert_eq!(error.status, 403, "{error:?}");
    // A user the owner never heard of: it is behind the entry node (or the user is gone).
    let stranger = Principal::User { name: "zed".into(), id: crate::access::UserId(999) };
    let forwarded =
        PeerMessage::Consume { id: 78, who: stranger, target: key, offset: 0, max: 1, wait_ms: 0 };
    let sent_before = c.sent.len();
    c.deliver(entry, owner, forwarded.encode());
    c.run_for(100);
    let unknown = c.sent[sent_before..]
        .iter()
        .filter_map(|(_, _, b)| PeerMessage::decode(b).ok())
        .find_map(|m| match m {
            PeerMessage::ConsumeReply { id: 78, result: Err(error) } => Some(error.status),
            _ => None,
        });
    assert_eq!(unknown, Some(503), "retry: the owner may be behind");
}

/// A forwarded command is checked again by the leader: a user without `admin` cannot get a
/// user created by forging the proposal.
#[test]
fn the_leader_checks_a_forwarded_command_again() {
    let mut c = Cluster::new(3);
    let dora = create_user(&mut c, 0, "dora", vec![grant(Action::Produce, "*")]);
    c.run_until(WAIT_MS, |c| (0..3).all(|ix| c.node(ix).users().get("dora").is_some()));
    let leader = c.leader();
    let follower = (leader + 1) % 3;
    let command = crate::meta::MetaCommand::User(crate::meta::users::UserCommand::Create {
        name: "mallory".into(),
        hash: hash(),
        grants: vec![grant(Action::Admin, "*")],
        now_ms: 1,
        seen_next_id: 100,
    });
    let command = Bytes::from(crate::meta::encode_command(&command));
    let forged = PeerMessage::Propose { id: 5, who: dora, command };
    c.deliver(follower, leader, forged.encode());
    c.run_for(1_000);
    assert!(c.node(leader).users().get("mallory").is_none(), "nothing was created");
    assert_eq!(c.node(leader).stats().requests_refused_access, 1);
}

/// Partition 0 of topic `name` and the index of its owner.
fn topic_key(c: &mut Cluster, name: &str) -> (PartitionKey, Ix) {
    let reply = c.call(0, ClientOp::GetTopic { name: name.into(), partition: None }, WAIT_MS);
    let Some(ClientReply::Topic(info, stats)) = reply else { panic!("{reply:?}") };
    (PartitionKey { topic: info.id, partition: 0 }, stats[0].owner_node as usize - 1)
}
