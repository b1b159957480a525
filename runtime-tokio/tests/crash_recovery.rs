//! Acceptance item 2 of issue 2: a mixed produce load (32 concurrent clients: keyed, keyless,
//! pinned, binary, JSON; 10 batches of 100; one message of exactly 1 MiB), `kill -9` as soon as
//! the last answer arrives, restart on the same data directory, and read every partition back:
//! every acknowledged message exactly once, byte for byte, on the right partition, and nothing
//! that was never sent.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::{Client, TestNode, data_dir, payload_bytes};
use narad_core::fnv::fnv1a_32;
use serde_json::{Value, json};

const TOPIC: &str = "crash";
const PARTITIONS: u32 = 4;
const CLIENTS: usize = 32;
const SINGLE_MESSAGES: usize = 3_000;
const BATCHES: usize = 10;
const BATCH_SIZE: usize = 100;

/// What a produced message should look like when read back.
#[derive(Clone, Debug)]
struct Sent {
    id: usize,
    kind: Kind,
    key: Option<String>,
    partition: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Binary,
    Json,
}

/// Payload, key and pin of single message `id`: a deterministic mix of every kind.
fn single(id: usize) -> (Vec<u8>, Sent) {
    let (kind, key, partition) = match id % 6 {
        0 => (Kind::Text, Some(format!("user-{}", id % 23)), None),
        1 => (Kind::Text, None, None),
        2 => (Kind::Text, None, Some((id % PARTITIONS as usize) as u32)),
        3 => (Kind::Binary, Some(format!("bin-{}", id % 7)), None),
        4 => (Kind::Json, Some(format!("user-{}", id % 11)), None),
        _ => (Kind::Binary, None, Some(((id / 6) % PARTITIONS as usize) as u32)),
    };
    (payload(id, kind), Sent { id, kind, key, partition })
}

fn payload(id: usize, kind: Kind) -> Vec<u8> {
    match kind {
        Kind::Text => format!("text message {id} ✓").into_bytes(),
        Kind::Binary => {
            let mut bytes = vec![0xff, 0xfe, 0x00, 0xc3];
            bytes.extend_from_slice(&(id as u64).to_le_bytes());
            bytes
        }
        Kind::Json => serde_json::to_vec(&json!({ "id": id, "tags": ["a", "b"], "ok": true }))
            .expect("JSON payload"),
    }
}

type Acked = Arc<Mutex<HashMap<Vec<u8>, Sent>>>;

fn produce_singles(client: &Client, worker: usize, acked: &Acked) {
    for id in (worker..SINGLE_MESSAGES).step_by(CLIENTS) {
        let (body, sent) = single(id);
        let mut path = format!("/v1/topics/{TOPIC}/produce");
        match (&sent.key, sent.partition) {
            (Some(key), _) => path.push_str(&format!("?key={key}")),
            (None, Some(p)) => path.push_str(&format!("?partition={p}")),
            (None, None) => {}
        }
        let (status, answer) = client.post(&path, &body);
        assert_eq!(status, 202, "message {id}: {}", String::from_utf8_lossy(&answer));
        acked.lock().expect("lock").insert(body, sent);
    }
}

fn produce_batch(client: &Client, batch: usize, acked: &Acked) {
    let mut messages = Vec::new();
    let mut sent = Vec::new();
    for i in 0..BATCH_SIZE {
        let id = 100_000 + batch * BATCH_SIZE + i;
        let kind = [Kind::Text, Kind::Binary, Kind::Json][i % 3];
        let body = payload(id, kind);
        let partition = (i % 5 == 0).then_some((i as u32 / 5) % PARTITIONS);
        let mut message = match kind {
            Kind::Text => json!({ "payload": String::from_utf8(body.clone()).expect("text") }),
            Kind::Binary => {
                json!({ "payload": STANDARD.encode(&body), "payload_encoding": "base64" })
            }
            Kind::Json => {
                json!({ "payload": serde_json::from_slice::<Value>(&body).expect("json") })
            }
        };
        // A batch stores a JSON payload's text as the request wrote it (a string keeps its
        // quotes); the binary one is decoded from base64.
        let stored = match kind {
            Kind::Binary => body,
            Kind::Text | Kind::Json => serde_json::to_vec(&message["payload"]).expect("JSON"),
        };
        if let Some(p) = partition {
            message["partition"] = json!(p);
        }
        messages.push(message);
        sent.push((stored, Sent { id, kind, key: None, partition }));
    }
    let (status, answer) = client
        .post_json(&format!("/v1/topics/{TOPIC}/produce/batch"), &json!({ "messages": messages }));
    assert_eq!(status, 202, "batch {batch}: {}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).expect("batch answer");
    assert_eq!(answer["accepted"], json!(BATCH_SIZE));
    acked.lock().expect("lock").extend(sent);
}

fn produce_everything(client: &Client) -> HashMap<Vec<u8>, Sent> {
    let acked: Acked = Arc::default();
    let mut workers = Vec::new();
    for worker in 0..CLIENTS {
        let (client, acked) = (client.clone(), Arc::clone(&acked));
        workers.push(thread::spawn(move || {
            produce_singles(&client, worker, &acked);
            if worker < BATCHES {
                produce_batch(&client, worker, &acked);
            }
            if worker == CLIENTS - 1 {
                let mut big = vec![b'x'; 1024 * 1024];
                big[..16].copy_from_slice(b"one mebibyte ok ");
                let (status, _) = client.post(&format!("/v1/topics/{TOPIC}/produce?key=big"), &big);
                assert_eq!(status, 202, "1 MiB message");
                let sent = Sent {
                    id: 999_999,
                    kind: Kind::Text,
                    key: Some("big".into()),
                    partition: None,
                };
                acked.lock().expect("lock").insert(big, sent);
            }
        }));
    }
    for worker in workers {
        worker.join().expect("producer thread");
    }
    Arc::try_unwrap(acked).expect("producers done").into_inner().expect("lock")
}

/// Reads all partitions; returns (partition, message) pairs.
fn read_all(client: &Client) -> Vec<(u32, Value)> {
    (0..PARTITIONS)
        .flat_map(|p| client.read_partition(TOPIC, p).into_iter().map(move |m| (p, m)))
        .collect()
}

#[test]
fn acknowledged_messages_survive_kill_9() {
    let (_tmp, dir) = data_dir();
    let mut node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic(TOPIC, PARTITIONS);
    let acked = produce_everything(&client);
    node.kill9();
    let expected = SINGLE_MESSAGES + BATCHES * BATCH_SIZE + 1;
    assert_eq!(acked.len(), expected, "every produce was acknowledged");

    let node = TestNode::start(&dir);
    let client = node.client();
    let drained = common::wait_drained(&client, TOPIC, expected as u64, Duration::from_secs(90));
    assert!(drained, "acknowledged messages not all visible; log:\n{}", node.log());
    let read = read_all(&client);
    check_read_back(&acked, &read);
}

fn check_read_back(acked: &HashMap<Vec<u8>, Sent>, read: &[(u32, Value)]) {
    let mut seen: HashMap<usize, u32> = HashMap::new();
    for (partition, message) in read {
        assert_eq!(message["topic"], json!(TOPIC));
        assert_eq!(message["partition"], json!(partition));
        let ms = message["timestamp_ms"].as_u64().expect("timestamp_ms");
        assert!(ms > 1_600_000_000_000, "{message}");
        assert_eq!(message["timestamp"].as_u64(), Some(ms / 1000), "Unix seconds: {message}");
        let bytes = payload_bytes(message);
        let sent = acked.get(&bytes).unwrap_or_else(|| panic!("phantom message {message}"));
        *seen.entry(sent.id).or_default() += 1;
        match sent.kind {
            Kind::Json => assert!(message["payload"].is_object(), "JSON comes back as JSON"),
            Kind::Binary => assert_eq!(message["payload_encoding"], json!("base64")),
            Kind::Text => assert!(message["payload"].is_string()),
        }
        assert_eq!(message.get("key").and_then(Value::as_str), sent.key.as_deref());
        if let Some(pinned) = sent.partition {
            assert_eq!(*partition, pinned, "pinned message {} on its partition", sent.id);
        } else if let Some(key) = &sent.key {
            assert_eq!(*partition, fnv1a_32(key.as_bytes()) % PARTITIONS, "key affinity");
        }
    }
    assert_eq!(seen.len(), acked.len(), "every acknowledged message read back");
    let mut duplicates: Vec<usize> =
        seen.iter().filter(|(_, n)| **n > 1).map(|(id, _)| *id).collect();
    duplicates.sort_unstable();
    assert!(
        duplicates.is_empty(),
        "{} of {} messages read back twice, e.g. ids {:?}",
        duplicates.len(),
        acked.len(),
        &duplicates[..duplicates.len().min(10)]
    );
}

/// SIGKILL while 16 clients are still producing: answers in flight are lost (ambiguous), but
/// every 202 that did arrive must be readable after the restart, exactly once.
#[test]
fn kill_9_under_load_loses_nothing_acknowledged() {
    let (_tmp, dir) = data_dir();
    let mut node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic("midflight", 3);
    let acked: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let workers: Vec<_> = (0..16)
        .map(|t| {
            let (client, acked, sent) = (client.clone(), Arc::clone(&acked), Arc::clone(&sent));
            thread::spawn(move || {
                for i in 0.. {
                    let body = format!("midflight {t} {i}").into_bytes();
                    sent.lock().expect("lock").push(body.clone());
                    match client.post("/v1/topics/midflight/produce", &body).0 {
                        202 => acked.lock().expect("lock").push(body),
                        0 => return, // The node died under us: this answer is ambiguous.
                        other => panic!("unexpected status {other}"),
                    }
                }
            })
        })
        .collect();
    let enough =
        common::wait_until(Duration::from_secs(30), || acked.lock().expect("lock").len() >= 1_000);
    assert!(enough, "producers too slow; log:\n{}", node.log());
    node.kill9();
    for worker in workers {
        worker.join().expect("producer");
    }

    let acked = acked.lock().expect("lock").clone();
    let sent: std::collections::HashSet<Vec<u8>> =
        sent.lock().expect("lock").iter().cloned().collect();
    let node = TestNode::start(&dir);
    let client = node.client();
    let drained =
        common::wait_drained(&client, "midflight", acked.len() as u64, Duration::from_secs(60));
    assert!(drained, "acknowledged records not visible; log:\n{}", node.log());
    let read: Vec<Vec<u8>> = (0..3)
        .flat_map(|p| client.read_partition("midflight", p))
        .map(|m| payload_bytes(&m))
        .collect();
    let read_set: std::collections::HashSet<&Vec<u8>> = read.iter().collect();
    assert!(read.iter().all(|r| sent.contains(r)), "phantom record");
    assert!(acked.iter().all(|a| read_set.contains(a)), "acknowledged record lost");
    assert_eq!(read_set.len(), read.len(), "duplicates after kill -9");
    eprintln!("{} acknowledged, {} visible after restart", acked.len(), read.len());
}
