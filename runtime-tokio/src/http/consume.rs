//! `GET /v1/topics/{t}/consume?partition=p&offset=o[&max=n]`: committed records of one partition
//! (a replay). Without `offset` the consume is a queue receive (`queue.rs`).
//! Without `max` the answer is one message object; with it, `{"messages":[...]}`. Nothing at the
//! offset yet (at or past the high watermark) is 204 in both forms. `wait` (a Go duration such
//! as `5s`) long-polls: the consume answers once a record at the offset is visible, or 204
//! when the wait ends; a wait past `MAX_CONSUME_WAIT_MS` (20 s) is cut to it and the answer
//! carries `X-Narad-Wait-Clamped` with the wait used (docs/design.md §4.9).

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use narad_core::constants::MAX_CONSUME_WAIT_MS;
use narad_core::{ClientOp, ClientReply, ConsumedRecord};

use super::query::consume_params;
use super::{ApiError, Caller, json_response};
use crate::payload_json::write_record;

/// Reads committed records.
pub async fn consume(
    node: Caller,
    Path(topic): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let params = consume_params(uri.query())?;
    let asked = params.wait_ms.unwrap_or(0);
    let wait_ms = asked.min(MAX_CONSUME_WAIT_MS);
    let (Some(partition), Some(offset)) = (params.partition, params.offset) else {
        let mut response =
            super::queue::receive(&node, topic, params.partition, params.max, wait_ms).await?;
        if asked > wait_ms {
            let used = HeaderValue::from_str(&format_wait(wait_ms)).expect("invariant: ASCII");
            response.headers_mut().insert(WAIT_CLAMPED, used);
        }
        return Ok(response);
    };
    let max = params.max.unwrap_or(1);
    let op = ClientOp::Consume { topic, partition, offset, max, wait_ms };
    let records = match node.call(op).await? {
        ClientReply::Records(records) => records,
        other => return Err(ApiError::unexpected(&other)),
    };
    let mut response = if records.is_empty() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        let body = match params.max {
            None => single_body(&records[0]),
            Some(_) => list_body(&records),
        };
        json_response(StatusCode::OK, body)
    };
    if asked > wait_ms {
        let used = HeaderValue::from_str(&format_wait(wait_ms)).expect("invariant: ASCII");
        response.headers_mut().insert(WAIT_CLAMPED, used);
    }
    Ok(response)
}

/// Says that `wait` was cut, and to what (the original Narad's header).
pub const WAIT_CLAMPED: &str = "x-narad-wait-clamped";

/// A wait as a Go duration: whole seconds as `20s`, anything else in milliseconds.
fn format_wait(ms: u64) -> String {
    if ms.is_multiple_of(1_000) { format!("{}s", ms / 1_000) } else { format!("{ms}ms") }
}

fn single_body(record: &ConsumedRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(record.payload.len() + 160);
    write_record(&mut out, record);
    out
}

fn list_body(records: &[ConsumedRecord]) -> Vec<u8> {
    messages_body(records, |r| r.payload.len(), write_record)
}

/// `{"messages":[...]}` with one object per item, written by `write` (`payload_len` sizes the
/// buffer); shared by replays and queue receives.
pub(super) fn messages_body<T>(
    items: &[T],
    payload_len: impl Fn(&T) -> usize,
    write: impl Fn(&mut Vec<u8>, &T),
) -> Vec<u8> {
    let estimate: usize = items.iter().map(|item| payload_len(item) + 220).sum();
    let mut out = Vec::with_capacity(estimate + 16);
    out.extend_from_slice(b"{\"messages\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(&mut out, item);
    }
    out.extend_from_slice(b"]}");
    out
}
