//! `PATCH /v1/topics/{t}` against the real binary: the topic JSON it answers (the retention in
//! force, never `null`; the size limit or `null`), the statuses of bad and unknown requests,
//! the change surviving a restart, and in a 3-node cluster a change made through a follower
//! seen on every node, and refused with 503 without a metastore majority.

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::TestCluster;
use common::{Client, TestNode, data_dir, wait_until};
use serde_json::{Value, json};

/// The retention a topic gets when its create names none: 7 days.
const DEFAULT_RETENTION_MS: u64 = 604_800_000;
/// Generous: a slow, throttled machine still converges well within it.
const CONVERGE: Duration = Duration::from_secs(30);

fn body(answer: &(u16, Vec<u8>)) -> Value {
    serde_json::from_slice(&answer.1).unwrap_or_else(|e| {
        panic!("{}: not JSON ({e}): {}", answer.0, String::from_utf8_lossy(&answer.1))
    })
}

fn patch(client: &Client, topic: &str, change: &Value) -> (u16, Value) {
    let answer = client.patch(&format!("/v1/topics/{topic}"), change.to_string().as_bytes());
    (answer.0, body(&answer))
}

fn retention(client: &Client, topic: &str) -> Option<(Value, Value)> {
    let answer = client.get(&format!("/v1/topics/{topic}"));
    (answer.0 == 200).then(|| {
        let topic = body(&answer);
        (topic["retention_ms"].clone(), topic["retention_bytes"].clone())
    })
}

fn check_refusals(client: &Client) {
    for (change, what) in [
        (json!({}), "nothing to change"),
        (json!({ "retention_ms": 999 }), "retention_ms below 1 s"),
        (json!({ "retention_ms": -1 }), "negative retention_ms"),
        (json!({ "retention_ms": null }), "retention_ms null"),
        (json!({ "retention_bytes": 1 }), "retention_bytes below the minimum"),
        (json!({ "retention_ms": 1000, "colour": "red" }), "unknown field"),
    ] {
        let (status, error) = patch(client, "t", &change);
        assert_eq!(status, 400, "{what}: {error}");
        assert!(error["error"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {error}");
    }
    let (status, _) = patch(client, "nope", &json!({ "retention_ms": 1000 }));
    assert_eq!(status, 404, "unknown topic");
}

#[test]
fn patch_changes_retention_and_the_change_survives_a_restart() {
    let (_tmp, dir) = data_dir();
    let mut node = TestNode::start(&dir);
    let client = node.client();
    let created = client.post_json("/v1/topics", &json!({ "name": "t", "partitions": 2 }));
    assert_eq!(created.0, 201);
    let created = body(&created);
    assert_eq!(created["retention_ms"], json!(DEFAULT_RETENTION_MS), "in force, never null");
    assert_eq!(created["retention_bytes"], Value::Null);

    let (status, topic) = patch(&client, "t", &json!({ "retention_bytes": 8_388_608 }));
    assert_eq!(status, 200, "{topic}");
    assert_eq!((&topic["name"], &topic["partitions"]), (&json!("t"), &json!(2)));
    assert_eq!(topic["retention_ms"], json!(DEFAULT_RETENTION_MS), "not named: unchanged");
    assert_eq!(topic["retention_bytes"], json!(8_388_608));
    assert_eq!(topic["created_at"], created["created_at"]);
    let (status, topic) =
        patch(&client, "t", &json!({ "retention_ms": 0, "retention_bytes": null }));
    assert_eq!(status, 200, "{topic}");
    assert_eq!((&topic["retention_ms"], &topic["retention_bytes"]), (&json!(0), &Value::Null));
    check_refusals(&client);
    assert_eq!(retention(&client, "t"), Some((json!(0), Value::Null)), "refusals changed nothing");

    let with_limit =
        json!({ "name": "limited", "retention_ms": 5000, "retention_bytes": 4_194_304 });
    assert_eq!(client.post_json("/v1/topics", &with_limit).0, 201);
    node.kill9();
    let node = TestNode::start(&dir);
    let client = node.client();
    assert_eq!(retention(&client, "t"), Some((json!(0), Value::Null)));
    assert_eq!(retention(&client, "limited"), Some((json!(5000), json!(4_194_304))));
}

#[test]
fn patch_through_a_follower_reaches_every_node_and_needs_a_majority() {
    let mut cluster = TestCluster::start(3);
    let clients: Vec<Client> = (0..3).map(|ix| cluster.client(ix)).collect();
    let created = clients[0].post_json("/v1/topics", &json!({ "name": "t", "partitions": 3 }));
    assert_eq!(created.0, 201, "{}", String::from_utf8_lossy(&created.1));
    assert!(wait_until(CONVERGE, || clients.iter().all(|c| retention(c, "t").is_some())));
    // Whichever node leads, at least two of the three are followers: ask each in turn.
    for (ix, ms) in [(1, 3_600_000), (2, 7_200_000)] {
        let change = json!({ "retention_ms": ms, "retention_bytes": 16_777_216 });
        let (status, topic) = patch(&clients[ix], "t", &change);
        assert_eq!(status, 200, "through node {ix}: {topic}");
        assert_eq!(topic["retention_ms"], json!(ms));
        assert_eq!(
            retention(&clients[ix], "t"),
            Some((json!(ms), json!(16_777_216))),
            "read-your-writes"
        );
        let everywhere =
            || clients.iter().all(|c| retention(c, "t") == Some((json!(ms), json!(16_777_216))));
        assert!(
            wait_until(CONVERGE, everywhere),
            "every node shows the change made through node {ix}"
        );
    }
    cluster.kill9(1);
    cluster.kill9(2);
    let (status, error) = patch(&clients[0], "t", &json!({ "retention_ms": 1000 }));
    assert_eq!(status, 503, "{error}");
}
