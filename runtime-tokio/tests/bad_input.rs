//! Acceptance item 3 of issue 2: bad input gets the status the README's API table names, a JSON
//! error, and changes nothing.

mod common;

use std::time::Duration;

use common::{Client, TestNode, data_dir, wait_until};
use serde_json::{Value, json};

const TOPIC: &str = "strict";

fn assert_error(answer: (u16, Vec<u8>), status: u16, what: &str) {
    let (got, body) = answer;
    assert_eq!(got, status, "{what}: {}", String::from_utf8_lossy(&body));
    let error: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{what}: error body is not JSON ({e})"));
    assert!(error["error"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {error}");
}

fn produce_path(query: &str) -> String {
    format!("/v1/topics/{TOPIC}/produce{query}")
}

fn batch(messages: Vec<Value>) -> Value {
    json!({ "messages": messages })
}

fn check_single_produce(client: &Client) {
    assert_error(client.post(&produce_path(""), b""), 400, "empty body");
    let too_big = vec![b'a'; 1024 * 1024 + 1];
    assert_error(client.post(&produce_path(""), &too_big), 413, "1 MiB + 1 byte");
    assert_error(client.post("/v1/topics/nope/produce", b"x"), 404, "unknown topic");
    assert_error(client.post(&produce_path("?partition=99"), b"x"), 400, "partition=99 of 4");
    assert_error(client.post(&produce_path("?partition=abc"), b"x"), 400, "partition=abc");
    let twice = produce_path("?partition=1&partition=2");
    assert_error(client.post(&twice, b"x"), 400, "partition given twice");
}

fn check_batch_produce(client: &Client) {
    let path = format!("/v1/topics/{TOPIC}/produce/batch");
    let many = batch((0..1_001).map(|i| json!({ "payload": format!("m{i}") })).collect());
    assert_error(client.post_json(&path, &many), 400, "batch of 1,001");
    assert_error(client.post_json(&path, &batch(vec![])), 400, "empty batch");
    let huge = vec![b' '; 16 * 1024 * 1024 + 1];
    assert_error(client.post(&path, &huge), 413, "batch body over 16 MiB");
    let mut one_bad: Vec<Value> = (0..10).map(|i| json!({ "payload": format!("m{i}") })).collect();
    one_bad[7] = json!({ "payload": "not*base64", "payload_encoding": "base64" });
    let (status, body) = client.post_json(&path, &batch(one_bad));
    let message = String::from_utf8_lossy(&body).into_owned();
    assert_error((status, body), 400, "batch with a bad base64 payload");
    assert!(message.contains("message 7"), "error names the message: {message}");
    let unknown = batch(vec![json!({ "payload": "x", "colour": "red" })]);
    assert_error(client.post_json(&path, &unknown), 400, "unknown JSON field");
    assert_error(client.post(&path, b"{\"messages\": ["), 400, "malformed JSON");
    let pinned_out = batch(vec![json!({ "payload": "x", "partition": 4 })]);
    assert_error(client.post_json(&path, &pinned_out), 400, "batch partition out of range");
}

fn check_topics_and_consume(client: &Client) {
    let again = json!({ "name": TOPIC, "partitions": 4 });
    assert_error(client.post_json("/v1/topics", &again), 409, "existing topic");
    let shouted = json!({ "name": TOPIC.to_uppercase() });
    assert_error(client.post_json("/v1/topics", &shouted), 409, "a name differing only in case");
    let bad_name = json!({ "name": "no/slash" });
    assert_error(client.post_json("/v1/topics", &bad_name), 400, "bad topic name");
    let extra = json!({ "name": "t2", "colour": "red" });
    assert_error(client.post_json("/v1/topics", &extra), 400, "unknown field in create");
    let forever = json!({ "name": "t3", "retention_ms": u64::MAX });
    assert_error(client.post_json("/v1/topics", &forever), 400, "retention_ms u64::MAX");
    assert_error(client.get("/v1/topics/t3"), 404, "the refused create created nothing");
    assert_error(client.get("/v1/topics/nope"), 404, "get unknown topic");
    assert_error(client.delete("/v1/topics/nope"), 404, "delete unknown topic");
    assert_error(client.get("/v1/topics/nope/consume?partition=0"), 404, "consume unknown");
    let bad = format!("/v1/topics/{TOPIC}/consume?partition=abc");
    assert_error(client.get(&bad), 400, "consume partition=abc");
    let (status, _) = client.get(&format!("/v1/topics/{TOPIC}/consume?partition=0&offset=5"));
    assert_eq!(status, 204, "consume past the end");
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic(TOPIC, 4);
    check_single_produce(&client);
    check_batch_produce(&client);
    check_topics_and_consume(&client);

    // Nothing above was stored: one marker produce is the only record that ever shows up.
    let (status, _) = client.post(&produce_path("?partition=2"), b"marker");
    assert_eq!(status, 202);
    let visible =
        wait_until(Duration::from_secs(30), || common::visible_records(&client, TOPIC) >= 1);
    assert!(visible, "marker never became visible; log:\n{}", node.log());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(common::visible_records(&client, TOPIC), 1, "only the marker was stored");
    let messages = client.read_partition(TOPIC, 2);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["payload"], json!("marker"));
    assert_eq!(client.metric("narad_records_accepted_total"), 1.0);
}
