//! Fuzzes the node RPC stream framing (`runtime-tokio/src/transport/frame.rs`): a stream's bytes
//! are accepted only when they are exactly `header(len) ++ message` for a non-empty message within
//! the limit, and every such frame is accepted with its message intact.
#![no_main]

use libfuzzer_sys::fuzz_target;
use narad::fuzzing::{FrameError, MESSAGE_BYTES_MAX, decode_frame, header};

fuzz_target!(|data: &[u8]| {
    accepted_frames_are_exact(data);
    framed_messages_are_accepted(data);
});

fn accepted_frames_are_exact(data: &[u8]) {
    match decode_frame(data.to_vec()) {
        Ok(message) => {
            let mut again = header(message.len()).expect("accepted, so within the limit").to_vec();
            again.extend_from_slice(&message);
            assert_eq!(again, data);
        }
        Err(FrameError::NoHeader(len)) => assert!(data.len() < 4 && len == data.len()),
        Err(FrameError::TooLarge(len)) => assert!(len > MESSAGE_BYTES_MAX),
        Err(FrameError::LengthMismatch { announced, carried }) => {
            assert_ne!(announced, carried);
            assert_eq!(carried, data.len() - 4);
        }
        Err(FrameError::Empty) => assert_eq!(data, [0, 0, 0, 0]),
    }
}

fn framed_messages_are_accepted(message: &[u8]) {
    let mut frame = header(message.len()).expect("fuzz inputs are small").to_vec();
    frame.extend_from_slice(message);
    let decoded = decode_frame(frame);
    if message.is_empty() {
        assert_eq!(decoded, Err(FrameError::Empty));
    } else {
        assert_eq!(decoded.as_deref(), Ok(message));
    }
}
