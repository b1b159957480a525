//! Fuzzes request-body reading (`runtime-tokio/src/http/body.rs` `read_limited`) with bodies cut
//! into frames where the fuzzer chooses (see `chunks`): a body within the limit comes back byte
//! for byte however it was framed, one over the limit is refused with 413, and a declared
//! `Content-Length` never changes a verdict on a body it truthfully describes.
#![no_main]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use bytes::Bytes;
use http_body::Frame;
use libfuzzer_sys::fuzz_target;
use narad::fuzzing::read_limited;
use narad_fuzz::chunks;

/// A body that yields its frames one by one.
struct Frames(VecDeque<Bytes>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&limit, rest)) = input.split_first() else { return };
    let plan = chunks::plan(rest);
    let limit = usize::from(limit) * 16;
    let pieces: VecDeque<Bytes> = plan.pieces().into_iter().map(Bytes::copy_from_slice).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    for declared in [false, true] {
        let mut headers = HeaderMap::new();
        if declared {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(plan.data.len()));
        }
        let body = Body::new(Frames(pieces.clone()));
        let result = runtime.block_on(read_limited(&headers, body, limit));
        if plan.data.len() <= limit {
            assert_eq!(result.expect("within the limit").as_ref(), plan.data);
        } else {
            let error = result.expect_err("over the limit");
            assert_eq!(error.status(), StatusCode::PAYLOAD_TOO_LARGE);
        }
    }
});
