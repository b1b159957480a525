//! HTTP/2 with prior knowledge (h2c) on a real node: many produces in flight on one connection
//! all answered 202 and all visible, HTTP/1.1 working beside it; an HTTP/2 connection with
//! nothing in hand is closed after `--idle-timeout`. (The body bounds are the same service for
//! both protocols: `hostile_clients.rs`.)

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{TestNode, data_dir, wait_drained};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

async fn connect(url: &str) -> (SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
    let addr = url.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("an HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    (sender, driver)
}

async fn send(sender: &mut SendRequest<Full<Bytes>>, path: &str, body: Vec<u8>) -> (u16, Bytes) {
    sender.ready().await.expect("the connection takes requests");
    let request = Request::post(path)
        .header("content-type", "application/octet-stream")
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("the body").to_bytes();
    (status, body)
}

#[test]
fn many_produces_in_flight_on_one_connection_all_land() {
    let (_dir, path) = data_dir();
    let node = TestNode::start(&path);
    let client = node.client();
    client.create_topic("h2", 3);
    const PRODUCES: usize = 500;
    let statuses = runtime().block_on(async {
        let (sender, _driver) = connect(&node.url).await;
        let mut tasks = Vec::new();
        for i in 0..PRODUCES {
            let mut sender = sender.clone();
            tasks.push(tokio::spawn(async move {
                send(&mut sender, "/v1/topics/h2/produce", format!("{{\"n\":{i}}}").into_bytes())
                    .await
                    .0
            }));
        }
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.expect("a produce task"));
        }
        statuses
    });
    assert!(statuses.iter().all(|s| *s == 202), "every produce answered 202: {statuses:?}");
    assert!(
        wait_drained(&client, "h2", PRODUCES as u64, Duration::from_secs(60)),
        "every acknowledged produce becomes visible"
    );
    let mut payloads: Vec<_> = (0..3)
        .flat_map(|p| client.read_partition("h2", p))
        .map(|m| m["payload"]["n"].as_u64().expect("a payload n"))
        .collect();
    payloads.sort_unstable();
    assert_eq!(payloads, (0..PRODUCES as u64).collect::<Vec<_>>());
    assert_eq!(client.get("/healthz").0, 200, "HTTP/1.1 beside it");
}

#[test]
fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let (_dir, path) = data_dir();
    let node = TestNode::start_with(&path, &["--idle-timeout", "2s"]);
    runtime().block_on(async {
        let (mut sender, driver) = connect(&node.url).await;
        let (status, _) = send(&mut sender, "/healthz", Vec::new()).await;
        assert_eq!(status, 405, "a POST to /healthz is refused, the stream answered");
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(60), driver)
            .await
            .expect("the server closes an idle connection")
            .expect("the connection task");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(1500), "not before the idle timeout: {waited:?}");
    });
}
