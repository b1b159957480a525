//! `GET /v1/topics/{t}/consume?partition=p&offset=o[&max=n]`: committed records of one partition
//! (a replay). Without `offset` the consume is a queue receive (`queue.rs`).
//! Without `max` the answer is one message object; with it, `{"messages":[...]}`. Nothing at the
//! offset yet (at or past the high watermark) is 204 in both forms.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use narad_core::{ClientOp, ClientReply, ConsumedRecord};

use super::query::consume_params;
use super::{ApiError, call, json_response};
use crate::driver::NodeHandle;
use crate::payload_json::write_record;

/// Reads committed records.
pub async fn consume(
    State(node): State<NodeHandle>,
    Path(topic): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let params = consume_params(uri.query())?;
    let (Some(partition), Some(offset)) = (params.partition, params.offset) else {
        return super::queue::receive(&node, topic, params.partition, params.max).await;
    };
    let op = ClientOp::Consume { topic, partition, offset, max: params.max.unwrap_or(1) };
    let records = match call(&node, op).await? {
        ClientReply::Records(records) => records,
        other => return Err(ApiError::unexpected(&other)),
    };
    if records.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let body = match params.max {
        None => single_body(&records[0]),
        Some(_) => list_body(&records),
    };
    Ok(json_response(StatusCode::OK, body))
}

fn single_body(record: &ConsumedRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(record.payload.len() + 160);
    write_record(&mut out, record);
    out
}

fn list_body(records: &[ConsumedRecord]) -> Vec<u8> {
    let estimate: usize = records.iter().map(|r| r.payload.len() + 160).sum();
    let mut out = Vec::with_capacity(estimate + 16);
    out.extend_from_slice(b"{\"messages\":[");
    for (i, record) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_record(&mut out, record);
    }
    out.extend_from_slice(b"]}");
    out
}
