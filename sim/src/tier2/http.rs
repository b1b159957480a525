//! The tier-2 workload's HTTP client: a `ClientOp` (what the first tier hands a node
//! directly) becomes the request a real client sends to the v1 API, and the answer becomes the
//! `ClientReply` the workload and the checker already understand, so both tiers judge runs with
//! the same code. Each request uses a fresh connection (hyper over a turmoil TCP stream), HTTP/1.1
//! or HTTP/2 with prior knowledge (the node tells them apart by the preface) as the caller asks,
//! with HTTP Basic credentials when the caller has some (`access.rs`).

use std::net::SocketAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use narad_core::api::{PartitionNumbers, PartitionStats, QueueSettings, TopicInfo};
use narad_core::constants::TOPIC_PAGE_DEFAULT;
use narad_core::{ClientError, ClientOp, ClientReply, ConsumedRecord, TopicId};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use serde_json::value::RawValue;

use super::access::Basic;
use super::http_users;

/// How a request ended short of an answer.
#[derive(Debug)]
pub enum CallError {
    /// No connection: the request never reached the node (nothing changed).
    Refused(String),
    /// Sent, then the connection failed before a whole answer came back (ambiguous).
    Broken(String),
}

/// The request a real client sends for `op`.
pub struct HttpRequest {
    pub method: Method,
    pub path: String,
    pub body: Bytes,
}

/// How a request goes: the protocol, and the credentials it carries (if any).
#[derive(Clone, Copy, Debug)]
pub struct Via<'a> {
    pub protocol: Protocol,
    pub auth: Option<&'a Basic>,
}

impl<'a> Via<'a> {
    /// HTTP/1.1 with these credentials.
    pub fn http1(auth: Option<&'a Basic>) -> Via<'a> {
        Via { protocol: Protocol::Http1, auth }
    }
}

/// Connects to `addr` and sends `op`; `connected` runs once the connection is up (the request
/// is then in flight: an answer that never comes is ambiguous).
pub async fn call(
    addr: SocketAddr,
    op: &ClientOp,
    via: Via<'_>,
    connected: impl FnOnce(),
) -> Result<ClientReply, CallError> {
    let (status, body) = exchange(addr, request_of(op), via, connected).await?;
    Ok(reply_of(op, status, &body))
}

/// `GET path` on `addr`: the body of a 200 answer.
pub async fn get(
    addr: SocketAddr,
    path: &str,
    timeout: std::time::Duration,
    auth: Option<&Basic>,
) -> Option<Bytes> {
    let request = HttpRequest { method: Method::GET, path: path.to_string(), body: Bytes::new() };
    let answer = tokio::time::timeout(timeout, exchange(addr, request, Via::http1(auth), || {}));
    let answer = answer.await;
    match answer {
        Ok(Ok((200, body))) => Some(body),
        _ => None,
    }
}

/// Which HTTP a request is sent with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// HTTP/2 with prior knowledge (h2c).
    Http2,
}

/// Runs hyper's HTTP/2 client tasks on the host's local task set (turmoil's hosts are
/// single-threaded; nothing needs to be `Send`).
#[derive(Clone, Copy)]
struct LocalExec;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for LocalExec {
    fn execute(&self, future: F) {
        tokio::task::spawn_local(future);
    }
}

/// Sends `request` on a fresh connection of either protocol.
enum Sender {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

async fn handshake(stream: turmoil::net::TcpStream, protocol: Protocol) -> hyper::Result<Sender> {
    let io = TokioIo::new(stream);
    Ok(match protocol {
        Protocol::Http1 => {
            let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
            tokio::task::spawn_local(async move {
                let _ = connection.await; // ends with the exchange (or the connection's failure)
            });
            Sender::Http1(sender)
        }
        Protocol::Http2 => {
            let (sender, connection) = hyper::client::conn::http2::handshake(LocalExec, io).await?;
            tokio::task::spawn_local(async move {
                let _ = connection.await;
            });
            Sender::Http2(sender)
        }
    })
}

/// One request on a fresh connection: the answer's status and body.
async fn exchange(
    addr: SocketAddr,
    request: HttpRequest,
    via: Via<'_>,
    connected: impl FnOnce(),
) -> Result<(u16, Bytes), CallError> {
    let stream = turmoil::net::TcpStream::connect(addr)
        .await
        .map_err(|e| CallError::Refused(e.to_string()))?;
    connected();
    let mut sender =
        handshake(stream, via.protocol).await.map_err(|e| CallError::Broken(e.to_string()))?;
    let mut http = Request::builder()
        .method(request.method)
        .uri(request.path)
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(auth) = via.auth {
        http = http.header(hyper::header::AUTHORIZATION, auth.header());
    }
    let http = http.body(Full::new(request.body)).map_err(|e| CallError::Broken(e.to_string()))?;
    let response = match &mut sender {
        Sender::Http1(sender) => sender.send_request(http).await,
        Sender::Http2(sender) => {
            // HTTP/2 names the authority in the URI, not in a Host header.
            let mut http = http;
            http.headers_mut().remove(hyper::header::HOST);
            *http.uri_mut() = format!("http://{addr}{}", http.uri())
                .parse()
                .map_err(|e: hyper::http::uri::InvalidUri| CallError::Broken(e.to_string()))?;
            sender.send_request(http).await
        }
    };
    let response = response.map_err(|e| CallError::Broken(e.to_string()))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| CallError::Broken(e.to_string()))?
        .to_bytes();
    Ok((status, body))
}

pub(super) fn encoded(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

fn json_body(value: &Value) -> Bytes {
    Bytes::from(value.to_string())
}

/// The v1 request for `op`.
pub fn request_of(op: &ClientOp) -> HttpRequest {
    let request = |method, path: String, body| HttpRequest { method, path, body };
    match op {
        ClientOp::CreateTopic { .. } => {
            request(Method::POST, "/v1/topics".to_string(), json_body(&create_body(op)))
        }
        ClientOp::DeleteTopic { name } => {
            request(Method::DELETE, format!("/v1/topics/{}", encoded(name)), Bytes::new())
        }
        ClientOp::UpdateTopic { name, change } => {
            let mut body = serde_json::json!({});
            if let Some(ms) = change.retention_ms {
                body["retention_ms"] = ms.into();
            }
            if let Some(bytes) = change.retention_bytes {
                body["retention_bytes"] = bytes.map_or(Value::Null, Value::from);
            }
            request(Method::PATCH, format!("/v1/topics/{}", encoded(name)), json_body(&body))
        }
        ClientOp::ListTopics { after, limit } => {
            // The default page size goes without `limit`, so that default is exercised too.
            let mut query = Vec::new();
            if *limit != TOPIC_PAGE_DEFAULT {
                query.push(format!("limit={limit}"));
            }
            if let Some(after) = after {
                query.push(format!("page_token={}", encoded(after)));
            }
            let query =
                if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
            request(Method::GET, format!("/v1/topics{query}"), Bytes::new())
        }
        ClientOp::GetTopic { name, partition } => {
            let query = partition.map_or_else(String::new, |p| format!("?partition={p}"));
            request(Method::GET, format!("/v1/topics/{}{query}", encoded(name)), Bytes::new())
        }
        ClientOp::Produce { .. } => produce_request(op),
        ClientOp::Consume { topic, partition, offset, max, wait_ms } => {
            let mut path = format!(
                "/v1/topics/{}/consume?partition={partition}&offset={offset}&max={max}",
                encoded(topic)
            );
            if *wait_ms > 0 {
                path.push_str(&format!("&wait={wait_ms}ms"));
            }
            request(Method::GET, path, Bytes::new())
        }
        ClientOp::Members => request(Method::GET, "/v1/cluster/members".to_string(), Bytes::new()),
        ClientOp::Receive { .. } | ClientOp::Settle { .. } => {
            unreachable!("tier-2 seeds run no queue workers")
        }
        ClientOp::CreateUser { .. }
        | ClientOp::ListUsers
        | ClientOp::GetUser { .. }
        | ClientOp::DeleteUser { .. }
        | ClientOp::SetGrants { .. }
        | ClientOp::SetPassword { .. } => {
            http_users::request_of(op).expect("invariant: a user op has a user route")
        }
    }
}

/// The body of a topic create.
fn create_body(op: &ClientOp) -> Value {
    let ClientOp::CreateTopic { name, partitions, retention_ms, retention_bytes, queue } = op
    else {
        unreachable!("invariant: called for creates only")
    };
    let mut body = serde_json::json!({ "name": name });
    let fields = [
        ("partitions", partitions.map(u64::from)),
        ("retention_ms", *retention_ms),
        ("retention_bytes", *retention_bytes),
        ("visibility_timeout_ms", queue.visibility_timeout_ms),
    ];
    for (field, value) in fields {
        if let Some(value) = value {
            body[field] = value.into();
        }
    }
    if let Some(dead_letter) = &queue.dead_letter {
        body["max_deliveries"] = dead_letter.max_deliveries.into();
        body["dead_letter_topic"] = dead_letter.topic.clone().into();
    }
    body
}

/// A produce: one message as a raw body (key and partition in the query), or a JSON batch with
/// base64 payloads and keys.
fn produce_request(op: &ClientOp) -> HttpRequest {
    let ClientOp::Produce { topic, messages, batch } = op else {
        unreachable!("invariant: called for produces only")
    };
    if !batch && messages.len() == 1 {
        let message = &messages[0];
        let mut query = Vec::new();
        if let Some(key) = &message.key {
            query.push(format!("key={}", encoded(&String::from_utf8_lossy(key))));
        }
        if let Some(partition) = message.partition {
            query.push(format!("partition={partition}"));
        }
        let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
        let path = format!("/v1/topics/{}/produce{query}", encoded(topic));
        return HttpRequest { method: Method::POST, path, body: message.payload.clone() };
    }
    let messages: Vec<Value> = messages
        .iter()
        .map(|m| {
            let mut json = serde_json::json!({
                "payload": STANDARD.encode(&m.payload),
                "payload_encoding": "base64",
            });
            if let Some(key) = &m.key {
                json["key"] = STANDARD.encode(key).into();
                json["key_encoding"] = "base64".into();
            }
            if let Some(partition) = m.partition {
                json["partition"] = partition.into();
            }
            json
        })
        .collect();
    let body = json_body(&serde_json::json!({ "messages": messages }));
    let path = format!("/v1/topics/{}/produce/batch", encoded(topic));
    HttpRequest { method: Method::POST, path, body }
}

/// The `ClientReply` an answer with `status` and `body` stands for.
pub fn reply_of(op: &ClientOp, status: u16, body: &[u8]) -> ClientReply {
    if !(200..300).contains(&status) {
        return ClientReply::Error(error_of(status, body));
    }
    let json = || serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let decoded = match op {
        ClientOp::CreateTopic { .. } => topic_of(&json()).map(ClientReply::TopicCreated),
        ClientOp::DeleteTopic { .. } => Some(ClientReply::TopicDeleted),
        ClientOp::UpdateTopic { .. } => topic_of(&json()).map(ClientReply::TopicUpdated),
        ClientOp::ListTopics { .. } => {
            let json = json();
            let topics = json["topics"].as_array().map(|t| t.iter().filter_map(topic_of).collect());
            let next = json["next_page_token"].as_str().map(str::to_string);
            topics.zip(next).map(|(topics, next)| ClientReply::Topics {
                topics,
                next: Some(next).filter(|next| !next.is_empty()),
            })
        }
        ClientOp::GetTopic { .. } => {
            let json = json();
            topic_of(&json).map(|info| ClientReply::Topic(info, partitions_of(&json)))
        }
        ClientOp::Produce { messages, batch: false, .. } => {
            Some(ClientReply::Produced { accepted: messages.len() })
        }
        ClientOp::Produce { .. } => json()["accepted"]
            .as_u64()
            .map(|accepted| ClientReply::Produced { accepted: accepted as usize }),
        ClientOp::Consume { .. } if status == 204 => Some(ClientReply::Records(Vec::new())),
        ClientOp::Consume { .. } => records_of(body).map(ClientReply::Records),
        ClientOp::Members | ClientOp::Receive { .. } | ClientOp::Settle { .. } => None,
        ClientOp::CreateUser { .. }
        | ClientOp::ListUsers
        | ClientOp::GetUser { .. }
        | ClientOp::DeleteUser { .. }
        | ClientOp::SetGrants { .. }
        | ClientOp::SetPassword { .. } => http_users::reply_of(op, body),
    };
    decoded.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        ClientReply::Error(ClientError::Internal(format!("undecodable {status} answer: {text}")))
    })
}

/// The error an error answer names: the status says which, the message and the fields say more.
fn error_of(status: u16, body: &[u8]) -> ClientError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let message = json["error"].as_str().unwrap_or_default().to_string();
    match status {
        400 => ClientError::BadRequest(message),
        401 => ClientError::Unauthenticated(message),
        403 => ClientError::Forbidden(message),
        404 => ClientError::NotFound(message),
        409 => ClientError::Conflict(message),
        413 => ClientError::TooLarge(message),
        410 => match json["log_start_offset"].as_u64() {
            Some(log_start_offset) => ClientError::Gone { log_start_offset },
            None => ClientError::StaleHandle(message),
        },
        // The payer's produce quota (judged by the checker as the first tier's).
        429 if message.starts_with("produce quota") => {
            ClientError::QuotaExceeded { message, retry_after_us: 0 }
        }
        // Too many wrong passwords for the user: refused before anything ran, retry later.
        429 => ClientError::Unavailable(format!("429: {message}")),
        503 if message == "shutting down" => ClientError::ShuttingDown,
        503 if message.starts_with("node overloaded") => ClientError::Overloaded(message),
        503 => ClientError::Unavailable(message),
        500 if message.starts_with("ingress WAL failed") => ClientError::WalFailed(message),
        _ => ClientError::Internal(format!("{status}: {message}")),
    }
}

fn topic_of(json: &Value) -> Option<TopicInfo> {
    let id = u64::from_str_radix(json["id"].as_str()?, 16).ok()?;
    let retention_ms = json["retention_ms"].as_u64()?;
    Some(TopicInfo {
        name: json["name"].as_str()?.to_string(),
        id: TopicId(id),
        partitions: u32::try_from(json["partitions"].as_u64()?).ok()?,
        // The API shows the retention in force; a topic never given one shows the default.
        retention_ms: (retention_ms != narad_core::constants::DEFAULT_RETENTION_MS)
            .then_some(retention_ms),
        retention_bytes: json["retention_bytes"].as_u64(),
        created_ms: json["created_at_ms"].as_u64()?,
        queue: queue_of(json)?,
    })
}

/// The queue settings a topic shows: the lease in force (the default for a topic never given
/// one) and its dead-letter topic, if any.
fn queue_of(json: &Value) -> Option<QueueSettings> {
    let lease = json["visibility_timeout_ms"].as_u64()?;
    let dead_letter = match (json["max_deliveries"].as_u64(), json["dead_letter_topic"].as_str()) {
        (Some(max), Some(topic)) => Some(narad_core::api::DeadLetter {
            max_deliveries: u32::try_from(max).ok()?,
            topic: topic.to_string(),
        }),
        _ => None,
    };
    let default = narad_core::constants::DEFAULT_VISIBILITY_TIMEOUT_MS;
    Some(QueueSettings { visibility_timeout_ms: (lease != default).then_some(lease), dead_letter })
}

fn partitions_of(json: &Value) -> Vec<PartitionStats> {
    let Some(partitions) = json["partition_stats"].as_array() else { return Vec::new() };
    partitions
        .iter()
        .filter_map(|p| {
            let numbers = p["high_watermark"].as_u64().map(|high_watermark| PartitionNumbers {
                log_start_offset: p["log_start_offset"].as_u64().unwrap_or(0),
                high_watermark,
                segments: p["segments"].as_u64().unwrap_or(0),
                size_bytes: p["size_bytes"].as_u64().unwrap_or(0),
                queue_settled: p["acked"].as_u64().unwrap_or(0),
                queue_leased: p["leased"].as_u64().unwrap_or(0),
                oldest_unsettled_ms: p["oldest_unacked_timestamp_ms"].as_u64(),
            });
            Some(PartitionStats {
                index: u32::try_from(p["index"].as_u64()?).ok()?,
                owner_node: p["owner_node"].as_str()?.parse().ok()?,
                numbers,
            })
        })
        .collect()
}

/// One message object of a consume answer, its payload still as JSON text.
#[derive(serde::Deserialize)]
struct MessageJson<'a> {
    topic: String,
    partition: u32,
    offset: u64,
    key: Option<String>,
    key_encoding: Option<String>,
    #[serde(borrow)]
    payload: &'a RawValue,
    payload_encoding: Option<String>,
    timestamp_ms: u64,
}

#[derive(serde::Deserialize)]
struct MessagesJson<'a> {
    #[serde(borrow)]
    messages: Vec<MessageJson<'a>>,
}

fn records_of(body: &[u8]) -> Option<Vec<ConsumedRecord>> {
    let messages: MessagesJson<'_> = serde_json::from_slice(body).ok()?;
    messages.messages.into_iter().map(record_of).collect()
}

/// The bytes back exactly, as the API promises: base64-decode; a value's text as it stands for
/// `"json"` or a value that is not a string; a string's contents otherwise.
fn record_of(m: MessageJson<'_>) -> Option<ConsumedRecord> {
    let text = m.payload.get();
    let payload = match m.payload_encoding.as_deref() {
        Some("base64") => {
            Bytes::from(STANDARD.decode(serde_json::from_str::<String>(text).ok()?).ok()?)
        }
        Some("json") => Bytes::copy_from_slice(text.as_bytes()),
        None if !text.starts_with('"') => Bytes::copy_from_slice(text.as_bytes()),
        None => Bytes::from(serde_json::from_str::<String>(text).ok()?),
        Some(_) => return None,
    };
    let key = match (m.key, m.key_encoding.as_deref()) {
        (None, _) => None,
        (Some(key), Some("base64")) => Some(Bytes::from(STANDARD.decode(key).ok()?)),
        (Some(key), _) => Some(Bytes::from(key)),
    };
    Some(ConsumedRecord {
        topic: m.topic,
        partition: m.partition,
        offset: m.offset,
        key,
        payload,
        timestamp_ms: m.timestamp_ms,
    })
}
