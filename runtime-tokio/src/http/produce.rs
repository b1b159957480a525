//! `POST /v1/topics/{t}/produce` (raw body, one message) and `.../produce/batch` (JSON, up to
//! 1,000 messages). Both become one `ClientOp::Produce`; the core stages the records in the
//! ingress WAL and answers only after the group commit that holds them is durable (202). A batch
//! takes its keys and partitions per message: `?key=` or `?partition=` on it is a 400, not
//! silently ignored.

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use narad_core::constants::{MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, MAX_MESSAGE_BYTES};
use narad_core::{ClientOp, ClientReply, ProduceMessage};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::access::drain_small_body;
use super::body::read_limited;
use super::json::{Object, object};
use super::query::{batch_params, produce_params};
use super::{ApiError, Caller, json_response};
use crate::payload_json::{key_from_json, payload_from_json};
use crate::quota_gate::Probe;

/// One message, body = payload.
pub async fn single(
    node: Caller,
    Path(topic): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let params = produce_params(uri.query())?;
    let (_probe, body) = pass_quota_gate(&node, &headers, body).await?;
    let payload = read_limited(&headers, body, MAX_MESSAGE_BYTES).await?;
    if payload.is_empty() {
        return Err(ApiError::bad_request("empty body: a message needs 1 byte or more"));
    }
    let message = ProduceMessage { key: params.key, partition: params.partition, payload };
    let op = ClientOp::Produce { topic, messages: vec![message], batch: false };
    match node.call(op).await? {
        ClientReply::Produced { .. } => Ok(StatusCode::ACCEPTED),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// The produce quota's gate (`Caller::quota_gate`), before the body is read: a refused
/// request's body is read first only if it is small, so its keep-alive connection stays usable.
/// A probe is held until the produce is answered.
async fn pass_quota_gate(
    node: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Option<Probe>, Body), ApiError> {
    match node.quota_gate() {
        Ok(probe) => Ok((probe, body)),
        Err(refusal) => {
            drain_small_body(headers, body).await;
            Err(refusal)
        }
    }
}

/// The batch request body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRequest<'a> {
    #[serde(borrow)]
    messages: Vec<Object<BatchMessage<'a>>>,
}

/// One message of a batch: `payload` may be any JSON value (stored as its text, as written).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchMessage<'a> {
    #[serde(borrow)]
    payload: &'a RawValue,
    payload_encoding: Option<String>,
    key: Option<String>,
    key_encoding: Option<String>,
    partition: Option<u32>,
}

/// Many messages, all validated before any is staged; one WAL append, one 202.
pub async fn batch(
    node: Caller,
    Path(topic): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    batch_params(uri.query())?;
    let (_probe, body) = pass_quota_gate(&node, &headers, body).await?;
    let body = read_limited(&headers, body, MAX_BATCH_BYTES).await?;
    let messages = if body.len() >= OFFLOAD_DECODE_BYTES {
        node.node().offload(move || decode_batch(&body)).await.ok_or_else(decode_lost)??
    } else {
        decode_batch(&body)?
    };
    let op = ClientOp::Produce { topic, messages, batch: true };
    match node.call(op).await? {
        ClientReply::Produced { accepted } => {
            let body = format!("{{\"accepted\":{accepted}}}").into_bytes();
            Ok(json_response(StatusCode::ACCEPTED, body))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}

/// A batch body this large is decoded off the runtime thread (`NodeHandle::offload`): decoding
/// 16 MiB takes tens of milliseconds, which every other request on the thread would wait out.
/// Measured beside one client flooding 16 MiB batches (2 cores, `docs/design.md` §7): an
/// 8-client producer's p50 22–23 → 12–14 ms and its throughput 251–277 → 377–385 msg/s.
pub const OFFLOAD_DECODE_BYTES: usize = 1024 * 1024;

fn decode_lost() -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error: decoding the batch failed")
}

/// Parses and decodes every message; the first bad one fails the whole batch.
pub fn decode_batch(body: &[u8]) -> Result<Vec<ProduceMessage>, ApiError> {
    let request: BatchRequest<'_> = object(body, "batch body")?;
    let count = request.messages.len();
    if !(1..=MAX_BATCH_MESSAGES).contains(&count) {
        return Err(ApiError::bad_request(format!(
            "a batch holds 1 to {MAX_BATCH_MESSAGES} messages, got {count}"
        )));
    }
    request
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, Object(m))| {
            decode_message(m).map_err(|e| ApiError::bad_request(format!("message {i}: {e}")))
        })
        .collect()
}

fn decode_message(message: BatchMessage<'_>) -> Result<ProduceMessage, String> {
    let payload = payload_from_json(message.payload, message.payload_encoding.as_deref())?;
    let key = match &message.key {
        Some(key) => key_from_json(key, message.key_encoding.as_deref())?,
        None if message.key_encoding.is_some() => return Err("key_encoding without key".into()),
        None => None,
    };
    Ok(ProduceMessage { key, partition: message.partition, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_decode_or_fail_whole() {
        let body = br#"{"messages":[{"payload":"a"},{"payload":{"x":1},"key":"k","partition":2},
            {"payload":"AAE=","payload_encoding":"base64"}]}"#;
        let messages = decode_batch(body).expect("valid batch");
        assert_eq!(messages.len(), 3);
        assert_eq!(&messages[0].payload[..], br#""a""#, "a string payload keeps its quotes");
        assert_eq!(&messages[1].payload[..], br#"{"x":1}"#);
        assert_eq!(messages[1].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(messages[1].partition, Some(2));
        assert_eq!(&messages[2].payload[..], &[0, 1]);
    }

    #[test]
    fn bad_batches_are_400() {
        let cases: [&[u8]; 8] = [
            br#"{"messages":[]}"#,
            br#"{"messages":[{"payload":"a","extra":1}]}"#,
            br#"{"messages":[{"payload":"a"}],"extra":1}"#,
            br#"{"messages":[{"payload":"a"},{"payload":"%%","payload_encoding":"base64"}]}"#,
            br#"{"messages":[{"payload":"a"}"#,
            br#"{"messages":[{"key":"a"}]}"#,
            // Issue 12: a struct written as an array was taken field by field.
            br#"[[{"payload":"a"}]]"#,
            br#"{"messages":[["a"]]}"#,
        ];
        for body in cases {
            let err = decode_batch(body).expect_err("must be rejected");
            assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        }
        let err = format!("{:?}", decode_batch(cases[3]).expect_err("bad base64"));
        assert!(err.contains("message 1: payload is not valid base64"), "{err}");
        let err = format!("{:?}", decode_batch(cases[7]).expect_err("array message"));
        assert!(err.contains("a JSON object"), "{err}");
    }

    /// A large batch decodes the same on the blocking pool as inline, and the pool's work runs
    /// off the calling thread (which meanwhile serves other requests).
    #[tokio::test]
    async fn large_batches_decode_off_the_runtime_thread() {
        use crate::driver::NodeHandle;
        let payload = "x".repeat(4_000);
        let messages: Vec<String> =
            (0..300).map(|i| format!(r#"{{"payload":"{payload}","key":"k{i}"}}"#)).collect();
        let body = format!(r#"{{"messages":[{}]}}"#, messages.join(",")).into_bytes();
        assert!(body.len() >= OFFLOAD_DECODE_BYTES, "{} bytes", body.len());
        let here = std::thread::current().id();
        let inline = NodeHandle::detached(true, false);
        let pool = NodeHandle::detached(true, false).with_blocking_pool();
        for (handle, off_thread) in [(inline, false), (pool, true)] {
            let body = body.clone();
            let (decoded, thread) = handle
                .offload(move || (decode_batch(&body), std::thread::current().id()))
                .await
                .expect("the work ran");
            let decoded = decoded.expect("a valid batch");
            assert_eq!(decoded.len(), 300);
            assert_eq!(decoded[299].key.as_deref(), Some(&b"k299"[..]));
            assert_eq!(thread != here, off_thread, "pool {off_thread}: ran on {thread:?}");
        }
    }

    /// Issue 12: the JSON text of a payload is stored as sent, whitespace inside included.
    #[test]
    fn batch_payloads_keep_their_text() {
        let body = br#"{"messages":[{"payload": {"id": "o2",  "amount": 7} },{"payload":"123"}]}"#;
        let messages = decode_batch(body).expect("valid batch");
        assert_eq!(&messages[0].payload[..], br#"{"id": "o2",  "amount": 7}"#);
        assert_eq!(&messages[1].payload[..], br#""123""#);
    }
}
