//! Retention on real processes. One node with 4 KiB segments and `retention_ms: 1000` under a
//! steady trickle of produces: sealed segments are deleted from disk, a consume below the log
//! start answers 410 naming it, reads from the log start go on, new records keep flowing, the
//! partitions' size stays bounded, and `/metrics` counts the deletions. In a 3-node cluster: a
//! partition no record ever reached shows zeros in `partition_stats` through every node (not
//! `null`), and a `PATCH` through one node ages every record out on every owner, as a third node
//! sees it.

mod cluster_support;
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cluster_support::{TestCluster, owners};
use common::{Client, TestNode, data_dir, wait_until};
use serde_json::{Value, json};

/// Generous: a slow, throttled machine still converges well within it.
const CONVERGE: Duration = Duration::from_secs(60);
const TOPIC: &str = "aging";
const PARTITIONS: u32 = 2;
/// Each batch: this many messages of about 150 bytes, spread over the partitions.
const BATCH: usize = 20;
const BATCH_EVERY: Duration = Duration::from_millis(50);

/// One partition's numbers from `partition_stats`: (log start, high watermark, segments, size).
type Numbers = (u64, u64, u64, u64);

fn json_of(answer: &(u16, Vec<u8>)) -> Value {
    serde_json::from_slice(&answer.1).unwrap_or_else(|e| {
        panic!("{}: not JSON ({e}): {}", answer.0, String::from_utf8_lossy(&answer.1))
    })
}

/// `partition_stats` of `topic` through `client`, as raw JSON (`None` unless 200).
fn partition_stats(client: &Client, topic: &str) -> Option<Vec<Value>> {
    let answer = client.get(&format!("/v1/topics/{topic}"));
    (answer.0 == 200).then(|| json_of(&answer)["partition_stats"].as_array().cloned())?
}

/// Every partition's numbers; `None` unless every partition shows all four.
fn numbers(client: &Client, topic: &str) -> Option<Vec<Numbers>> {
    partition_stats(client, topic)?
        .iter()
        .map(|p| {
            let field = |name: &str| p[name].as_u64();
            Some((
                field("log_start_offset")?,
                field("high_watermark")?,
                field("segments")?,
                field("size_bytes")?,
            ))
        })
        .collect()
}

fn consume(client: &Client, topic: &str, partition: u32, offset: u64) -> (u16, Vec<u8>) {
    client.get(&format!("/v1/topics/{topic}/consume?partition={partition}&offset={offset}&max=100"))
}

/// Asserts a 410 with `{"error", "log_start_offset"}`; returns the log start it names.
fn gone(answer: &(u16, Vec<u8>)) -> u64 {
    assert_eq!(answer.0, 410, "{}", String::from_utf8_lossy(&answer.1));
    let body = json_of(answer);
    assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
    body["log_start_offset"].as_u64().unwrap_or_else(|| panic!("no log_start_offset: {body}"))
}

/// Produces batches every `BATCH_EVERY` until stopped; counts the accepted messages.
fn start_producer(
    url: &str,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
) -> thread::JoinHandle<()> {
    let client = Client::new(url);
    thread::spawn(move || {
        let mut next = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let messages: Vec<Value> = (next..next + BATCH)
                .map(|i| {
                    let payload = format!("record {i:07} {}", "x".repeat(130));
                    json!({ "payload": payload, "partition": i as u32 % PARTITIONS })
                })
                .collect();
            next += BATCH;
            let (status, _) = client.post_json(
                &format!("/v1/topics/{TOPIC}/produce/batch"),
                &json!({ "messages": messages }),
            );
            if status == 202 {
                accepted.fetch_add(BATCH as u64, Ordering::Relaxed);
            }
            thread::sleep(BATCH_EVERY);
        }
    })
}

/// The `.log` segment files of every partition of the only topic, by name.
fn segment_files(data: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Ok(topics) = std::fs::read_dir(data.join("partitions")) else { return names };
    for topic in topics.filter_map(Result::ok) {
        let Ok(files) = std::fs::read_dir(topic.path()) else { continue };
        for file in files.filter_map(Result::ok) {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.ends_with(".log") {
                names.insert(name);
            }
        }
    }
    names
}

/// Reads at the log start: a 410 there (retention moved it meanwhile) or a 503 (that segment's
/// delete is in flight) is retried from the start it names; returns the records' first offset.
fn read_at_log_start(client: &Client, partition: u32, mut offset: u64) -> u64 {
    let mut last = (0, Vec::new());
    let read = wait_until(CONVERGE, || {
        last = consume(client, TOPIC, partition, offset);
        match last.0 {
            410 => offset = gone(&last),
            200 => return true,
            _ => {}
        }
        false
    });
    assert!(
        read,
        "no records at the log start {offset}: {} {}",
        last.0,
        String::from_utf8_lossy(&last.1)
    );
    let messages = json_of(&last)["messages"].as_array().cloned().expect("messages");
    assert!(!messages.is_empty(), "200 with no messages");
    let first = messages[0]["offset"].as_u64().expect("offset");
    assert_eq!(first, offset, "a read at the log start begins there");
    first
}

/// What a test saw over its run: every segment file on disk, and the most bytes the topic's
/// partitions held at once.
struct Seen {
    files: BTreeSet<String>,
    max_size: u64,
    data: std::path::PathBuf,
}

impl Seen {
    /// Looks at the disk and at `partition_stats`; returns the latter.
    fn sample(&mut self, client: &Client) -> Option<Vec<Numbers>> {
        self.files.extend(segment_files(&self.data));
        let numbers = numbers(client, TOPIC)?;
        self.max_size = self.max_size.max(numbers.iter().map(|n| n.3).sum::<u64>());
        Some(numbers)
    }
}

/// Retention's deletions as `/metrics` counts them and as the disk shows them: every
/// partition's first segment file is gone, fewer files remain than were seen over the run, and
/// the log start gauges moved. Returns the segments deleted and the files left on disk.
fn assert_deleted_on_disk(client: &Client, seen: &mut Seen) -> (f64, usize) {
    let metrics = client.metrics();
    let segments_deleted = metrics["narad_retention_segments_deleted_total"];
    assert!(segments_deleted > 0.0, "segments deleted: {segments_deleted}");
    assert!(metrics["narad_retention_records_deleted_total"] > 0.0);
    let on_disk = segment_files(&seen.data);
    seen.files.extend(on_disk.iter().cloned());
    assert!(
        on_disk.len() < seen.files.len(),
        "{} segment files on disk, {} seen over the run",
        on_disk.len(),
        seen.files.len()
    );
    for p in 0..PARTITIONS {
        assert!(!on_disk.contains(&format!("{p:05}.log")), "partition {p}'s first segment is gone");
        let gauge =
            format!("narad_partition_log_start_offset{{topic=\"{TOPIC}\",partition=\"{p}\"}}");
        assert!(
            metrics.get(&gauge).is_some_and(|v| *v > 0.0),
            "{gauge}: {:?}",
            metrics.get(&gauge)
        );
    }
    (segments_deleted, on_disk.len())
}

#[test]
fn time_retention_deletes_sealed_segments_while_records_keep_flowing() {
    let started = Instant::now();
    let (_tmp, data) = data_dir();
    let node = TestNode::start_with(&data, &["--partition-segment-bytes", "4096"]);
    let client = node.client();
    let create = json!({ "name": TOPIC, "partitions": PARTITIONS, "retention_ms": 1000 });
    let created = client.post_json("/v1/topics", &create);
    assert_eq!(created.0, 201, "{}", String::from_utf8_lossy(&created.1));
    let (stop, accepted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let producer = start_producer(&node.url, Arc::clone(&stop), Arc::clone(&accepted));

    let mut seen = Seen { files: BTreeSet::new(), max_size: 0, data: data.clone() };
    let mut first_trim = None;
    let trimmed = wait_until(CONVERGE, || {
        first_trim = seen.sample(&client).and_then(|n| n.iter().position(|p| p.0 > 0));
        first_trim.is_some()
    });
    assert!(trimmed, "no partition's log start moved in {CONVERGE:?}; log:\n{}", node.log());
    let partition = first_trim.expect("a trimmed partition") as u32;
    let at_first_trim = seen.sample(&client).expect("stats");
    eprintln!("first deletion after {:?}: {at_first_trim:?}", started.elapsed());

    // Below the log start: 410 naming a start no later than what stats show next, and past 0.
    let named = gone(&consume(&client, TOPIC, partition, 0));
    let shown = seen.sample(&client).expect("stats")[partition as usize].0;
    assert!(named > 0 && named <= shown, "410 names {named}, stats then show {shown}");
    read_at_log_start(&client, partition, named);

    // Records keep flowing on every partition, and retention keeps up: once it deleted several
    // times what the partitions hold, the size they held at most is that small a share.
    let mut deleted = 0.0;
    let mut now = at_first_trim.clone();
    let kept_up = wait_until(CONVERGE, || {
        let Some(numbers) = seen.sample(&client) else { return false };
        deleted = client.metric("narad_retention_bytes_deleted_total");
        let grew = numbers.iter().zip(&at_first_trim).all(|(n, then)| n.1 > then.1 + 100);
        let starts_moved = numbers.iter().zip(&at_first_trim).all(|(n, then)| n.0 > then.0);
        now = numbers;
        grew && starts_moved && deleted >= 4.0 * seen.max_size as f64
    });
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer thread");
    let max_size = seen.max_size;
    assert!(
        kept_up,
        "at first deletion {at_first_trim:?}, now {now:?}; {deleted} bytes deleted, at most \
         {max_size} held; log:\n{}",
        node.log()
    );
    // A hard cap as well: a few seconds of the trickle (about 60 KB/s), far below what flowed.
    assert!(max_size < 2 << 20, "the partitions held up to {max_size} bytes");

    let (segments_deleted, on_disk) = assert_deleted_on_disk(&client, &mut seen);
    eprintln!(
        "{} accepted, {segments_deleted} segments and {deleted} bytes deleted, at most {max_size} \
         bytes held, {} files on disk of {} seen, in {:?}",
        accepted.load(Ordering::Relaxed),
        on_disk,
        seen.files.len(),
        started.elapsed()
    );
}

/// A topic no record ever reached: every node shows zeros for every partition, its own and
/// those it asks their owners about (`null` before 032d0ef).
fn check_quiet_topic(clients: &[Client]) {
    clients[0].create_topic("quiet", 3);
    let mut seen = Vec::new();
    let zeros = wait_until(CONVERGE, || {
        seen = clients.iter().map(|c| numbers(c, "quiet")).collect();
        seen.iter().all(|n| n.as_ref().is_some_and(|n| n.iter().all(|p| *p == (0, 0, 0, 0))))
    });
    let raw: Vec<_> = clients.iter().map(|c| partition_stats(c, "quiet")).collect();
    assert!(zeros, "partition_stats of a topic never produced to: {raw:?}");
    // Partitions are assigned round-robin over the live members: no node owns them all, so
    // every node asked at least one other owner for its numbers.
    let quiet_owners = owners(&clients[0], "quiet");
    assert!(quiet_owners.iter().collect::<BTreeSet<_>>().len() > 1, "{quiet_owners:?}");
}

#[test]
fn in_a_cluster_stats_show_zeros_for_quiet_partitions_and_a_patch_ages_out_every_owner() {
    let started = Instant::now();
    let cluster = TestCluster::start(3);
    let clients: Vec<Client> = (0..3).map(|ix| cluster.client(ix)).collect();
    eprintln!("cluster ready in {:?}", started.elapsed());

    check_quiet_topic(&clients);

    // Default retention: records stay. Some on every partition, through node 1.
    let created = clients[0].post_json("/v1/topics", &json!({ "name": TOPIC, "partitions": 3 }));
    assert_eq!(created.0, 201, "{}", String::from_utf8_lossy(&created.1));
    let messages: Vec<Value> =
        (0..30).map(|i| json!({ "payload": format!("m{i}"), "partition": i % 3 })).collect();
    let batch = json!({ "messages": messages });
    let mut produced = (0, Vec::new());
    let accepted = wait_until(CONVERGE, || {
        produced = clients[0].post_json(&format!("/v1/topics/{TOPIC}/produce/batch"), &batch);
        produced.0 == 202
    });
    assert!(accepted, "{} {}", produced.0, String::from_utf8_lossy(&produced.1));
    let mut through_3 = None;
    let visible = wait_until(CONVERGE, || {
        through_3 = numbers(&clients[2], TOPIC);
        through_3.as_ref().is_some_and(|n| n.iter().all(|p| p.0 == 0 && p.1 >= 10))
    });
    assert!(visible, "every record visible, none deleted: {through_3:?}");
    // (More than 10 only if an ambiguous answer made us send the batch again.)
    let ends: Vec<u64> = through_3.clone().expect("stats").iter().map(|p| p.1).collect();

    // PATCH through node 2 (which does not own every partition); every owner ages every record
    // out on its own clock, as node 3 sees it.
    let topic_owners = owners(&clients[0], TOPIC);
    assert!(topic_owners.iter().collect::<BTreeSet<_>>().len() > 1, "{topic_owners:?}");
    let patched = clients[1].patch(&format!("/v1/topics/{TOPIC}"), br#"{"retention_ms":1000}"#);
    assert_eq!(patched.0, 200, "{}", String::from_utf8_lossy(&patched.1));
    let patched_at = Instant::now();
    let aged_out = wait_until(CONVERGE, || {
        through_3 = numbers(&clients[2], TOPIC);
        through_3
            .as_ref()
            .is_some_and(|n| n.iter().zip(&ends).all(|(p, end)| p.0 == *end && p.1 == *end))
    });
    assert!(
        aged_out,
        "after the PATCH, node 3 shows {through_3:?}; logs:\n{}\n{}\n{}",
        cluster.log(0),
        cluster.log(1),
        cluster.log(2)
    );
    eprintln!("aged out on every owner {:?} after the PATCH", patched_at.elapsed());
    for (ix, client) in clients.iter().enumerate() {
        for partition in 0..3 {
            let end = ends[partition as usize];
            let named = gone(&consume(client, TOPIC, partition, 0));
            assert_eq!(named, end, "through node {}, partition {partition}", ix + 1);
            assert_eq!(consume(client, TOPIC, partition, end).0, 204, "nothing past the end");
        }
    }
    eprintln!("cluster test took {:?}", started.elapsed());
}
