//! Segmented partition logs on a real process: with a small `--partition-segment-bytes`, a
//! partition's log rolls into many segment files; every record reads back in order across them,
//! after a `kill -9` and restart too, and new records keep landing after the restart.

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

/// Segment files of the topic's only partition.
fn segment_files(data: &Path) -> usize {
    let partitions = data.join("partitions");
    let topic_dir =
        std::fs::read_dir(&partitions).expect("partitions dir").next().unwrap().unwrap();
    std::fs::read_dir(topic_dir.path()).expect("topic dir").count()
}

fn assert_reads_back(client: &common::Client, count: usize) {
    let messages = client.read_partition(TOPIC, 0);
    assert_eq!(messages.len(), count);
    for (i, message) in messages.iter().enumerate() {
        let expected = format!("record {i:05} {}", "x".repeat(60));
        assert_eq!(payload_bytes(message), expected.as_bytes(), "offset {i}");
    }
}

#[test]
fn a_partition_log_rolls_into_segments_and_reads_back_across_them_after_a_crash() {
    let (_tmp, data) = data_dir();
    let mut node = TestNode::start_with(&data, &SEGMENT_FLAGS);
    let client = node.client();
    client.create_topic(TOPIC, 1);
    produce(&client, 0, 1_000);
    assert!(wait_drained(&client, TOPIC, 1_000, Duration::from_secs(60)), "{}", node.log());
    let segments = segment_files(&data);
    // About 90 KiB of log: a segment holds whole commits (here up to a few hundred records, a
    // few times the 4 KiB bound), so at least a handful of segments.
    assert!(segments >= 4, "{segments} segment files");
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
