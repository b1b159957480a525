//! Wire framing of node messages: each message travels alone on its own QUIC uni stream as
//! `[u32 big-endian length][message bytes]`, and the stream ends right after it. The length is
//! redundant with the stream's end on purpose: a stream cut short (sender died mid-write, or reset)
//! is caught here instead of reaching the node as a truncated message.

use bytes::Bytes;

/// Largest message a node sends or accepts: a commit batch carries at most 8 MiB of records
/// (plus one record that starts the batch, ≤ 1 MiB) and consume replies at most 8 MiB; the rest
/// is headroom for metastore snapshots and encoding overhead.
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024 + 64 * 1024;
/// Bytes of the length prefix.
pub const HEADER_BYTES: usize = 4;
/// The most a receiver reads from one stream.
pub const FRAME_BYTES_MAX: usize = HEADER_BYTES + MESSAGE_BYTES_MAX;

/// Why a received frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is shorter than its length prefix")]
    NoHeader(usize),
    #[error("frame announces {announced} bytes but carries {carried}")]
    LengthMismatch { announced: usize, carried: usize },
    #[error("empty message")]
    Empty,
    #[error("message of {0} bytes exceeds the limit of {MESSAGE_BYTES_MAX}")]
    TooLarge(usize),
}

/// The length prefix for a message of `len` bytes (`None` if it exceeds the limit).
pub fn header(len: usize) -> Option<[u8; HEADER_BYTES]> {
    if len > MESSAGE_BYTES_MAX {
        return None;
    }
    let len = u32::try_from(len).expect("invariant: MESSAGE_BYTES_MAX fits in u32");
    Some(len.to_be_bytes())
}

/// The message carried by one whole stream's bytes.
pub fn decode(frame: Vec<u8>) -> Result<Bytes, FrameError> {
    let Some(prefix) = frame.get(..HEADER_BYTES) else {
        return Err(FrameError::NoHeader(frame.len()));
    };
    let prefix: [u8; HEADER_BYTES] = prefix.try_into().expect("invariant: sliced to 4 bytes");
    let announced = u32::from_be_bytes(prefix) as usize;
    let carried = frame.len() - HEADER_BYTES;
    if announced > MESSAGE_BYTES_MAX {
        return Err(FrameError::TooLarge(announced));
    }
    if announced != carried {
        return Err(FrameError::LengthMismatch { announced, carried });
    }
    if announced == 0 {
        return Err(FrameError::Empty);
    }
    let mut bytes = Bytes::from(frame);
    Ok(bytes.split_off(HEADER_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(message: &[u8]) -> Vec<u8> {
        let mut out = header(message.len()).expect("small message").to_vec();
        out.extend_from_slice(message);
        out
    }

    #[test]
    fn a_message_round_trips() {
        assert_eq!(decode(frame(b"hello")), Ok(Bytes::from_static(b"hello")));
    }

    #[test]
    fn cut_short_or_padded_frames_are_refused() {
        let mut short = frame(b"hello");
        short.pop();
        assert_eq!(decode(short), Err(FrameError::LengthMismatch { announced: 5, carried: 4 }));
        let mut long = frame(b"hello");
        long.push(0);
        assert!(matches!(decode(long), Err(FrameError::LengthMismatch { .. })));
        assert_eq!(decode(vec![0, 0]), Err(FrameError::NoHeader(2)));
        assert_eq!(decode(frame(b"")), Err(FrameError::Empty));
    }

    #[test]
    fn oversized_messages_are_refused_both_ways() {
        assert!(header(MESSAGE_BYTES_MAX).is_some());
        assert!(header(MESSAGE_BYTES_MAX + 1).is_none());
        let huge = (MESSAGE_BYTES_MAX as u32 + 1).to_be_bytes().to_vec();
        assert!(matches!(decode(huge), Err(FrameError::TooLarge(_))));
    }
}
