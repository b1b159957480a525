//! Shared harness for the integration tests: runs the real `narad` binary on 127.0.0.1 with a
//! fresh port and a temporary data directory, talks to it over HTTP, and makes sure no child
//! process outlives its test (killed on drop). Every wait is bounded.
#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// The longest any single HTTP request may take in a test.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a node may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `narad serve` child process.
pub struct TestNode {
    child: Option<Child>,
    pub url: String,
    pub data_dir: PathBuf,
    log_path: PathBuf,
}

impl TestNode {
    /// Starts a node on `data_dir` and waits until `/readyz` answers 200.
    pub fn start(data_dir: &Path) -> TestNode {
        let node = TestNode::spawn(data_dir);
        node.wait_ready();
        node
    }

    /// Starts a node without waiting for it.
    pub fn spawn(data_dir: &Path) -> TestNode {
        TestNode::spawn_with(data_dir, &[])
    }

    /// Starts a node with extra `narad serve` flags and waits until it is ready.
    pub fn start_with(data_dir: &Path, flags: &[&str]) -> TestNode {
        let node = TestNode::spawn_with(data_dir, flags);
        node.wait_ready();
        node
    }

    /// Starts a node with extra `narad serve` flags, without waiting for it.
    pub fn spawn_with(data_dir: &Path, flags: &[&str]) -> TestNode {
        let port = free_port();
        let log_path = data_dir.with_extension(format!("{port}.log"));
        let log = File::create(&log_path).expect("create node log");
        let child = Command::new(env!("CARGO_BIN_EXE_narad"))
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data_dir)
            .args(flags)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn narad");
        TestNode {
            child: Some(child),
            url: format!("http://127.0.0.1:{port}"),
            data_dir: data_dir.to_path_buf(),
            log_path,
        }
    }

    /// Polls `/readyz` until 200; panics with the node's log otherwise.
    pub fn wait_ready(&self) {
        let client = Client::new(&self.url);
        let ready = wait_until(READY_TIMEOUT, || client.get("/readyz").0 == 200);
        assert!(ready, "node not ready within {READY_TIMEOUT:?}; log:\n{}", self.log());
    }

    /// An HTTP client for this node.
    pub fn client(&self) -> Client {
        Client::new(&self.url)
    }

    /// `kill -9`: the node gets no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the node");
            child.wait().expect("reap the node");
        }
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn sigterm(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("node is running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill -TERM");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("poll the node") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("node did not exit within {timeout:?} of SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for a process that should exit on its own; `None` if it did not.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut().expect("node is running");
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("poll the node") {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The node's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("node is running").id()
    }

    /// Everything the node logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A blocking HTTP client with bounded timeouts. Transport errors come back as status 0.
#[derive(Clone)]
pub struct Client {
    base: String,
    agent: ureq::Agent,
    /// HTTP Basic credentials sent with every request (`with_credentials`).
    authorization: Option<String>,
}

/// A blocking HTTP agent for tests: non-2xx answers are answers, bounded, no proxy.
pub fn test_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .proxy(None)
        .build()
        .into()
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client { base: base.to_string(), agent: test_agent(), authorization: None }
    }

    /// This client, sending `name` and `password` with every request (and saying it is a
    /// program, for the server's browser guard).
    pub fn with_credentials(mut self, name: &str, password: &str) -> Client {
        let encoded = STANDARD.encode(format!("{name}:{password}"));
        self.authorization = Some(format!("Basic {encoded}"));
        self
    }

    fn authed<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.authorization {
            Some(value) => request.header("authorization", value).header("x-narad-client", "test"),
            None => request,
        }
    }

    pub fn get(&self, path: &str) -> (u16, Vec<u8>) {
        answer(self.authed(self.agent.get(format!("{}{path}", self.base))).call())
    }

    pub fn delete(&self, path: &str) -> (u16, Vec<u8>) {
        answer(self.authed(self.agent.delete(format!("{}{path}", self.base))).call())
    }

    pub fn post(&self, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        answer(self.authed(self.agent.post(format!("{}{path}", self.base))).send(body))
    }

    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Vec<u8>) {
        self.post(path, body.to_string().as_bytes())
    }

    pub fn patch(&self, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        answer(self.authed(self.agent.patch(format!("{}{path}", self.base))).send(body))
    }

    /// Creates a topic; panics unless 201.
    pub fn create_topic(&self, name: &str, partitions: u32) {
        let body = serde_json::json!({ "name": name, "partitions": partitions });
        let (status, body) = self.post_json("/v1/topics", &body);
        assert_eq!(status, 201, "create topic: {}", String::from_utf8_lossy(&body));
    }

    /// `/metrics` as name (with labels) → value.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "metrics");
        String::from_utf8(body)
            .expect("metrics are UTF-8")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(name, value)| (name.to_string(), value.parse().expect("numeric metric")))
            .collect()
    }

    /// One metric's value (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics().get(name).copied().unwrap_or(0.0)
    }

    /// Every committed message of one partition, by offset from 0.
    pub fn read_partition(&self, topic: &str, partition: u32) -> Vec<Value> {
        let mut messages = Vec::new();
        loop {
            let path = format!(
                "/v1/topics/{topic}/consume?partition={partition}&offset={}&max=1000",
                messages.len()
            );
            let (status, body) = self.get(&path);
            match status {
                204 => return messages,
                200 => {
                    let page: Value = serde_json::from_slice(&body).expect("consume JSON");
                    let page = page["messages"].as_array().expect("messages array").clone();
                    assert!(!page.is_empty(), "200 with no messages");
                    for m in page {
                        assert_eq!(m["offset"].as_u64(), Some(messages.len() as u64), "dense");
                        messages.push(m);
                    }
                }
                other => panic!("consume answered {other}: {}", String::from_utf8_lossy(&body)),
            }
        }
    }
}

fn answer(result: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Vec<u8>) {
    match result {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .with_config()
                .limit(256 * 1024 * 1024)
                .read_to_vec()
                .unwrap_or_default();
            (status, body)
        }
        Err(_) => (0, Vec::new()),
    }
}

/// The `Content-Length` a response head declares (0 when it declares none).
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// The exact bytes a consumed message object carries (undoing the JSON embedding).
pub fn payload_bytes(message: &Value) -> Vec<u8> {
    let payload = &message["payload"];
    match (message.get("payload_encoding"), payload) {
        (Some(encoding), Value::String(text)) if encoding == "base64" => {
            STANDARD.decode(text).expect("base64 payload")
        }
        (Some(encoding), json) => {
            assert_eq!(encoding, "json", "payload_encoding is base64 or json");
            serde_json::to_vec(json).expect("JSON payload")
        }
        (None, Value::String(text)) => text.clone().into_bytes(),
        (None, json) => serde_json::to_vec(json).expect("JSON payload"),
    }
}

/// A temporary directory for one test's data; the node's data dir is `<tmp>/data`.
pub fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("data");
    (tmp, data)
}

/// Total bytes of the files directly in `dir` (0 if it does not exist).
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Sum of the high watermarks of a topic's partitions (records visible to consumers).
pub fn visible_records(client: &Client, topic: &str) -> u64 {
    let (status, body) = client.get(&format!("/v1/topics/{topic}"));
    if status != 200 {
        return 0;
    }
    let topic: Value = serde_json::from_slice(&body).expect("topic JSON");
    topic["partition_stats"]
        .as_array()
        .expect("partition_stats")
        .iter()
        .map(|p| p["high_watermark"].as_u64().expect("high_watermark"))
        .sum()
}

/// Waits (bounded) until the node's dispatch backlog is empty and at least `expected` records
/// of `topic` are visible; false on timeout.
pub fn wait_drained(client: &Client, topic: &str, expected: u64, timeout: Duration) -> bool {
    let (mut backlog, mut visible) = (0.0, 0);
    let drained = wait_until(timeout, || {
        backlog = client.metric("narad_dispatch_backlog");
        visible = visible_records(client, topic);
        backlog == 0.0 && visible >= expected
    });
    if !drained {
        eprintln!("not drained: backlog {backlog}, {visible} of {expected} records visible");
    }
    drained
}

/// A bare keep-alive HTTP/1.1 connection for load tests: a pre-built request is one `write`,
/// so a debug-built test client stays far cheaper than the server it loads.
pub struct RawConn {
    stream: std::net::TcpStream,
    host: String,
}

impl RawConn {
    pub fn connect(url: &str) -> RawConn {
        let host = url.trim_start_matches("http://").to_string();
        let stream = std::net::TcpStream::connect(&host).expect("connect to the node");
        stream.set_nodelay(true).expect("nodelay");
        stream.set_read_timeout(Some(REQUEST_TIMEOUT)).expect("read timeout");
        RawConn { stream, host }
    }

    /// POSTs `body` to `path`; returns the status (the response body is read and dropped).
    pub fn post(&mut self, path: &str, body: &[u8]) -> u16 {
        use std::io::Write;
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.stream.write_all(&request).expect("send request");
        self.read_response()
    }

    fn read_response(&mut self) -> u16 {
        use std::io::Read;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = self.stream.read(&mut byte).expect("read response head");
            assert_eq!(n, 1, "connection closed mid-response");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).expect("ASCII head");
        let status = head[9..12].parse().expect("status code");
        let length = content_length(&head);
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).expect("read response body");
        status
    }
}
