//! Segmented partition logs on a real process: with a small `--partition-segment-bytes`, a
//! partition's log rolls into many segment files; every record reads back in order across them,
//! after a `kill -9` and restart too, and new records keep landing after the restart. Each sealed
//! segment gets a seal file, a clean shutdown seals the active one too, and a restart adopts
//! every segment with a trusted seal without reading it (docs/design.md §4.4).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{TestNode, data_dir, payload_bytes, wait_drained};
use serde_json::json;

const TOPIC: &str = "rolling";
const SEGMENT_FLAGS: [&str; 2] = ["--partition-segment-bytes", "4096"];

fn produce(client: &common::Client, from: usize, count: usize) {
    for chunk in (from..from + count).collect::<Vec<_>>().chunks(100) {
        let messages: Vec<_> = chunk
            .iter()
            .map(|i| json!({ "payload": format!("record {i:05} {}", "x".repeat(60)) }))
            .collect();
        let (status, body) = client.post_json(
            &format!("/v1/topics/{TOPIC}/produce/batch"),
            &json!({ "messages": messages }),
        );
        assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    }
}

/// Records 0..1000 in five rounds of 200 (about 18 KiB each), each drained before the next: a
/// segment holds whole commits, and however the node batches a round into commits, the next
/// round's first commit finds the active segment past the 4 KiB bound and rolls it, so the log
/// has at least five segments whatever the machine's speed.
fn produce_in_rounds(client: &common::Client, node: &TestNode) {
    for round in 0..5u64 {
        produce(client, (round * 200) as usize, 200);
        let drained = wait_drained(client, TOPIC, (round + 1) * 200, Duration::from_secs(60));
        assert!(drained, "{}", node.log());
    }
}

/// Files of the topic's only partition whose name ends in `extension`.
fn partition_files(data: &Path, extension: &str) -> Vec<std::fs::DirEntry> {
    let partitions = data.join("partitions");
    let topic_dir =
        std::fs::read_dir(&partitions).expect("partitions dir").next().unwrap().unwrap();
    let entries = std::fs::read_dir(topic_dir.path()).expect("topic dir");
    let named = |e: &std::fs::DirEntry| e.file_name().to_string_lossy().ends_with(extension);
    entries.map(|e| e.expect("dir entry")).filter(named).collect()
}

/// Segment files of the topic's only partition.
fn segment_files(data: &Path) -> usize {
    partition_files(data, ".log").len()
}

/// Bytes of the topic's segment files.
fn segment_bytes(data: &Path) -> u64 {
    let files = partition_files(data, ".log");
    files.iter().map(|e| e.metadata().expect("stat").len()).sum()
}

/// (adopted, scanned, bytes of segments read) from a start-up's log line.
fn recovery_line(log: &str) -> (u64, u64, u64) {
    let line = log
        .lines()
        .find(|l| l.contains("recovered partition logs:"))
        .unwrap_or_else(|| panic!("no recovery line in\n{log}"));
    let number_after = |key: &str| -> u64 {
        let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len()..];
        rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse().expect(line)
    };
    let message = &line[line.find("recovered partition logs: ").expect("message")..];
    let adopted = message["recovered partition logs: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect(line);
    let scanned = message.split(", ").nth(1).and_then(|s| s.split(' ').next()?.parse().ok());
    (adopted, scanned.expect(line), number_after("segment_bytes_read="))
}

fn assert_reads_back(client: &common::Client, count: usize) {
    let messages = client.read_partition(TOPIC, 0);
    assert_eq!(messages.len(), count);
    for (i, message) in messages.iter().enumerate() {
        // Produced in batches as JSON strings: stored with their quotes.
        let expected = format!("\"record {i:05} {}\"", "x".repeat(60));
        assert_eq!(payload_bytes(message), expected.as_bytes(), "offset {i}");
    }
}

#[test]
fn a_partition_log_rolls_into_segments_and_reads_back_across_them_after_a_crash() {
    let (_tmp, data) = data_dir();
    let mut node = TestNode::start_with(&data, &SEGMENT_FLAGS);
    let client = node.client();
    client.create_topic(TOPIC, 1);
    produce_in_rounds(&client, &node);
    let segments = segment_files(&data);
    assert!(segments >= 5, "{segments} segment files");
    assert_reads_back(&client, 1_000);

    node.kill9();
    let node = TestNode::start_with(&data, &SEGMENT_FLAGS);
    let client = node.client();
    assert_reads_back(&client, 1_000);
    produce(&client, 1_000, 200);
    assert!(wait_drained(&client, TOPIC, 1_200, Duration::from_secs(60)), "{}", node.log());
    assert_reads_back(&client, 1_200);
    assert!(segment_files(&data) > segments, "new records roll on into new segments");
}

#[test]
fn a_restart_after_a_clean_shutdown_reads_no_segment() {
    let (_tmp, data) = data_dir();
    let mut node = TestNode::start_with(&data, &SEGMENT_FLAGS);
    let client = node.client();
    client.create_topic(TOPIC, 1);
    produce_in_rounds(&client, &node);
    assert!(node.sigterm(Duration::from_secs(30)).success(), "{}", node.log());
    let segments = segment_files(&data) as u64;
    assert!(segments >= 5, "{segments} segment files");
    assert_eq!(partition_files(&data, ".seal").len() as u64, segments, "a seal per segment");

    let mut node = TestNode::start_with(&data, &SEGMENT_FLAGS);
    let (adopted, scanned, read) = recovery_line(&node.log());
    assert_eq!((adopted, scanned, read), (segments, 0, 0), "{}", node.log());
    let client = node.client();
    assert_reads_back(&client, 1_000);

    // After a kill -9 with new commits, only what changed since is scanned: the active
    // segment (and at most a sealed one whose seal write the kill cut short).
    produce(&client, 1_000, 200);
    assert!(wait_drained(&client, TOPIC, 1_200, Duration::from_secs(60)), "{}", node.log());
    node.kill9();
    let total = segment_files(&data) as u64;
    let node = TestNode::start_with(&data, &SEGMENT_FLAGS);
    let (adopted, scanned, read) = recovery_line(&node.log());
    assert!((1..=2).contains(&scanned) && adopted + scanned == total, "{}", node.log());
    assert!(read < segment_bytes(&data) / 4, "{read} bytes read; {}", node.log());
    assert_reads_back(&node.client(), 1_200);
}
