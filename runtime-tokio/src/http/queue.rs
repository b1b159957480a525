//! Queue consume over HTTP (docs/design.md §4.8): `GET /v1/topics/{t}/consume` without `offset`
//! leases messages (`receive`, reached from `consume.rs`), and `POST /v1/topics/{t}/ack` acks,
//! extends or nacks them, one handle in the query or up to 100 in a JSON body.

use std::io::Write;

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use narad_core::api::{LeasedRecord, SettleAction};
use narad_core::constants::MAX_SETTLE_HANDLES;
use narad_core::{ClientError, ClientOp, ClientReply};
use serde::Deserialize;

use super::body::read_limited;
use super::query::settle_params;
use super::{ApiError, Caller, json_response};
use crate::payload_json::write_record;

/// Largest body of a batch ack.
const MAX_SETTLE_BODY_BYTES: usize = 64 * 1024;

/// Leases up to `max` messages (one, in the single-message shape, without `max`), waiting up to
/// `wait_ms` (already clamped) for one to become available.
pub async fn receive(
    node: &Caller,
    topic: String,
    partition: Option<u32>,
    max: Option<u32>,
    wait_ms: u64,
) -> Result<Response, ApiError> {
    let op = ClientOp::Receive { topic, partition, max: max.unwrap_or(1), wait_ms };
    let leased = match node.call(op).await? {
        ClientReply::Leased(leased) => leased,
        other => return Err(ApiError::unexpected(&other)),
    };
    if leased.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let out = if max.is_none() {
        let mut out = Vec::with_capacity(leased[0].record.payload.len() + 220);
        write_leased(&mut out, &leased[0]);
        out
    } else {
        super::consume::messages_body(&leased, |l| l.record.payload.len(), write_leased)
    };
    Ok(json_response(StatusCode::OK, out))
}

/// A message object with its `receipt_handle` and `delivery_count`.
fn write_leased(out: &mut Vec<u8>, lease: &LeasedRecord) {
    write_record(out, &lease.record);
    let closing = out.pop();
    debug_assert_eq!(closing, Some(b'}'), "a message object ends with its brace");
    // Handles are digits and colons: nothing to escape.
    write!(
        out,
        ",\"receipt_handle\":\"{}\",\"delivery_count\":{}}}",
        lease.receipt_handle, lease.delivery_count
    )
    .expect("invariant: writing to a Vec cannot fail");
}

/// The batch ack body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleBody {
    receipt_handles: Vec<String>,
}

/// `POST /v1/topics/{t}/ack?receipt_handle=H[&extend=true|1|0|false]`, or the batch form.
pub async fn ack(
    node: Caller,
    Path(topic): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let params = settle_params(uri.query())?;
    let action = params.action;
    if let Some(handle) = params.receipt_handle {
        let op = ClientOp::Settle { topic, handles: vec![handle], action, batch: false };
        let mut results = settled(node.call(op).await?)?;
        return match results.pop() {
            Some(Ok(())) => Ok(StatusCode::NO_CONTENT.into_response()),
            Some(Err(error)) => Err(ApiError::from(error)),
            None => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no settle result")),
        };
    }
    let body = read_limited(&headers, body, MAX_SETTLE_BODY_BYTES).await?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "give `receipt_handle` in the query, or {\"receipt_handles\": [...]} as the body",
        ));
    }
    let handles = decode_settle_body(&body)?;
    let op = ClientOp::Settle { topic, handles, action, batch: true };
    let results = settled(node.call(op).await?)?;
    Ok(json_response(StatusCode::OK, results_body(&results)))
}

fn settled(reply: ClientReply) -> Result<Vec<Result<(), ClientError>>, ApiError> {
    match reply {
        ClientReply::Settled(results) => Ok(results),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `{"receipt_handles": [...]}`, 1 to 100 strings; anything else is a 400.
fn decode_settle_body(body: &[u8]) -> Result<Vec<String>, ApiError> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    let parsed: SettleBody = serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("bad batch ack body: {error}")))?;
    let count = parsed.receipt_handles.len();
    if !(1..=MAX_SETTLE_HANDLES).contains(&count) {
        return Err(ApiError::bad_request(format!(
            "1 to {MAX_SETTLE_HANDLES} receipt handles, not {count}"
        )));
    }
    Ok(parsed.receipt_handles)
}

/// `{"results":[{"status":204},{"status":410,"error":"..."}]}`.
fn results_body(results: &[Result<(), ClientError>]) -> Vec<u8> {
    let entries: Vec<serde_json::Value> = results
        .iter()
        .map(|result| match result {
            Ok(()) => serde_json::json!({ "status": 204 }),
            Err(error) => {
                serde_json::json!({ "status": error.http_status(), "error": error.to_string() })
            }
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "results": entries }))
        .expect("invariant: JSON values serialise")
}

/// What `extend` asks for: absent or `false` acks, `true` or `1` extends, `0` nacks.
pub fn settle_action(value: Option<&[u8]>) -> Result<SettleAction, ApiError> {
    match value {
        None | Some(b"false") => Ok(SettleAction::Ack),
        Some(b"true" | b"1") => Ok(SettleAction::Extend),
        Some(b"0") => Ok(SettleAction::Nack),
        Some(other) => Err(ApiError::bad_request(format!(
            "`extend` must be true, 1, 0 or false, not {:?}",
            String::from_utf8_lossy(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_bodies_are_objects_of_1_to_100_handles() {
        let ok = decode_settle_body(br#"{"receipt_handles":["0:1:2","1:2:3"]}"#).expect("valid");
        assert_eq!(ok, ["0:1:2", "1:2:3"]);
        for bad in [
            &br#"["0:1:2"]"#[..],
            br#"{"receipt_handles":[]}"#,
            br#"{"receipt_handles":["0:1:2"],"extra":1}"#,
            br#"{"receipt_handles":[1]}"#,
            b"not json",
        ] {
            assert!(decode_settle_body(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let many = format!("{{\"receipt_handles\":[{}]}}", vec!["\"0:0:0\""; 101].join(","));
        assert!(decode_settle_body(many.as_bytes()).is_err(), "101 handles");
    }

    #[test]
    fn extend_values() {
        assert_eq!(settle_action(None).ok(), Some(SettleAction::Ack));
        assert_eq!(settle_action(Some(b"false")).ok(), Some(SettleAction::Ack));
        assert_eq!(settle_action(Some(b"true")).ok(), Some(SettleAction::Extend));
        assert_eq!(settle_action(Some(b"1")).ok(), Some(SettleAction::Extend));
        assert_eq!(settle_action(Some(b"0")).ok(), Some(SettleAction::Nack));
        assert!(settle_action(Some(b"yes")).is_err());
    }

    #[test]
    fn results_say_each_status() {
        let body = results_body(&[Ok(()), Err(ClientError::StaleHandle("gone".into()))]);
        assert_eq!(
            String::from_utf8(body).expect("utf-8"),
            r#"{"results":[{"status":204},{"error":"gone","status":410}]}"#
        );
    }
}
