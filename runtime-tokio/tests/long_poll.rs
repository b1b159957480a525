//! Long-poll replay consumes against the real binary (docs/design.md §4.9): a consume with
//! `wait=5s` parks until a produce makes its offset visible and answers well before its
//! deadline; `wait=0.3s` with nothing to read answers 204 after about that long; a wait past
//! the 20 s clamp carries `X-Narad-Wait-Clamped`; a bad `wait` is 400; through a non-owner of a
//! 3-node cluster the owner's commit wakes it too; `narad consume --follow` prints records as
//! they arrive and says how many on Ctrl-C.

mod cluster_support;
mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster_support::{TestCluster, owners};
use common::{Client, TestNode, data_dir, wait_until};
use serde_json::Value;

/// A long-poll is woken by the commit, so it must answer long before its 5 s deadline; this
/// leaves a slow, shared machine seconds of room.
const WOKEN_WITHIN: Duration = Duration::from_millis(3_500);

/// A GET with a client timeout past the 20 s clamp: status, one header, body, and how long.
fn long_get(url: &str, header: &str) -> (u16, Option<String>, Vec<u8>, Duration) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(40)))
        .proxy(None)
        .build()
        .into();
    let start = Instant::now();
    let response = agent.get(url).call().expect("HTTP answer");
    let status = response.status().as_u16();
    let value = response.headers().get(header).map(|v| v.to_str().expect("ASCII").to_string());
    let mut body = Vec::new();
    response.into_body().into_reader().read_to_end(&mut body).expect("body");
    (status, value, body, start.elapsed())
}

fn produce(client: &Client, topic: &str, partition: u32, payload: &str) {
    let path = format!("/v1/topics/{topic}/produce?partition={partition}");
    let (status, body) = client.post(&path, payload.as_bytes());
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
}

#[test]
fn a_parked_consume_is_woken_by_a_produce_and_an_idle_one_answers_204_at_its_wait() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic("lp", 1);

    let url = format!("{}/v1/topics/lp/consume?partition=0&offset=0&wait=5s", node.url);
    let waiter = std::thread::spawn(move || long_get(&url, "x-narad-wait-clamped"));
    assert!(
        wait_until(Duration::from_secs(10), || client.metric("narad_consumes_parked") == 1.0),
        "the consume never parked"
    );
    let produced = Instant::now();
    produce(&client, "lp", 0, "{\"n\":1}");
    let (status, clamped, body, elapsed) = waiter.join().expect("waiter");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(clamped, None, "5 s is inside the clamp");
    let record: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!((record["offset"].as_u64(), record["payload"]["n"].as_u64()), (Some(0), Some(1)));
    assert!(produced.elapsed() < WOKEN_WITHIN, "woken {:?} after the produce", produced.elapsed());
    assert!(elapsed < Duration::from_secs(5), "answered at the deadline ({elapsed:?})");
    assert_eq!(client.metric("narad_consumes_parked"), 0.0);

    // Nothing at offset 1: 204 after about 0.3 s.
    let url = format!("{}/v1/topics/lp/consume?partition=0&offset=1&wait=0.3s", node.url);
    let (status, _, _, elapsed) = long_get(&url, "x-narad-wait-clamped");
    assert_eq!(status, 204);
    assert!(elapsed >= Duration::from_millis(290), "answered after only {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "answered after {elapsed:?}");

    // A wait past the clamp is cut to 20 s and says so (offset 0 is visible: no wait at all).
    let url = format!("{}/v1/topics/lp/consume?partition=0&offset=0&wait=1m", node.url);
    let (status, clamped, _, _) = long_get(&url, "x-narad-wait-clamped");
    assert_eq!((status, clamped.as_deref()), (200, Some("20s")));

    for bad in ["5", "abc", "1x", "1s&wait=2s"] {
        let (status, body) =
            client.get(&format!("/v1/topics/lp/consume?partition=0&offset=0&wait={bad}"));
        assert_eq!(status, 400, "wait={bad}: {}", String::from_utf8_lossy(&body));
    }
}

#[test]
fn follow_prints_records_as_they_arrive_and_counts_them_on_ctrl_c() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic("f", 2);
    produce(&client, "f", 0, "{\"before\":true}"); // before --follow: not printed (from the end)
    assert!(common::wait_drained(&client, "f", 1, Duration::from_secs(20)));
    let mut child = Command::new(env!("CARGO_BIN_EXE_narad"))
        .args(["consume", "f", "--follow", "--url", &node.url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start narad consume --follow");
    assert!(
        wait_until(Duration::from_secs(15), || client.metric("narad_consumes_parked") == 2.0),
        "the follower never parked on both partitions"
    );
    for (partition, n) in [(0, 1), (1, 2), (1, 3)] {
        produce(&client, "f", partition, &format!("{{\"n\":{n}}}"));
    }
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let mut buf = [0u8; 4096];
        while out.lines().count() < 3 {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        out
    });
    let printed = reader.join().expect("reader");
    let mut ns: Vec<u64> = printed
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("one JSON record a line"))
        .map(|record| record["payload"]["n"].as_u64().expect("a record of this test"))
        .collect();
    ns.sort_unstable();
    assert_eq!(ns, vec![1, 2, 3]);
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    assert!(status.expect("run kill -INT").success());
    assert!(
        wait_until(Duration::from_secs(10), || child.try_wait().expect("poll").is_some()),
        "--follow did not exit on SIGINT"
    );
    let exit = child.wait().expect("reap");
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("stderr");
    assert!(exit.success(), "{exit:?}: {stderr}");
    assert!(stderr.contains("3 records printed"), "{stderr}");
}

#[test]
fn a_long_poll_through_a_non_owner_is_woken_by_the_owners_commit() {
    let cluster = TestCluster::start(3);
    let asked = cluster.client(0);
    asked.create_topic("c", 3);
    let mut owners_seen = Vec::new();
    assert!(wait_until(Duration::from_secs(20), || {
        owners_seen = owners(&cluster.client(0), "c");
        owners_seen.iter().all(|&owner| owner > 0)
    }));
    let partition = owners_seen.iter().position(|&owner| owner != 1).expect("a remote partition");
    let owner = owners_seen[partition] as usize - 1;
    let url = format!(
        "{}/v1/topics/c/consume?partition={partition}&offset=0&max=10&wait=5s",
        cluster.nodes[0].url
    );
    let waiter = std::thread::spawn(move || long_get(&url, "x-narad-wait-clamped"));
    let owner_client = cluster.client(owner);
    assert!(
        wait_until(Duration::from_secs(10), || owner_client.metric("narad_consumes_parked") == 1.0),
        "the forwarded consume never parked on its owner"
    );
    let produced = Instant::now();
    produce(&cluster.client(2), "c", partition as u32, "{\"far\":1}");
    let (status, _, body, _) = waiter.join().expect("waiter");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(answer["messages"][0]["payload"]["far"].as_u64(), Some(1));
    assert!(produced.elapsed() < WOKEN_WITHIN, "woken {:?} after the produce", produced.elapsed());
}
