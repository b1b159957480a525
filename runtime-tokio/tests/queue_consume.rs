//! Queue consume on real processes (issue 12): the HTTP shapes of a lease, an ack, a nack, an
//! extend and the batch ack on one node, leases voided by a kill -9; and on three nodes over
//! QUIC, producers and queue workers through every node while an owner is killed and brought
//! back: every acknowledged produce is acked by a worker at least once, nothing is delivered
//! after its ack's 204, and the duplicates are counted and printed.

mod cluster_support;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cluster_support::TestCluster;
use common::{Client, TestNode, data_dir, wait_drained, wait_until};
use serde_json::Value;

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

fn ack(client: &Client, topic: &str, handle: &str, extend: Option<&str>) -> u16 {
    let extend = extend.map(|e| format!("&extend={e}")).unwrap_or_default();
    client.post(&format!("/v1/topics/{topic}/ack?receipt_handle={handle}{extend}"), b"").0
}

#[test]
fn leases_acks_nacks_and_batch_acks_over_http() {
    let (_dir, path) = data_dir();
    let mut node = TestNode::start(&path);
    let client = node.client();
    client.create_topic("jobs", 1);
    for i in 0..3 {
        assert_eq!(
            client
                .post("/v1/topics/jobs/produce?partition=0", format!("{{\"job\":{i}}}").as_bytes())
                .0,
            202
        );
    }
    // A 202 is durable; visibility follows the dispatch (a small batch may linger for company).
    assert!(wait_drained(&client, "jobs", 3, Duration::from_secs(30)), "all three visible");
    let (status, _) = client.get("/v1/topics/jobs/consume");
    assert_eq!(status, 200, "the first message is available");
    // That receive leased offset 0; the next ones take the rest.
    let (status, body) = client.get("/v1/topics/jobs/consume?max=10");
    assert_eq!(status, 200);
    let rest = json(&body)["messages"].as_array().expect("the list form").clone();
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(client.get("/v1/topics/jobs/consume").0, 204, "everything is leased");
    for message in &rest {
        assert_eq!(message["delivery_count"], 1);
        let handle = message["receipt_handle"].as_str().expect("a handle");
        let parts: Vec<&str> = handle.split(':').collect();
        assert_eq!(parts.len(), 3, "partition:offset:nonce, got {handle}");
        assert_eq!(parts[0], "0");
        assert_eq!(parts[1], message["offset"].to_string());
    }
    let (one, two) =
        (rest[0]["receipt_handle"].as_str().unwrap(), rest[1]["receipt_handle"].as_str().unwrap());
    assert_eq!(ack(&client, "jobs", one, None), 204);
    assert_eq!(ack(&client, "jobs", one, None), 410, "a settled handle is stale");
    assert_eq!(ack(&client, "jobs", "garbage", None), 400);
    assert_eq!(ack(&client, "jobs", two, Some("maybe")), 400, "a bad extend");
    assert_eq!(client.post("/v1/topics/jobs/ack", b"").0, 400, "no handle at all");
    assert_eq!(ack(&client, "jobs", two, Some("true")), 204, "extended");
    assert_eq!(ack(&client, "jobs", two, Some("0")), 204, "nacked");
    let (status, body) = client.get("/v1/topics/jobs/consume");
    assert_eq!(status, 200, "a nacked message is available at once");
    let again = json(&body);
    assert_eq!(
        (again["offset"].clone(), again["delivery_count"].clone()),
        (rest[1]["offset"].clone(), Value::from(2))
    );
    let fresh = again["receipt_handle"].as_str().unwrap().to_string();
    let batch = serde_json::json!({ "receipt_handles": [fresh, two, "nope"] });
    let (status, body) = client.post_json("/v1/topics/jobs/ack", &batch);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let statuses: Vec<u64> = json(&body)["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [204, 410, 400]);
    // Offset 0 is still leased by the very first receive: a kill -9 voids that lease.
    node.kill9();
    let node = TestNode::start(&path);
    let client = node.client();
    let (status, body) = client.get("/v1/topics/jobs/consume?max=10");
    assert_eq!(status, 200, "the leased message is available at once after the restart");
    let after = json(&body)["messages"].as_array().unwrap().clone();
    let got: Vec<(u64, u64)> = after
        .iter()
        .map(|m| (m["offset"].as_u64().unwrap(), m["delivery_count"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, [(0, 2)], "acked ones never come back; counts survive the restart");
}

const TOPIC: &str = "work";
const PARTITIONS: u32 = 6;
const PRODUCERS: usize = 4;
const WORKERS: usize = 4;
const MESSAGES_PER_PRODUCER: usize = 300;
const VICTIM: usize = 2;

/// What the workers saw, shared between their threads.
#[derive(Default)]
struct Seen {
    /// Payload → when its ack got 204.
    acked: BTreeMap<String, Instant>,
    deliveries: u64,
    /// (partition, offset) → when its ack got 204. A payload may sit at two offsets (the
    /// produce path may commit a record twice across a reroute, docs/design.md §4.6): each is
    /// its own queue message.
    acked_at: BTreeMap<(u64, u64), Instant>,
    /// Deliveries of a (partition, offset) requested after its ack had been answered 204.
    after_ack: Vec<(String, u64, u64)>,
    /// Payload → the statuses of every ack attempt that did not get 204.
    failed_acks: BTreeMap<String, Vec<u16>>,
    /// Payload → (partition, offset, delivery count) of every delivery.
    delivered: BTreeMap<String, Vec<(u64, u64, u64)>>,
}

/// A topic's own lease and dead-letter topic, as a create sets them and a receive obeys them:
/// bad settings answer 400; a message nacked `max_deliveries` times is moved (its copy readable
/// in the dead-letter topic, counted in `/metrics`) and never offered again, across a restart.
#[test]
fn a_topic_sets_its_lease_and_dead_letter_topic() {
    let (_tmp, dir) = data_dir();
    let mut node = TestNode::start(&dir);
    let client = node.client();
    let create = |body: Value| client.post_json("/v1/topics", &body);
    let refused = [
        serde_json::json!({ "name": "jobs", "visibility_timeout_ms": 50 }),
        serde_json::json!({ "name": "jobs", "max_deliveries": 2 }),
        serde_json::json!({ "name": "jobs", "dead_letter_topic": "dlq" }),
        serde_json::json!({ "name": "jobs", "max_deliveries": 2, "dead_letter_topic": "dlq" }),
        serde_json::json!({ "name": "jobs", "max_deliveries": 0, "dead_letter_topic": "jobs" }),
    ];
    for body in refused {
        let (status, answer) = create(body.clone());
        assert_eq!(status, 400, "{body}: {}", String::from_utf8_lossy(&answer));
        assert!(json(&answer)["error"].as_str().is_some_and(|e| !e.is_empty()), "says why");
    }
    assert_eq!(create(serde_json::json!({ "name": "dlq", "partitions": 1 })).0, 201);
    let body = serde_json::json!({
        "name": "jobs", "partitions": 1, "visibility_timeout_ms": 1_500,
        "max_deliveries": 2, "dead_letter_topic": "dlq",
    });
    let (status, created) = create(body);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&created));
    let created = json(&created);
    assert_eq!(created["visibility_timeout_ms"], 1_500, "{created}");
    assert_eq!(
        (created["max_deliveries"].clone(), created["dead_letter_topic"].clone()),
        (Value::from(2), Value::from("dlq")),
        "{created}"
    );
    let shown = json(&client.get("/v1/topics/jobs").1);
    assert_eq!(shown["dead_letter_topic"], "dlq", "{shown}");
    assert_eq!(client.post("/v1/topics/jobs/produce", b"poison").0, 202);
    for count in 1..=2 {
        let mut leased = None;
        let offered = wait_until(Duration::from_secs(30), || {
            let (status, body) = client.get("/v1/topics/jobs/consume");
            leased = (status == 200).then(|| json(&body));
            leased.is_some()
        });
        assert!(offered, "delivery {count} is offered");
        let message = leased.expect("checked above");
        assert_eq!(message["delivery_count"], count, "{message}");
        let handle = message["receipt_handle"].as_str().expect("a handle");
        if count == 1 {
            // Not settled: the topic's 1.5 s lease (not the default 30 s) gives it back.
            continue;
        }
        assert_eq!(ack(&client, "jobs", handle, Some("0")), 204, "nacked");
    }
    let moved = wait_until(Duration::from_secs(30), || {
        client.get("/v1/topics/jobs/consume").0 == 204 && client.read_partition("dlq", 0).len() == 1
    });
    assert!(moved, "the third receive moves it to the dead-letter topic");
    let copy = client.read_partition("dlq", 0);
    assert_eq!(common::payload_bytes(&copy[0]), b"poison");
    assert_eq!(client.metric("narad_queue_dead_lettered_total"), 1.0);
    node.kill9();
    let node = TestNode::start(&dir);
    let client = node.client();
    // A restart voids leases: a message whose move had not held would be offered at once.
    assert_eq!(client.get("/v1/topics/jobs/consume").0, 204, "the move held through kill -9");
    assert_eq!(client.read_partition("dlq", 0).len(), 1, "moved once");
}

/// A waiting receive (`wait`) is answered by the produce that brings a message, long before
/// its wait ends; a wait with nothing to lease answers 204 when it ends.
#[test]
fn a_waiting_receive_is_answered_when_a_message_arrives() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic("jobs", 2);
    let waiting = {
        let client = node.client();
        thread::spawn(move || {
            let started = Instant::now();
            let answer = client.get("/v1/topics/jobs/consume?wait=20s");
            (answer, started.elapsed())
        })
    };
    // The receive is parked before the produce (the node counts it).
    let parked =
        wait_until(Duration::from_secs(30), || client.metric("narad_consumes_parked") >= 1.0);
    assert!(parked, "the receive parks");
    assert_eq!(client.post("/v1/topics/jobs/produce", b"late work").0, 202);
    let ((status, body), took) = waiting.join().expect("the waiting client");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(common::payload_bytes(&json(&body)), b"late work");
    assert!(
        took < Duration::from_secs(19),
        "answered by the produce, not the wait's end: {took:?}"
    );
    let (status, _) = client.get("/v1/topics/jobs/consume?wait=200ms");
    assert_eq!(status, 204, "nothing else: the wait ends empty");
}

#[test]
fn workers_ack_every_acknowledged_produce_through_an_owner_kill() {
    let mut cluster = TestCluster::start(3);
    cluster.client(0).create_topic(TOPIC, PARTITIONS);
    let clients: Vec<Client> = (0..3).map(|ix| cluster.client(ix)).collect();
    let produced = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (clients, produced) = (clients.clone(), produced.clone());
            thread::spawn(move || produce(p, &clients, &produced))
        })
        .collect();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (clients, seen, stop) = (clients.clone(), seen.clone(), stop.clone());
            thread::spawn(move || work(w, &clients, &seen, &stop))
        })
        .collect();
    thread::sleep(Duration::from_secs(3));
    cluster.kill9(VICTIM);
    eprintln!("killed node {}", VICTIM + 1);
    thread::sleep(Duration::from_secs(4));
    cluster.spawn(VICTIM, cluster_support::SECRET);
    cluster.wait_ready(VICTIM);
    eprintln!("node {} is back", VICTIM + 1);
    for producer in producers {
        producer.join().expect("producer");
    }
    let expected = produced.lock().unwrap().clone();
    // Done once every partition's owner says nothing is available or leased, and the workers
    // saw an answer to an ack of every acknowledged produce.
    let drained = wait_until(Duration::from_secs(90), || {
        let idle = queue_idle(&clients[0]);
        let seen = seen.lock().unwrap();
        idle && expected
            .iter()
            .all(|p| seen.acked.contains_key(p) || seen.failed_acks.contains_key(p))
    });
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("worker");
    }
    let seen = seen.lock().unwrap();
    // A settle whose answer was lost (the node that took it, or the owner, was killed after
    // the owner applied it) leaves a message acked without a worker seeing 204: it is then never
    // delivered again, and the owners' counts (checked by `queue_idle`) say it is settled.
    let unanswered: Vec<_> = expected
        .iter()
        .filter(|p| !seen.acked.contains_key(*p))
        .map(|p| (p, seen.delivered.get(p), seen.failed_acks.get(p)))
        .collect();
    let missing: Vec<_> =
        unanswered.iter().filter(|(_, _, failed)| failed.is_none()).take(10).collect();
    let duplicates = seen.deliveries - seen.acked.len() as u64;
    eprintln!(
        "{} produced (202), {} acked by workers (+{} whose ack's answer was lost: {:?}), {} \
         deliveries, {duplicates} duplicates ({:.2} %)",
        expected.len(),
        seen.acked.len(),
        unanswered.len(),
        unanswered.iter().take(5).collect::<Vec<_>>(),
        seen.deliveries,
        100.0 * duplicates as f64 / seen.deliveries.max(1) as f64
    );
    assert!(unanswered.len() <= 5, "too many acks without an answer: {unanswered:?}");
    assert!(
        drained && missing.is_empty(),
        "never acked: {missing:?}; node logs:\n{}",
        cluster.log(VICTIM)
    );
    assert!(seen.after_ack.is_empty(), "delivered after its ack's 204: {:?}", seen.after_ack);
    assert!(expected.len() >= PRODUCERS * MESSAGES_PER_PRODUCER / 2, "too few produces got 202");
}

/// True when every partition of the topic reports nothing available and nothing leased.
fn queue_idle(client: &Client) -> bool {
    let (status, body) = client.get(&format!("/v1/topics/{TOPIC}"));
    if status != 200 {
        return false;
    }
    let stats = json(&body)["partition_stats"].as_array().cloned().unwrap_or_default();
    stats.len() == PARTITIONS as usize
        && stats.iter().all(|p| p["available"] == 0 && p["leased"] == 0)
}

/// Produces unique payloads through the nodes in turn; remembers those answered 202.
fn produce(p: usize, clients: &[Client], produced: &Mutex<BTreeSet<String>>) {
    for i in 0..MESSAGES_PER_PRODUCER {
        let payload = format!("p{p}-{i}");
        let client = &clients[(p + i) % clients.len()];
        let path = format!("/v1/topics/{TOPIC}/produce?key={payload}");
        if client.post(&path, payload.as_bytes()).0 == 202 {
            produced.lock().unwrap().insert(payload);
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Receives through the nodes in turn and acks everything, until told to stop.
fn work(w: usize, clients: &[Client], seen: &Mutex<Seen>, stop: &AtomicBool) {
    let mut turn = w;
    while !stop.load(Ordering::Relaxed) {
        turn += 1;
        let client = &clients[turn % clients.len()];
        let asked = Instant::now();
        let (status, body) = client.get(&format!("/v1/topics/{TOPIC}/consume?max=10"));
        if status != 200 {
            thread::sleep(Duration::from_millis(if status == 204 { 20 } else { 100 }));
            continue;
        }
        let messages = json(&body)["messages"].as_array().cloned().unwrap_or_default();
        for message in messages {
            let payload = common::payload_bytes(&message);
            let payload = String::from_utf8(payload).expect("our payloads are text");
            let handle = message["receipt_handle"].as_str().expect("a handle").to_string();
            let position =
                (message["partition"].as_u64().unwrap(), message["offset"].as_u64().unwrap());
            {
                let mut seen = seen.lock().unwrap();
                seen.deliveries += 1;
                let at = (&message["partition"], &message["offset"], &message["delivery_count"]);
                let at = (at.0.as_u64().unwrap(), at.1.as_u64().unwrap(), at.2.as_u64().unwrap());
                seen.delivered.entry(payload.clone()).or_default().push(at);
                if seen.acked_at.get(&(at.0, at.1)).is_some_and(|acked| *acked < asked) {
                    seen.after_ack.push((payload.clone(), at.0, at.1));
                }
            }
            // Settle through another node than the one that leased.
            let settler = &clients[(turn + 1) % clients.len()];
            let status = ack(settler, TOPIC, &handle, None);
            let mut seen = seen.lock().unwrap();
            if status == 204 {
                seen.acked.entry(payload).or_insert_with(Instant::now);
                seen.acked_at.entry(position).or_insert_with(Instant::now);
            } else {
                seen.failed_acks.entry(payload).or_default().push(status);
            }
        }
    }
}
