//! TLS on the client API against a real node (`narad serve --tls-cert --tls-key`): a produce and
//! consume round trip through the `narad` CLI with `--ca`, and through a bare rustls client; a
//! SIGHUP swaps the certificate for new handshakes while an open connection keeps working, and a
//! bad file on reload keeps the previous certificate; a client that offers `h2` by ALPN speaks
//! HTTP/2 over TLS. The certificates are self-signed, made here
//! by rcgen.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::{READY_TIMEOUT, REQUEST_TIMEOUT, TestNode, data_dir, wait_until};
use rustls::pki_types::{CertificateDer, ServerName};

/// PEM text of one DER item.
fn pem(label: &str, der: &[u8]) -> String {
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> =
        text.as_bytes().chunks(64).map(|l| std::str::from_utf8(l).expect("ASCII")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// Writes a fresh self-signed certificate for 127.0.0.1 to `cert` and its key to `key`; returns
/// the certificate's DER.
fn write_cert(cert: &Path, key: &Path) -> CertificateDer<'static> {
    let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let made = rcgen::generate_simple_self_signed(names).expect("a self-signed certificate");
    std::fs::write(cert, pem("CERTIFICATE", made.cert.der())).expect("write the certificate");
    std::fs::write(key, pem("PRIVATE KEY", &made.signing_key.serialize_der()))
        .expect("write the key");
    made.cert.der().clone()
}

/// A node serving TLS with the certificate in `cert` and `key` (long header timeout: a test
/// holds a connection idle across a reload).
fn start_tls(data: &Path, cert: &Path, key: &Path) -> (TestNode, String) {
    let (cert, key) = (cert.to_str().expect("UTF-8"), key.to_str().expect("UTF-8"));
    let flags = ["--tls-cert", cert, "--tls-key", key, "--header-timeout", "60s"];
    let node = TestNode::spawn_with(data, &flags);
    let url = node.url.replace("http://", "https://");
    (node, url)
}

/// A ureq agent trusting `ca`.
fn agent(ca: &CertificateDer<'static>) -> ureq::Agent {
    let roots = ureq::tls::RootCerts::Specific(Arc::new(vec![
        ureq::tls::Certificate::from_der(ca.as_ref()).to_owned(),
    ]));
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .build()
        .into()
}

fn wait_ready(node: &TestNode, url: &str, ca: &CertificateDer<'static>) {
    let agent = agent(ca);
    let ready = wait_until(READY_TIMEOUT, || {
        agent.get(format!("{url}/readyz")).call().is_ok_and(|r| r.status() == 200)
    });
    assert!(ready, "TLS node not ready; log:\n{}", node.log());
}

/// Runs the `narad` CLI; (success, stdout, stderr).
fn narad(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_narad"))
        .args(args)
        .env_remove("NARAD_URL")
        .output()
        .expect("run narad");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

/// A rustls client configuration trusting each of `cas` and offering one ALPN protocol.
fn client_config(cas: &[&CertificateDer<'static>], alpn: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add((*ca).clone()).expect("a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// A bare rustls client connection, kept open across requests.
struct TlsConn {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl TlsConn {
    /// Connects and completes the handshake, trusting each of `cas`.
    fn connect(url: &str, cas: &[&CertificateDer<'static>]) -> TlsConn {
        let config = client_config(cas, b"http/1.1");
        let name = ServerName::try_from("127.0.0.1").expect("a server name");
        let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a TLS client");
        let tcp = TcpStream::connect(url.trim_start_matches("https://")).expect("connect");
        tcp.set_read_timeout(Some(REQUEST_TIMEOUT)).expect("read timeout");
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).expect("TLS handshake");
        }
        TlsConn { stream }
    }

    /// The certificate the server presented.
    fn server_cert(&self) -> CertificateDer<'static> {
        self.stream.conn.peer_certificates().expect("a server certificate")[0].clone()
    }

    /// One request on this connection; (status, body).
    fn request(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes()).expect("send the head");
        self.stream.write_all(body).expect("send the body");
        self.stream.flush().expect("flush");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            self.stream.read_exact(&mut byte).expect("read the answer");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).expect("ASCII head");
        let length = common::content_length(&head);
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).expect("read the body");
        (head[9..12].parse().expect("a status"), String::from_utf8_lossy(&body).to_string())
    }
}

fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("node.crt"), dir.join("node.key"))
}

#[test]
fn produce_and_consume_over_tls_with_the_cli_and_a_rustls_client() {
    let (tmp, data) = data_dir();
    let (cert, key) = paths(tmp.path());
    let der = write_cert(&cert, &key);
    let (node, url) = start_tls(&data, &cert, &key);
    wait_ready(&node, &url, &der);
    assert!(node.log().contains("tls=\"on\"") || node.log().contains("tls=on"), "{}", node.log());
    let ca = cert.to_str().expect("UTF-8");
    let cli = |args: &[&str]| narad(&[args, &["--url", &url, "--ca", ca]].concat());
    let (ok, _, err) = cli(&["topic", "create", "t", "--partitions", "1"]);
    assert!(ok, "topic create over TLS: {err}");
    let (ok, _, err) = cli(&["produce", "t", "over-tls"]);
    assert!(ok, "produce over TLS: {err}");
    let mut conn = TlsConn::connect(&url, &[&der]);
    let (status, body) = conn.request("POST", "/v1/topics/t/produce", b"from-rustls");
    assert_eq!(status, 202, "{body}");
    // A 202 is durable; visible once dispatched to the partition (soon, not at once).
    let mut out = String::new();
    let both_visible = wait_until(READY_TIMEOUT, || {
        let (ok, stdout, err) =
            cli(&["consume", "t", "--partition", "0", "--offset", "0", "--max", "10"]);
        assert!(ok, "consume over TLS: {err}");
        out = stdout;
        out.contains("over-tls") && out.contains("from-rustls")
    });
    assert!(both_visible, "both records consumed over TLS: {out}");
    // The load generator speaks TLS too.
    let (ok, out, err) = cli(&[
        "bench",
        "--topic",
        "t",
        "--concurrency",
        "4",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--max-requests",
        "200",
        "--json",
    ]);
    assert!(ok, "bench over TLS: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("a JSON report");
    assert!(report["requests"].as_u64().is_some_and(|n| n > 0), "{report}");
    assert_eq!(report["errors"].as_u64(), Some(0), "{report}");
    // Without --ca the self-signed certificate is not trusted; plain HTTP gets no answer.
    let (ok, _, err) = narad(&["topic", "list", "--url", &url]);
    assert!(!ok, "an untrusted certificate must fail: {err}");
    let plain = node.client().get("/healthz").0;
    assert_ne!(plain, 200, "plain HTTP on the TLS port");
}

#[test]
fn sighup_swaps_the_certificate_and_open_connections_keep_theirs() {
    let (tmp, data) = data_dir();
    let (cert, key) = paths(tmp.path());
    let first = write_cert(&cert, &key);
    let (node, url) = start_tls(&data, &cert, &key);
    wait_ready(&node, &url, &first);
    let mut open = TlsConn::connect(&url, &[&first]);
    assert_eq!(open.server_cert(), first);
    assert_eq!(open.request("GET", "/healthz", b"").0, 200);

    let second = write_cert(&cert, &key);
    let presented = || TlsConn::connect(&url, &[&first, &second]).server_cert();
    let hup = || {
        let status = Command::new("kill").args(["-HUP", &node.pid().to_string()]).status();
        assert!(status.expect("run kill").success(), "kill -HUP");
    };
    hup();
    let swapped = wait_until(Duration::from_secs(30), || presented() == second);
    assert!(swapped, "new handshakes never got the new certificate; log:\n{}", node.log());
    assert_eq!(open.request("GET", "/healthz", b"").0, 200, "the open connection still works");

    // A bad file on reload is logged and the certificate in use kept.
    std::fs::write(&cert, "not a certificate").expect("write garbage");
    hup();
    let logged = wait_until(Duration::from_secs(30), || node.log().contains("TLS reload failed"));
    assert!(logged, "a failed reload is logged; log:\n{}", node.log());
    assert_eq!(presented(), second);
    assert_eq!(open.request("GET", "/healthz", b"").0, 200);
}

/// Connections that never start their TLS handshake are closed after the header timeout, and
/// the node keeps serving TLS beside them.
#[test]
fn silent_connections_are_cut_off_before_the_handshake() {
    let (tmp, data) = data_dir();
    let (cert, key) = paths(tmp.path());
    let der = write_cert(&cert, &key);
    let (c, k) = (cert.to_str().expect("UTF-8"), key.to_str().expect("UTF-8"));
    let node =
        TestNode::spawn_with(&data, &["--tls-cert", c, "--tls-key", k, "--header-timeout", "2s"]);
    let url = node.url.replace("http://", "https://");
    wait_ready(&node, &url, &der);
    let addr = url.trim_start_matches("https://");
    let mut silent: Vec<TcpStream> =
        (0..50).map(|_| TcpStream::connect(addr).expect("connect")).collect();
    assert_eq!(TlsConn::connect(&url, &[&der]).request("GET", "/healthz", b"").0, 200);
    let all_closed = wait_until(Duration::from_secs(30), || {
        silent.retain_mut(|stream| !closed_by_server(stream));
        silent.is_empty()
    });
    assert!(all_closed, "{} silent connections still open", silent.len());
}

/// Whether the server has closed `stream` (EOF or a reset, not "would block").
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

#[test]
fn a_client_offering_h2_by_alpn_gets_http2_over_tls() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let (tmp, data) = data_dir();
    let (cert, key) = paths(tmp.path());
    let der = write_cert(&cert, &key);
    let (node, url) = start_tls(&data, &cert, &key);
    wait_ready(&node, &url, &der);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (alpn, status) = runtime.block_on(async {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(&[&der], b"h2")));
        let tcp = tokio::net::TcpStream::connect(url.trim_start_matches("https://")).await.unwrap();
        let name = ServerName::try_from("127.0.0.1").expect("a server name");
        let tls = connector.connect(name, tcp).await.expect("a TLS handshake");
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .expect("an HTTP/2 handshake over TLS");
        tokio::spawn(conn);
        let uri = format!("{url}/healthz");
        let request = hyper::Request::get(uri).body(Empty::<bytes::Bytes>::new()).unwrap();
        let response = sender.send_request(request).await.expect("an answer");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.expect("a body").to_bytes();
        assert_eq!(&body[..], br#"{"status":"ok"}"#);
        (alpn, status)
    });
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "the server chose HTTP/2");
    assert_eq!(status, 200);
}
