//! Harness for the cluster tests: N `narad serve` processes on 127.0.0.1 with free HTTP and QUIC
//! ports, one temporary directory, a cluster secret each (the same one unless a test says
//! otherwise); kill -9 and restart by index; every child killed when the cluster is dropped.
//! Every wait is bounded.
#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{Client, READY_TIMEOUT, wait_until};

/// The secret the tests' clusters share.
pub const SECRET: &str = "test-cluster-secret-0123456789abcdef";

/// One node of a test cluster (index `ix` has node id `ix + 1`).
pub struct ClusterNode {
    pub id: u32,
    pub url: String,
    pub cluster_addr: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

/// A cluster of `narad serve` processes.
pub struct TestCluster {
    _tmp: tempfile::TempDir,
    pub nodes: Vec<ClusterNode>,
    peers: String,
    starts: u32,
}

impl TestCluster {
    /// Picks ports and directories for `size` nodes without starting any.
    pub fn new(size: usize) -> TestCluster {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::new();
        for ix in 0..size {
            let id = ix as u32 + 1;
            nodes.push(ClusterNode {
                id,
                url: format!("http://127.0.0.1:{}", free_tcp_port()),
                cluster_addr: format!("127.0.0.1:{}", free_udp_port()),
                data_dir: tmp.path().join(format!("node-{id}")),
                log_path: tmp.path().join(format!("node-{id}.log")),
                child: None,
            });
        }
        let peers: Vec<String> =
            nodes.iter().map(|n| format!("{}={}", n.id, n.cluster_addr)).collect();
        TestCluster { _tmp: tmp, nodes, peers: peers.join(","), starts: 0 }
    }

    /// Starts every node with the shared secret and waits until all are ready.
    pub fn start(size: usize) -> TestCluster {
        let mut cluster = TestCluster::new(size);
        for ix in 0..size {
            cluster.spawn(ix, SECRET);
        }
        for ix in 0..size {
            cluster.wait_ready(ix);
        }
        cluster
    }

    /// Starts node `ix` with `secret` (appending to its log), without waiting.
    pub fn spawn(&mut self, ix: usize, secret: &str) {
        self.starts += 1;
        let node = &mut self.nodes[ix];
        assert!(node.child.is_none(), "node {} is already running", node.id);
        let mut log =
            File::options().create(true).append(true).open(&node.log_path).expect("open node log");
        use std::io::Write;
        let _ = writeln!(log, "===== start {} =====", self.starts);
        let http = node.url.trim_start_matches("http://").to_string();
        let child = Command::new(env!("CARGO_BIN_EXE_narad"))
            .arg("serve")
            .args(["--node-id", &node.id.to_string()])
            .args(["--http", &http])
            .args(["--cluster", &node.cluster_addr])
            .args(["--peers", &self.peers])
            .arg("--data-dir")
            .arg(&node.data_dir)
            .env("NARAD_CLUSTER_SECRET", secret)
            .env("RUST_LOG", std::env::var("NARAD_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn narad");
        node.child = Some(child);
    }

    /// Polls `/readyz` of node `ix` until 200; panics with its log otherwise.
    pub fn wait_ready(&self, ix: usize) {
        let client = self.client(ix);
        let ready = wait_until(READY_TIMEOUT, || client.get("/readyz").0 == 200);
        assert!(ready, "node {} not ready in {READY_TIMEOUT:?}; log:\n{}", ix + 1, self.log(ix));
    }

    /// `kill -9` node `ix`.
    pub fn kill9(&mut self, ix: usize) {
        if let Some(mut child) = self.nodes[ix].child.take() {
            child.kill().expect("SIGKILL the node");
            child.wait().expect("reap the node");
        }
    }

    /// An HTTP client for node `ix`.
    pub fn client(&self, ix: usize) -> Client {
        Client::new(&self.nodes[ix].url)
    }

    /// Everything node `ix` logged so far (across restarts).
    pub fn log(&self, ix: usize) -> String {
        std::fs::read_to_string(&self.nodes[ix].log_path).unwrap_or_default()
    }

    /// True while node `ix`'s process runs.
    pub fn is_running(&mut self, ix: usize) -> bool {
        let node = &mut self.nodes[ix];
        node.child.as_mut().is_some_and(|c| c.try_wait().expect("poll child").is_none())
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Members as node `client` sees them: id → (status, partitions owned).
pub fn members(client: &Client) -> BTreeMap<u32, (String, u64)> {
    let (status, body) = client.get("/v1/cluster/members");
    if status != 200 {
        return BTreeMap::new();
    }
    let json: Value = serde_json::from_slice(&body).expect("members JSON");
    json["members"]
        .as_array()
        .expect("members array")
        .iter()
        .map(|m| {
            let id = m["id"].as_u64().expect("id") as u32;
            let status = m["status"].as_str().expect("status").to_string();
            (id, (status, m["partitions_owned"].as_u64().expect("partitions_owned")))
        })
        .collect()
}

/// Owner node of each partition of `topic`, as node `client` sees it.
pub fn owners(client: &Client, topic: &str) -> Vec<u32> {
    let (status, body) = client.get(&format!("/v1/topics/{topic}"));
    assert_eq!(status, 200, "get topic: {}", String::from_utf8_lossy(&body));
    let json: Value = serde_json::from_slice(&body).expect("topic JSON");
    json["partition_stats"]
        .as_array()
        .expect("partition_stats")
        .iter()
        .map(|p| {
            let owner = p["owner_node"].as_str().expect("owner_node is a string");
            owner.parse().expect("owner_node names a node id")
        })
        .collect()
}

/// Every payload (as text) of one partition, read through `client`; `Err(status)` if the
/// partition cannot be read right now (e.g. 503: its owner is down).
pub fn read_partition(client: &Client, topic: &str, partition: u32) -> Result<Vec<String>, u16> {
    let mut payloads = Vec::new();
    loop {
        let path = format!(
            "/v1/topics/{topic}/consume?partition={partition}&offset={}&max=1000",
            payloads.len()
        );
        let (status, body) = client.get(&path);
        match status {
            204 => return Ok(payloads),
            200 => {
                let page: Value = serde_json::from_slice(&body).expect("consume JSON");
                let page = page["messages"].as_array().expect("messages").clone();
                assert!(!page.is_empty(), "200 with no messages");
                for m in page {
                    assert_eq!(m["offset"].as_u64(), Some(payloads.len() as u64), "dense offsets");
                    payloads.push(m["payload"].as_str().expect("text payload").to_string());
                }
            }
            other => return Err(other),
        }
    }
}

/// How many times each payload appears over `partitions` (those that could be read), and which
/// partitions could not be read.
pub fn read_counts(
    client: &Client,
    topic: &str,
    partitions: impl IntoIterator<Item = u32>,
) -> (BTreeMap<String, u32>, BTreeSet<u32>) {
    let mut counts = BTreeMap::new();
    let mut unreadable = BTreeSet::new();
    for partition in partitions {
        match read_partition(client, topic, partition) {
            Ok(payloads) => {
                for payload in payloads {
                    *counts.entry(payload).or_insert(0) += 1;
                }
            }
            Err(_) => {
                unreadable.insert(partition);
            }
        }
    }
    (counts, unreadable)
}

/// A port that was free a moment ago.
pub fn free_tcp_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// A UDP port that was free a moment ago.
pub fn free_udp_port() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind an ephemeral UDP port");
    socket.local_addr().expect("local addr").port()
}

/// Waits up to `timeout` (polling every 20 ms); returns how long it took, or `None`.
pub fn time_until(timeout: Duration, check: impl FnMut() -> bool) -> Option<Duration> {
    let started = std::time::Instant::now();
    wait_until(timeout, check).then(|| started.elapsed())
}
