//! Reading request bodies with our own size limits. Axum's default limit (2 MiB) does not apply to
//! a raw `Body`; we enforce the limits of docs/design.md §4.1 ourselves, answer 413 with our JSON
//! error, and never buffer more than the limit plus one frame. A body that arrives as one frame
//! (the common case for small produces) is passed on without a copy.
//!
//! An oversized body is read to its end (and dropped) before we answer 413, up to a bound: closing
//! a socket with unread request bytes makes the kernel send a reset, and the client may then lose
//! our 413 before it reads it.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use super::ApiError;

/// Bytes past the limit we read and discard so that a 413 reaches the client intact.
const DRAIN_BYTES: u64 = 8 * 1024 * 1024;

/// Reads the whole body, failing with 413 once it exceeds `limit` bytes.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit_bytes = limit as u64;
    if declared.is_some_and(|len| len > limit_bytes + DRAIN_BYTES) {
        return Err(too_large(limit)); // Too much to drain: the connection just closes.
    }
    let mut body = body;
    let mut total = 0usize;
    let mut first: Option<Bytes> = None;
    let mut rest: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        }; // Trailers carry no payload.
        total += chunk.len();
        if total > limit {
            drain(&mut body, total as u64 - limit_bytes).await;
            return Err(too_large(limit));
        }
        match (&first, &mut rest) {
            (None, _) => first = Some(chunk),
            (Some(head), None) => {
                let capacity = declared.map_or(total, |d| d as usize).clamp(total, limit);
                let mut buf = BytesMut::with_capacity(capacity);
                buf.extend_from_slice(head);
                buf.extend_from_slice(&chunk);
                rest = Some(buf);
            }
            (Some(_), Some(buf)) => buf.extend_from_slice(&chunk),
        }
    }
    Ok(match rest {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

/// Reads and drops the rest of a body, giving up after `DRAIN_BYTES` past the limit.
async fn drain(body: &mut Body, mut past_limit: u64) {
    while let Some(Ok(frame)) = body.frame().await {
        past_limit += frame.data_ref().map_or(0, |d| d.len() as u64);
        if past_limit > DRAIN_BYTES {
            return;
        }
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::too_large(format!("body exceeds the limit of {limit} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn chunked(parts: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn limits_and_joins() {
        let headers = HeaderMap::new();
        let body = read_limited(&headers, Body::from("hello"), 5).await.expect("fits");
        assert_eq!(body, Bytes::from_static(b"hello"));
        let err = read_limited(&headers, Body::from("hello!"), 5).await.expect_err("too big");
        assert_eq!(err.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = read_limited(&headers, chunked(&[b"ab", b"cd", b"e"]), 5).await.expect("fits");
        assert_eq!(body, Bytes::from_static(b"abcde"));
    }
}
