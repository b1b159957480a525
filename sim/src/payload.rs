//! Workload payloads: every message carries a unique id behind a fixed marker, then filler bytes
//! derived from the id. The checker identifies any record it reads byte for byte, and can find
//! the ids inside raw damaged file bytes (the payload is stored verbatim in WAL and log frames).

use bytes::Bytes;

/// The 8 bytes every workload payload starts with.
pub const MARKER: &[u8; 8] = b"NRDSIMv1";
/// Shortest payload: marker + id.
pub const MIN_PAYLOAD_BYTES: usize = 16;

/// The payload of message `id`, `len` bytes long (at least `MIN_PAYLOAD_BYTES`).
pub fn payload(id: u64, len: usize) -> Bytes {
    let len = len.max(MIN_PAYLOAD_BYTES);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(MARKER);
    out.extend_from_slice(&id.to_le_bytes());
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push((x >> 24) as u8);
    }
    Bytes::from(out)
}

/// The id of a workload payload, if `bytes` is one.
pub fn parse_id(bytes: &[u8]) -> Option<u64> {
    if bytes.len() < MIN_PAYLOAD_BYTES || &bytes[..8] != MARKER {
        return None;
    }
    Some(u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")))
}

/// Every id whose marker appears in `bytes` (raw file contents).
pub fn ids_in(bytes: &[u8]) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut pos = 0;
    while pos + MIN_PAYLOAD_BYTES <= bytes.len() {
        if bytes[pos] == MARKER[0] && &bytes[pos..pos + 8] == MARKER {
            ids.push(u64::from_le_bytes(bytes[pos + 8..pos + 16].try_into().expect("8 bytes")));
            pos += MIN_PAYLOAD_BYTES;
        } else {
            pos += 1;
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_found_in_raw_bytes() {
        let p = payload(42, 100);
        assert_eq!(p.len(), 100);
        assert_eq!(parse_id(&p), Some(42));
        assert_eq!(payload(42, 100), p);
        assert_ne!(payload(43, 100)[16..], p[16..]);
        let mut raw = vec![0u8; 7];
        raw.extend_from_slice(&p);
        raw.extend_from_slice(&payload(7, 16));
        assert_eq!(ids_in(&raw), vec![42, 7]);
        assert_eq!(parse_id(b"hello"), None);
    }
}
