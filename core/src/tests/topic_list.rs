//! Listing topics a page at a time (`ClientOp::ListTopics`) and one partition's statistics
//! (`ClientOp::GetTopic` with `partition`): pages follow name order and meet end to end, a page
//! is cut before the caller's grants filter it, and a remote owner's numbers land on the one
//! partition asked for.

use super::cluster_harness::{Cluster, create_op};
use super::harness::Harness;
use crate::access::{Action, Grant, PasswordHash, Principal, TopicPattern};
use crate::api::{ClientOp, ClientReply, TopicInfo};
use crate::constants::TOPIC_PAGE_MAX;

const WAIT_MS: u64 = 10_000;

fn page(after: Option<&str>, limit: u32) -> ClientOp {
    ClientOp::ListTopics { after: after.map(str::to_string), limit }
}

fn names(topics: &[TopicInfo]) -> Vec<&str> {
    topics.iter().map(|t| t.name.as_str()).collect()
}

fn listed(reply: ClientReply) -> (Vec<TopicInfo>, Option<String>) {
    match reply {
        ClientReply::Topics { topics, next } => (topics, next),
        other => panic!("{other:?}"),
    }
}

fn harness_with(topics: &[&str]) -> Harness {
    let mut h = Harness::new();
    for name in topics {
        let reply = h.call(create_op(name, 1));
        assert!(matches!(reply, ClientReply::TopicCreated(_)), "{reply:?}");
    }
    h
}

#[test]
fn pages_follow_name_order_and_meet_end_to_end() {
    let mut h = harness_with(&["e", "b", "d", "a", "c"]);
    let (topics, next) = listed(h.call(page(None, 2)));
    assert_eq!((names(&topics), next.as_deref()), (vec!["a", "b"], Some("b")));
    let (topics, next) = listed(h.call(page(Some("b"), 2)));
    assert_eq!((names(&topics), next.as_deref()), (vec!["c", "d"], Some("d")));
    let (topics, next) = listed(h.call(page(Some("d"), 2)));
    assert_eq!((names(&topics), next), (vec!["e"], None), "the last page says so");
    // A page that ends exactly at the last topic has no next token either.
    let (topics, next) = listed(h.call(page(Some("c"), 2)));
    assert_eq!((names(&topics), next), (vec!["d", "e"], None));
    // A token need not name a topic (it may have been deleted): the page starts after it.
    let (topics, _) = listed(h.call(page(Some("bb"), 1)));
    assert_eq!(names(&topics), ["c"]);
    let (topics, next) = listed(h.call(page(Some("z"), 10)));
    assert_eq!((topics.len(), next), (0, None));
}

#[test]
fn a_limit_past_the_maximum_is_the_maximum_and_zero_is_one() {
    let many: Vec<String> = (0..TOPIC_PAGE_MAX + 1).map(|i| format!("t{i:05}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut h = harness_with(&refs);
    let (topics, next) = listed(h.call(page(None, u32::MAX)));
    assert_eq!(topics.len(), TOPIC_PAGE_MAX as usize);
    assert_eq!(next.as_deref(), Some(many[TOPIC_PAGE_MAX as usize - 1].as_str()));
    let (topics, next) = listed(h.call(page(next.as_deref(), u32::MAX)));
    assert_eq!((names(&topics), next), (vec![many.last().unwrap().as_str()], None));
    let (topics, _) = listed(h.call(page(None, 0)));
    assert_eq!(names(&topics), ["t00000"]);
}

#[test]
fn a_page_is_cut_before_grants_filter_it() {
    let mut c = Cluster::new(1);
    for name in ["a", "b", "c"] {
        assert!(matches!(
            c.call(0, create_op(name, 1), WAIT_MS),
            Some(ClientReply::TopicCreated(_))
        ));
    }
    let grants = vec![Grant { action: Action::Consume, topics: TopicPattern::parse("c").unwrap() }];
    let hash = PasswordHash::new("$argon2id$v=19$opaque-to-the-core".into()).unwrap();
    let op = ClientOp::CreateUser { name: "carol".into(), hash, grants };
    let Some(ClientReply::UserCreated(user)) = c.call(0, op, WAIT_MS) else { panic!("user") };
    let carol = Principal::User { name: user.name, id: user.id };
    let reply = c.call_as(0, page(None, 2), &carol, WAIT_MS).expect("answered");
    let (topics, next) = listed(reply);
    assert_eq!((topics.len(), next.as_deref()), (0, Some("b")), "empty, with more to come");
    let reply = c.call_as(0, page(next.as_deref(), 2), &carol, WAIT_MS).expect("answered");
    let (topics, next) = listed(reply);
    assert_eq!((names(&topics), next), (vec!["c"], None));
}

#[test]
fn one_partition_is_shown_with_its_owners_numbers_and_a_wrong_one_is_a_400() {
    let mut c = Cluster::new(3);
    assert!(matches!(c.call(0, create_op("t", 3), WAIT_MS), Some(ClientReply::TopicCreated(_))));
    c.run_for(1_000);
    let all = c.call(0, ClientOp::GetTopic { name: "t".into(), partition: None }, WAIT_MS);
    let Some(ClientReply::Topic(_, all)) = all else { panic!("{all:?}") };
    let remote = all.iter().find(|p| p.owner_node != 1).expect("a partition owned elsewhere");
    let op = ClientOp::GetTopic { name: "t".into(), partition: Some(remote.index) };
    let Some(ClientReply::Topic(_, one)) = c.call(0, op, WAIT_MS) else { panic!("one") };
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].index, one[0].owner_node), (remote.index, remote.owner_node));
    assert!(one[0].numbers.is_some(), "the owner's numbers were gathered: {one:?}");
    let op = ClientOp::GetTopic { name: "t".into(), partition: Some(3) };
    let Some(ClientReply::Error(error)) = c.call(0, op, WAIT_MS) else { panic!("400") };
    assert_eq!(error.http_status(), 400);
    assert!(error.to_string().contains("has 3 partitions"), "{error}");
}
