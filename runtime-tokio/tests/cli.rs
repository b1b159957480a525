//! The client commands against a real node: `topic create|list|get|update|delete`, `produce` (argument
//! and stdin) and `consume`, including a non-2xx answer becoming exit code 1.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{TestNode, data_dir, wait_until};
use serde_json::{Value, json};

fn narad(url: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_narad"))
        .args(args)
        .env("NARAD_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn narad client");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(data) = stdin {
        input.write_all(data).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("client output")
}

fn json_out(output: &Output) -> Value {
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("client prints JSON")
}

#[test]
fn client_commands_round_trip() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let url = node.url.as_str();
    let created = json_out(&narad(url, &["topic", "create", "cli", "--partitions", "2"], None));
    assert_eq!(created["name"], json!("cli"));
    assert_eq!(created["partitions"], json!(2));
    let listed = json_out(&narad(url, &["topic", "list"], None));
    assert_eq!(listed["topics"][0]["name"], json!("cli"));

    let out = narad(url, &["produce", "cli", "--partition", "1", "hello"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = narad(url, &["produce", "cli", "--partition", "1"], Some(b"{\"from\":\"stdin\"}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let client = node.client();
    assert!(wait_until(Duration::from_secs(30), || common::visible_records(&client, "cli") >= 2));

    let one = json_out(&narad(url, &["consume", "cli", "--partition", "1"], None));
    assert_eq!(one["payload"], json!("hello"));
    let many = json_out(&narad(url, &["consume", "cli", "--partition", "1", "--max", "10"], None));
    assert_eq!(many["messages"][1]["payload"], json!({ "from": "stdin" }));
    let topic = json_out(&narad(url, &["topic", "get", "cli"], None));
    assert_eq!(topic["partition_stats"][1]["high_watermark"], json!(2));
    let one = json_out(&narad(url, &["topic", "get", "cli", "--partition", "1"], None));
    let stats = one["partition_stats"].as_array().expect("stats");
    assert_eq!((stats.len(), &stats[0]["index"]), (1, &json!(1)), "{one}");
    let update = ["topic", "update", "cli", "--retention-ms", "60000", "--retention-bytes"];
    let updated = json_out(&narad(url, &[&update[..], &["8388608"]].concat(), None));
    assert_eq!(
        (&updated["retention_ms"], &updated["retention_bytes"]),
        (&json!(60000), &json!(8388608))
    );
    let cleared = json_out(&narad(url, &["topic", "update", "cli", "--no-retention-bytes"], None));
    assert_eq!(
        (&cleared["retention_ms"], &cleared["retention_bytes"]),
        (&json!(60000), &Value::Null)
    );
    let out = narad(url, &["topic", "update", "cli", "--retention-ms", "5"], None);
    assert_eq!(out.status.code(), Some(1), "400 becomes exit code 1");

    let out = narad(url, &["topic", "create", "cli"], None);
    assert_eq!(out.status.code(), Some(1), "409 becomes exit code 1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("409"));
    let out = narad(url, &["topic", "delete", "cli"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = narad(url, &["topic", "get", "cli"], None);
    assert_eq!(out.status.code(), Some(1), "404 becomes exit code 1");
}

#[test]
fn help_explains_every_command() {
    let topics = [&["topic", "create", "--help"][..], &["topic", "update", "--help"]];
    for args in [&["--help"][..], &["serve", "--help"], topics[0], topics[1]] {
        let out = narad("http://127.0.0.1:1", args, None);
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.len() > 200, "help for {args:?} is too thin:\n{help}");
    }
}

/// `narad sub`: prints each leased message as a JSON line and acks it; `--nack` gives them back.
#[test]
fn sub_works_a_topic_as_a_queue() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let url = node.url.as_str();
    let client = node.client();
    client.create_topic("jobs", 2);
    for i in 0..3 {
        let out = narad(url, &["produce", "jobs", &format!("job-{i}")], None);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(wait_until(Duration::from_secs(30), || common::visible_records(&client, "jobs") >= 3));
    let dry = narad(url, &["sub", "jobs", "--nack", "--count", "3", "--idle", "5s"], None);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    assert!(String::from_utf8_lossy(&dry.stderr).contains("3 messages nacked"));
    let out = narad(url, &["sub", "jobs", "--idle", "2s"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON message per line"))
        .collect();
    let mut payloads: Vec<&str> = lines.iter().map(|m| m["payload"].as_str().unwrap()).collect();
    payloads.sort_unstable();
    assert_eq!(payloads, ["job-0", "job-1", "job-2"], "the nacked messages came back");
    assert!(lines.iter().all(|m| m["delivery_count"] == json!(2)), "{lines:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 messages acked"));
    let after = narad(url, &["sub", "jobs", "--idle", "1s"], None);
    assert!(after.stdout.is_empty(), "everything was acked");
}

/// The node answers the topic list a page at a time (at most 1,000 topics); `narad topic list`
/// follows every page and prints them all, in name order.
#[test]
fn topic_list_follows_every_page() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    let names: Vec<String> = (0..1_001).map(|i| format!("page-{i:04}")).collect();
    for name in &names {
        let created = client.post_json("/v1/topics", &json!({ "name": name, "partitions": 1 }));
        assert_eq!(created.0, 201, "{}", String::from_utf8_lossy(&created.1));
    }
    let first = serde_json::from_slice::<Value>(&client.get("/v1/topics?limit=5000").1).unwrap();
    assert_eq!(first["topics"].as_array().map(Vec::len), Some(1_000), "one page holds 1,000");
    assert_eq!(first["next_page_token"], json!("page-0999"));
    let listed = json_out(&narad(node.url.as_str(), &["topic", "list"], None));
    let listed: Vec<&str> = listed["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(listed, names, "every topic once, in name order");
}
