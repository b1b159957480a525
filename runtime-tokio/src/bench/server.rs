//! What the load generator asks of the node besides the load itself: the topic (created if
//! missing), `/metrics` counters before and after the measured window, and the server process's
//! resident memory and CPU time from `/proc`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context, bail};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use super::conn::Conn;

/// Where the node listens, as the load generator addresses it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    /// `host:port`, for the `Host` header.
    pub host: String,
    /// The header lines every request carries, each ending in CRLF: `Host`, and `Authorization`
    /// with `--user` (encoded once, here).
    pub headers: String,
    /// For an https:// URL: the TLS client setup.
    pub tls: Option<Tls>,
}

/// How the bench's connections speak TLS.
#[derive(Clone)]
pub struct Tls {
    pub connector: tokio_rustls::TlsConnector,
    pub server_name: rustls_pki_types::ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The endpoint of `--url` (`http://` or `https://host:port[/]`), `--ca` and `--user`.
    pub fn new(target: &crate::cli::Target) -> anyhow::Result<Endpoint> {
        let mut endpoint = Endpoint::parse(&target.url)?;
        if let Some(authorization) = target.authorization() {
            endpoint.headers.push_str(&format!("Authorization: {authorization}\r\n"));
        }
        if endpoint.tls.is_some() {
            endpoint.tls = Some(tls(&endpoint.host, target.ca_certs()?)?);
        }
        Ok(endpoint)
    }

    /// Parses `http://host:port[/]` (or https://, whose TLS `new` sets up).
    pub fn parse(url: &str) -> anyhow::Result<Endpoint> {
        let (rest, https) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => bail!("only http:// and https:// URLs are supported, got {url}"),
        };
        let host = rest.split('/').next().unwrap_or_default().to_string();
        let addr = host
            .to_socket_addrs()
            .with_context(|| format!("resolving {host}"))?
            .next()
            .with_context(|| format!("{host} resolves to no address"))?;
        let headers = format!("Host: {host}\r\n");
        let tls = https.then(|| tls(&host, None)).transpose()?;
        Ok(Endpoint { addr, host, headers, tls })
    }

    /// A complete request with no body.
    pub fn get(&self, path: &str) -> Vec<u8> {
        let mut request = Vec::with_capacity(64 + path.len());
        write!(request, "GET {path} HTTP/1.1\r\n{}\r\n", self.headers)
            .expect("invariant: writing to a Vec cannot fail");
        request
    }

    /// A complete JSON POST.
    pub fn post_json(&self, path: &str, body: &[u8]) -> Vec<u8> {
        let mut request = Vec::with_capacity(128 + path.len() + body.len());
        write!(
            request,
            "POST {path} HTTP/1.1\r\n{}Content-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            self.headers,
            body.len()
        )
        .expect("invariant: writing to a Vec cannot fail");
        request.extend_from_slice(body);
        request
    }
}

/// Percent-encodes a path segment (a topic name).
pub fn segment(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

/// The topic as found (or created): its partition count and each partition's high watermark.
pub struct TopicState {
    pub partitions: u32,
    pub high_watermarks: Vec<u64>,
}

/// The TLS client of an https:// endpoint: the `--ca` certificates as roots (the public roots
/// without it), TLS 1.2 and 1.3, ALPN `http/1.1`, the URL's host as the server name.
fn tls(
    host: &str,
    ca: Option<Vec<rustls_pki_types::CertificateDer<'static>>>,
) -> anyhow::Result<Tls> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(certs) => {
            for cert in certs {
                roots.add(cert).context("--ca: a certificate rustls cannot use as a root")?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = host.rsplit_once(':').map_or(host, |(name, _port)| name);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let server_name = rustls_pki_types::ServerName::try_from(name.to_string())
        .with_context(|| format!("{name} is not a TLS server name"))?;
    Ok(Tls {
        connector: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
        server_name,
    })
}

/// Fetches the topic, creating it with `partitions` partitions if it does not exist.
pub async fn ensure_topic(
    endpoint: &Endpoint,
    topic: &str,
    partitions: u32,
) -> anyhow::Result<TopicState> {
    let mut conn = Conn::connect(endpoint)
        .await
        .with_context(|| format!("connecting to {}", endpoint.host))?;
    let path = format!("/v1/topics/{}", segment(topic));
    let (status, body) = conn.round_trip(&endpoint.get(&path)).await?;
    match status {
        200 => return parse_topic(conn.body(body)),
        404 => {}
        other => bail!("GET {path}: {other}: {}", text(conn.body(body))),
    }
    let create = serde_json::json!({ "name": topic, "partitions": partitions }).to_string();
    let request = endpoint.post_json("/v1/topics", create.as_bytes());
    let (status, body) = conn.round_trip(&request).await?;
    if status != 201 && status != 409 {
        bail!("creating topic {topic}: {status}: {}", text(conn.body(body)));
    }
    let (status, body) = conn.round_trip(&endpoint.get(&path)).await?;
    if status != 200 {
        bail!("GET {path}: {status}: {}", text(conn.body(body)));
    }
    parse_topic(conn.body(body))
}

fn parse_topic(body: &[u8]) -> anyhow::Result<TopicState> {
    let value: serde_json::Value = serde_json::from_slice(body).context("topic JSON")?;
    let partitions = value["partitions"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .context("topic without partitions")?;
    let mut high_watermarks = vec![0; partitions as usize];
    for stats in value["partition_stats"].as_array().into_iter().flatten() {
        let index = stats["index"].as_u64().unwrap_or(u64::MAX);
        if let Some(slot) = usize::try_from(index).ok().and_then(|i| high_watermarks.get_mut(i)) {
            *slot = stats["high_watermark"].as_u64().unwrap_or(0);
        }
    }
    Ok(TopicState { partitions, high_watermarks })
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

/// The node's unlabelled metrics, by name.
pub type Metrics = BTreeMap<String, f64>;

/// Reads `/metrics` (node-wide series only).
/// The admin connection sits idle between scrapes, longer than a server may keep an idle
/// keep-alive connection: one that was closed is reopened once.
pub async fn scrape(conn: &mut Conn, endpoint: &Endpoint) -> anyhow::Result<Metrics> {
    let request = endpoint.get("/metrics");
    let (status, body) = match conn.round_trip(&request).await {
        Ok(answer) => answer,
        Err(_) => {
            *conn = Conn::connect(endpoint).await?;
            conn.round_trip(&request).await?
        }
    };
    if status != 200 {
        bail!("GET /metrics: {status}");
    }
    let text = std::str::from_utf8(conn.body(body)).context("metrics are not UTF-8")?;
    Ok(text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.contains('{'))
        .filter_map(|line| {
            let (name, value) = line.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect())
}

/// `after - before` of one counter (0 when absent).
pub fn delta(before: &Metrics, after: &Metrics, name: &str) -> f64 {
    after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
}

/// The server process: the given pid, or the one `narad serve` listening on `port` found in
/// `/proc` (`None` when it cannot be told apart, e.g. the node runs elsewhere).
pub fn find_server(explicit: Option<u32>, port: u16) -> Option<u32> {
    if explicit.is_some() {
        return explicit;
    }
    let mut candidates = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_narad = args.first().is_some_and(|a| a.ends_with(b"narad"));
        if is_narad && args.iter().any(|a| *a == b"serve") {
            let mentions_port = args.iter().any(|a| a.ends_with(format!(":{port}").as_bytes()));
            candidates.push((pid, mentions_port));
        }
    }
    match candidates.as_slice() {
        [(pid, _)] => Some(*pid),
        many => {
            let matching: Vec<u32> = many.iter().filter(|c| c.1).map(|c| c.0).collect();
            (matching.len() == 1).then(|| matching[0])
        }
    }
}

/// Resident set size of `pid` in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU time (user + system) of a process in seconds; `None` for this process means "self".
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces) start at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    const CLOCK_TICKS_PER_SEC: f64 = 100.0; // USER_HZ on every Linux ABI we run on.
    Some((utime + stime) / CLOCK_TICKS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("http://127.0.0.1:7942/").expect("valid");
        assert_eq!(e.host, "127.0.0.1:7942");
        assert_eq!(e.addr.port(), 7942);
        assert!(Endpoint::parse("ftp://x:1").is_err());
        let target = crate::cli::Target {
            url: "https://127.0.0.1:7942".to_string(),
            ca: None,
            user: Some("Aladdin:open sesame".to_string()),
        };
        let e = Endpoint::new(&target).expect("valid");
        assert!(e.tls.is_some());
        assert_eq!(
            e.headers,
            "Host: 127.0.0.1:7942\r\nAuthorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n"
        );
    }

    #[test]
    fn own_cpu_time_reads() {
        assert!(cpu_seconds(None).is_some());
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
    }
}
