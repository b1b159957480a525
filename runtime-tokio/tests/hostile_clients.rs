//! The HTTP server against hostile clients (runtime-tokio/src/http_server/): oversized heads get
//! 431, heads and bodies that trickle are cut off, connections beyond the cap and bodies beyond
//! the in-flight byte budget get a 503 with `Retry-After`, and through all of it the node stays
//! up and another client's produces are answered 202. Each test starts its own node with small
//! bounds; every wait has a generous deadline.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{REQUEST_TIMEOUT, TestNode, data_dir, wait_until};

/// How long a test waits for the node to act on a bound (cut a connection, free a slot).
const ACT_TIMEOUT: Duration = Duration::from_secs(30);

fn host(node: &TestNode) -> String {
    node.url.trim_start_matches("http://").to_string()
}

fn connect(node: &TestNode) -> TcpStream {
    let stream = TcpStream::connect(host(node)).expect("connect to the node");
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).expect("read timeout");
    stream
}

/// Reads until the peer closes (or the read timeout); returns what arrived.
fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response head (and the rest of what is there until `\r\n\r\n`); the status code.
fn read_status(stream: &mut TcpStream) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

/// Whether the server has closed `stream` (a read sees EOF or a reset, not "would block").
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 1024];
    let closed = loop {
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue, // An error answer before the close: read past it.
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    stream.set_nonblocking(false).expect("blocking");
    closed
}

fn produce_ok(node: &TestNode, topic: &str) -> bool {
    node.client().post(&format!("/v1/topics/{topic}/produce"), b"still here").0 == 202
}

#[test]
fn an_oversized_request_head_is_answered_431() {
    let (_tmp, data) = data_dir();
    let node = TestNode::start_with(&data, &["--max-header-bytes", "8192"]);
    let mut stream = connect(&node);
    let filler = "a".repeat(12 * 1024);
    let request = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: {filler}\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send the head");
    let answer = String::from_utf8_lossy(&read_to_close(&mut stream)).to_string();
    assert!(answer.starts_with("HTTP/1.1 431"), "431 expected, got {answer:?}");
    // A head under the bound is served.
    let mut stream = connect(&node);
    let filler = "a".repeat(4 * 1024);
    let request = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: {filler}\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send the head");
    assert_eq!(read_status(&mut stream).0, 200);
}

/// Slow-loris: hundreds of connections that send half a request head and stop. The node keeps
/// answering another client, and closes them once the header timeout passes.
#[test]
fn half_sent_heads_are_cut_off_while_others_are_served() {
    const LORIS: usize = 500;
    let (_tmp, data) = data_dir();
    let node = TestNode::start_with(&data, &["--header-timeout", "3s"]);
    node.client().create_topic("t", 1);
    let mut loris: Vec<TcpStream> = (0..LORIS)
        .map(|_| {
            let mut stream = connect(&node);
            stream.write_all(b"POST /v1/topics/t/produce HTTP/1.1\r\nHost: x\r\n").expect("send");
            stream
        })
        .collect();
    let client = node.client();
    for _ in 0..20 {
        let (status, body) = client.post("/v1/topics/t/produce", b"m");
        assert_eq!(status, 202, "produce beside {LORIS} slow heads: {body:?}");
    }
    let all_closed = wait_until(ACT_TIMEOUT, || {
        loris.retain_mut(|stream| !closed_by_server(stream));
        loris.is_empty()
    });
    assert!(all_closed, "{} of {LORIS} slow heads still open", loris.len());
    assert!(produce_ok(&node, "t"));
}

/// A keep-alive connection may sit idle past the header timeout; it is closed once the idle
/// timeout passes.
#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout_not_the_header_timeout() {
    let (_tmp, data) = data_dir();
    let flags = ["--header-timeout", "1s", "--idle-timeout", "4s"];
    let node = TestNode::start_with(&data, &flags);
    let mut stream = connect(&node);
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let (status, head) = read_status(&mut stream);
    assert_eq!(status, 200, "{head}");
    read_exact_body(&mut stream, &head);
    let idle_since = Instant::now();
    assert!(wait_until(ACT_TIMEOUT, || closed_by_server(&mut stream)), "never closed");
    let idle = idle_since.elapsed();
    assert!(idle >= Duration::from_secs(3), "closed after {idle:?}, before the idle timeout");
}

/// A body that trickles is answered 408 once the body timeout passes.
#[test]
fn a_trickling_body_is_answered_408() {
    let (_tmp, data) = data_dir();
    let node = TestNode::start_with(&data, &["--body-timeout", "2s"]);
    node.client().create_topic("t", 1);
    let mut stream = connect(&node);
    let head = "POST /v1/topics/t/produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
    stream.write_all(head.as_bytes()).expect("send the head");
    stream.write_all(b"0123456789").expect("send a tenth of the body");
    let started = Instant::now();
    let (status, head) = read_status(&mut stream);
    assert_eq!(status, 408, "{head}");
    assert!(started.elapsed() >= Duration::from_secs(1), "cut off before the timeout");
    assert!(produce_ok(&node, "t"));
}

/// Beyond `--max-connections`, a new connection is answered 503 with `Retry-After` and a JSON
/// error, and closed; once connections close, new ones are served again.
#[test]
fn connections_beyond_the_cap_are_refused_with_503() {
    const CAP: usize = 8;
    let (_tmp, data) = data_dir();
    let node = TestNode::start_with(&data, &["--max-connections", "8", "--header-timeout", "60s"]);
    let mut open = Vec::new();
    let refusal = loop {
        assert!(open.len() <= CAP, "{} connections served past a cap of {CAP}", open.len());
        let mut stream = connect(&node);
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        let (status, head) = read_status(&mut stream);
        if status != 200 {
            let mut body = String::new();
            let _ = stream.read_to_string(&mut body);
            break (status, head, body, open.len());
        }
        read_exact_body(&mut stream, &head);
        open.push(stream);
    };
    let (status, head, body, served) = refusal;
    assert_eq!(status, 503, "{head}");
    assert!(served >= CAP - 1, "refused after only {served} connections");
    assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert!(json["error"].as_str().is_some_and(|e| e.contains("too many connections")), "{body}");
    drop(open);
    let served_again = wait_until(ACT_TIMEOUT, || node.client().get("/healthz").0 == 200);
    assert!(served_again, "not served after the connections closed; log:\n{}", node.log());
    assert!(node.log().contains("refusing connections"), "the refusal is logged");
}

fn read_exact_body(stream: &mut TcpStream, head: &str) {
    let length = common::content_length(head);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).expect("read the body");
}

/// A batch body of about `bytes` (1,000 messages).
fn batch_body(bytes: usize) -> Vec<u8> {
    let payload = "x".repeat(bytes / 1000 - 20);
    let messages: Vec<String> =
        (0..1000).map(|_| format!("{{\"payload\":\"{payload}\"}}")).collect();
    format!("{{\"messages\":[{}]}}", messages.join(",")).into_bytes()
}

/// POSTs `body` to `path` on `host`, writing from a second thread while this one reads the
/// answer (a server that answers before it reads the body may close on a client still writing).
fn post_raw(host: &str, path: &str, body: Vec<u8>) -> (u16, String) {
    let mut stream = TcpStream::connect(host).expect("connect to the node");
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).expect("read timeout");
    let mut writer = stream.try_clone().expect("clone the socket");
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(&body));
    });
    let answer = read_status(&mut stream);
    drop(stream);
    let _ = sender.join();
    answer
}

/// A flood of 15 MiB batches against a 40 MiB in-flight budget, two of which are held by
/// bodies that never finish: the flood is answered 503 with `Retry-After`, small produces are
/// still 202, and once the holders go, a large batch fits again.
#[test]
fn a_flood_of_large_bodies_is_refused_beyond_the_byte_budget() {
    let (_tmp, data) = data_dir();
    let budget = (40u64 << 20).to_string();
    let node = TestNode::start_with(&data, &["--max-inflight-bytes", &budget]);
    node.client().create_topic("t", 1);
    let declared = 16 << 20;
    let holders: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = connect(&node);
            let head = format!(
                "POST /v1/topics/t/produce/batch HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n{{"
            );
            stream.write_all(head.as_bytes()).expect("send the head");
            stream
        })
        .collect();
    let body = batch_body(15 << 20);
    let flood: Vec<_> = (0..4)
        .map(|_| {
            let (host, body) = (host(&node), body.clone());
            std::thread::spawn(move || post_raw(&host, "/v1/topics/t/produce/batch", body))
        })
        .collect();
    let answers: Vec<(u16, String)> = flood.into_iter().map(|t| t.join().expect("flood")).collect();
    for (status, head) in &answers {
        assert_eq!(*status, 503, "{head}");
        assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    }
    assert!(produce_ok(&node, "t"), "a small produce fits beside the held budget");
    drop(holders);
    let fits = wait_until(ACT_TIMEOUT, || {
        post_raw(&host(&node), "/v1/topics/t/produce/batch", body.clone()).0 == 202
    });
    assert!(fits, "a large batch never fitted once the holders left; log:\n{}", node.log());
}

/// A produce quota (`--produce-quota`, 250 kB/s here; access control off, so every client pays
/// into one ledger): a 1.5 MB batch (6 s worth) passes and spends it for 5 s, the node's answer to the next says
/// so (429, `Retry-After`), the produces after that are refused before their bodies are read
/// (the HTTP layer's gate), and once the quota is paid off a produce is 202 again.
#[test]
fn past_the_produce_quota_batches_are_answered_429_with_retry_after() {
    let (_tmp, data) = data_dir();
    let node = TestNode::start_with(&data, &["--produce-quota", "250000"]);
    node.client().create_topic("t", 1);
    let body = batch_body(1_500_000);
    let path = "/v1/topics/t/produce/batch";
    assert_eq!(post_raw(&host(&node), path, body.clone()).0, 202, "the first is always taken");
    let (status, head) = post_raw(&host(&node), path, body.clone());
    assert_eq!(status, 429, "{head}");
    let retry_after: u64 = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after: ").map(str::to_string))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {head}"));
    assert!((1..=5).contains(&retry_after), "at most 5 s owed, rounded up: {head}");
    let (status, _) = node.client().post("/v1/topics/t/produce", b"small");
    assert_eq!(status, 429, "the small produce pays into the same ledger");
    let metrics = node.client().metrics();
    let at_gate = metrics["narad_produce_requests_throttled_early_total"];
    assert!(at_gate >= 1.0, "refused before their bodies were read: {at_gate}");
    let paid_off = wait_until(ACT_TIMEOUT, || produce_ok(&node, "t"));
    assert!(paid_off, "the quota never let a produce through again; log:\n{}", node.log());
    assert_eq!(node.client().metrics()["narad_records_accepted_total"], 1_001.0);
}
