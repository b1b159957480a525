//! Issue 12: the `/v1` shapes the original Narad's Go client decodes, checked against one real
//! node the way that client reads them: `owner_node` is a JSON string, `created_at` and
//! `timestamp` are Unix seconds (with `_ms` beside them), `retention_ms` is always an integer,
//! a batch payload comes back as the JSON text it was sent as (a string as the same string, an
//! object byte for byte), a batch refuses `key`/`partition` in its query, a JSON array is never
//! a body, and the probes answer JSON.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Client, TestNode, data_dir, wait_until};
use serde_json::{Value, json};

const TOPIC: &str = "compat";
const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

fn json_of(answer: &(u16, Vec<u8>)) -> Value {
    serde_json::from_slice(&answer.1)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&answer.1)))
}

/// `created_at` in seconds of about now, `created_at_ms` beside it, the 7-day default
/// retention as an integer.
fn assert_topic_shape(topic: &Value) {
    let secs = topic["created_at"].as_u64().unwrap_or_else(|| panic!("created_at: {topic}"));
    assert!(secs.abs_diff(now_secs()) < 3600, "created_at is Unix seconds: {topic}");
    let ms = topic["created_at_ms"].as_u64().unwrap_or_else(|| panic!("created_at_ms: {topic}"));
    assert_eq!(ms / 1000, secs, "{topic}");
    assert_eq!(topic["retention_ms"], json!(WEEK_MS), "retention in force, never null: {topic}");
    assert_eq!(topic["visibility_timeout_ms"], json!(30_000), "the lease in force: {topic}");
}

#[test]
fn the_v1_shapes_the_go_client_decodes() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    check_probes(&client);
    check_topic_shapes(&client);
    check_array_bodies(&client);
    check_batch_round_trip(&client, &node);
    check_batch_query(&client);
    check_topic_pages(&client);
}

fn check_probes(client: &Client) {
    let health = client.get("/healthz");
    assert_eq!((health.0, json_of(&health)), (200, json!({ "status": "ok" })));
    let ready = client.get("/readyz");
    assert_eq!((ready.0, json_of(&ready)), (200, json!({ "status": "ready" })));
}

fn check_topic_shapes(client: &Client) {
    let created = client.post_json("/v1/topics", &json!({ "name": TOPIC, "partitions": 3 }));
    assert_eq!(created.0, 201, "{}", String::from_utf8_lossy(&created.1));
    assert_topic_shape(&json_of(&created));

    let got = client.get(&format!("/v1/topics/{TOPIC}"));
    assert_eq!(got.0, 200);
    let topic = json_of(&got);
    assert_topic_shape(&topic);
    let stats = topic["partition_stats"].as_array().expect("partition_stats");
    assert_eq!(stats.len(), 3);
    for p in stats {
        // The Go client's `Owner string` fails to decode a number, and with it the topic.
        let owner = p["owner_node"].as_str().unwrap_or_else(|| panic!("a string: {p}"));
        assert_eq!(owner, "1", "a lone node is node 1: {p}");
        // What the Go client's PartitionStats reads besides: its status and the v1 names.
        assert_eq!(p["status"], json!("ok"), "{p}");
        assert_eq!(p["oldest_offset"], p["log_start_offset"], "{p}");
        assert_eq!(p["next_offset"], p["high_watermark"], "{p}");
    }
    assert!(topic.get("partial").is_none(), "every partition reported: {topic}");
    let id = topic["id"].as_str().expect("id");
    assert!(id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{topic}");

    let listed = client.get("/v1/topics");
    assert_eq!(listed.0, 200);
    let topics = json_of(&listed);
    assert_topic_shape(&topics["topics"][0]);

    let patch = br#"{"retention_bytes": 8388608}"#;
    let updated = client.patch(&format!("/v1/topics/{TOPIC}"), patch);
    assert_eq!(updated.0, 200, "{}", String::from_utf8_lossy(&updated.1));
    let updated = json_of(&updated);
    assert_topic_shape(&updated);
    assert_eq!(updated["retention_bytes"], json!(8_388_608));
}

/// Before issue 12, `["t",3,null]` created topic `t`: serde reads a struct from an array too.
fn check_array_bodies(client: &Client) {
    let created = client.post("/v1/topics", br#"["t",3,null]"#);
    assert_eq!(created.0, 400, "{}", String::from_utf8_lossy(&created.1));
    assert!(json_of(&created)["error"].as_str().is_some_and(|e| e.contains("JSON object")));
    assert_eq!(client.get("/v1/topics/t").0, 404, "nothing was created");
    let patched = client.patch(&format!("/v1/topics/{TOPIC}"), b"[60000]");
    assert_eq!(patched.0, 400, "{}", String::from_utf8_lossy(&patched.1));
    let batch = format!("/v1/topics/{TOPIC}/produce/batch");
    for body in [&br#"[[{"payload":"a"}]]"#[..], br#"{"messages":[["a",null,null,null,0]]}"#] {
        let answer = client.post(&batch, body);
        assert_eq!(answer.0, 400, "{}", String::from_utf8_lossy(&answer.1));
    }
}

/// The batch the Go client's `Batch` builds: JSON values as they are, bytes as base64.
const BATCH: &str = r#"{"messages":[{"payload":"123","partition":0},{"payload":{"id": "o2",  "amount": 7},"partition":0},{"payload":"aGVsbG8=","payload_encoding":"base64","partition":0},{"payload":[1, 2.50, "x"],"partition":0}]}"#;

fn check_batch_round_trip(client: &Client, node: &TestNode) {
    let produced = client.post(&format!("/v1/topics/{TOPIC}/produce/batch"), BATCH.as_bytes());
    assert_eq!(produced.0, 202, "{}", String::from_utf8_lossy(&produced.1));
    assert_eq!(json_of(&produced), json!({ "accepted": 4 }));
    let visible =
        wait_until(Duration::from_secs(30), || common::visible_records(client, TOPIC) >= 4);
    assert!(visible, "the batch never became visible; log:\n{}", node.log());

    let (status, body) =
        client.get(&format!("/v1/topics/{TOPIC}/consume?partition=0&offset=0&max=10"));
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("UTF-8");
    // Byte for byte as sent: the string keeps its quotes, the object and array their spacing.
    for sent in [r#""payload":"123","#, r#""payload":{"id": "o2",  "amount": 7},"#] {
        assert!(text.contains(sent), "{sent} not in {text}");
    }
    assert!(text.contains(r#""payload":[1, 2.50, "x"],"#), "{text}");
    let page: Value = serde_json::from_str(&text).expect("JSON");
    let messages = page["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[0]["payload"], json!("123"), "a string, not the number 123");
    assert_eq!(messages[0]["payload_encoding"], json!("json"));
    assert_eq!(messages[2]["payload"], json!("hello"), "base64 in, text out");
    assert!(messages[2].get("payload_encoding").is_none(), "{}", messages[2]);
    for message in messages {
        let secs = message["timestamp"].as_u64().expect("timestamp");
        assert!(secs.abs_diff(now_secs()) < 3600, "timestamp is Unix seconds: {message}");
        assert_eq!(message["timestamp_ms"].as_u64().map(|ms| ms / 1000), Some(secs));
    }

    // The single-message shape of a replay (no `max`), as the Go client's ReadAt reads it.
    let (status, body) = client.get(&format!("/v1/topics/{TOPIC}/consume?partition=0&offset=1"));
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("UTF-8");
    assert!(text.contains(r#""offset":1,"payload":{"id": "o2",  "amount": 7},"timestamp":"#));
}

/// Before issue 12, `?key=` and `?partition=` on a batch were accepted and ignored.
fn check_batch_query(client: &Client) {
    for query in ["key=k", "partition=1"] {
        let path = format!("/v1/topics/{TOPIC}/produce/batch?{query}");
        let answer = client.post(&path, br#"{"messages":[{"payload":"x"}]}"#);
        assert_eq!(answer.0, 400, "{query}: {}", String::from_utf8_lossy(&answer.1));
        let name = query.split('=').next().expect("name");
        let error = json_of(&answer)["error"].as_str().expect("error").to_string();
        assert!(error.contains(&format!("`{name}`")), "{query}: {error}");
    }
    // Counted when answered: only the 4 messages of the earlier batch were ever accepted.
    assert_eq!(client.metric("narad_records_accepted_total"), 4.0, "nothing was stored");
}

/// The list pages as the original's: `limit` topics in name order, `next_page_token` the last
/// name of a page while more follow and empty on the last; `?partition=` on one topic.
fn check_topic_pages(client: &Client) {
    let mut expected: Vec<String> = vec![TOPIC.to_string()];
    for name in ["page.c", "page.a", "page.b"] {
        let body = format!(r#"{{"name": "{name}", "partitions": 1}}"#);
        let created = client.post("/v1/topics", body.as_bytes());
        assert_eq!(created.0, 201, "{}", String::from_utf8_lossy(&created.1));
        expected.push(name.to_string());
    }
    expected.sort();
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let page = client.get(&format!("/v1/topics?limit=2&page_token={token}"));
        assert_eq!(page.0, 200, "{}", String::from_utf8_lossy(&page.1));
        let page = json_of(&page);
        let names: Vec<String> = page["topics"]
            .as_array()
            .unwrap_or_else(|| panic!("topics: {page}"))
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect();
        assert!(names.len() <= 2, "{page}");
        seen.extend(names.iter().cloned());
        pages += 1;
        let next = page["next_page_token"].as_str().unwrap_or_else(|| panic!("token: {page}"));
        if next.is_empty() {
            break;
        }
        assert_eq!(Some(next), names.last().map(String::as_str), "the page's last name: {page}");
        token = next.to_string();
    }
    assert_eq!(seen, expected, "every topic once, in name order");
    assert_eq!(pages, expected.len().div_ceil(2));
    let everything = json_of(&client.get("/v1/topics"));
    assert_eq!(everything["topics"].as_array().map(Vec::len), Some(expected.len()));
    assert_eq!(everything["next_page_token"], json!(""), "one default page holds them all");
    for bad in ["limit=0", "limit=x", "limit=1&limit=2"] {
        assert_eq!(client.get(&format!("/v1/topics?{bad}")).0, 400, "{bad}");
    }
    let one = json_of(&client.get(&format!("/v1/topics/{TOPIC}?partition=1")));
    let stats = one["partition_stats"].as_array().unwrap_or_else(|| panic!("{one}"));
    assert_eq!((stats.len(), &stats[0]["index"]), (1, &json!(1)), "{one}");
    let wrong = client.get(&format!("/v1/topics/{TOPIC}?partition=99"));
    assert_eq!(wrong.0, 400, "{}", String::from_utf8_lossy(&wrong.1));
}
