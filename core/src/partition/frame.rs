//! The partition log's record frame: what a consumer reads. Carries the record's origin (node and
//! WAL sequence) so commits can be made idempotent and checkers can trace every record back.

use bytes::Bytes;

use crate::codec::{Reader, put_frame, put_optional_bytes};
use crate::ids::NodeId;

/// One record as committed to a partition log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRecord {
    /// Offset within the partition (dense from 0).
    pub offset: u64,
    /// Accept time in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The node whose WAL accepted the record.
    pub origin_node: NodeId,
    /// Its sequence number in that WAL.
    pub origin_seq: u64,
    pub key: Option<Bytes>,
    pub payload: Bytes,
}

impl PartitionRecord {
    /// Appends this record as one frame to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let key_len = self.key.as_ref().map_or(0, Bytes::len);
        let mut body = Vec::with_capacity(32 + key_len + self.payload.len());
        body.extend_from_slice(&self.offset.to_le_bytes());
        body.extend_from_slice(&self.timestamp_ms.to_le_bytes());
        body.extend_from_slice(&self.origin_node.0.to_le_bytes());
        body.extend_from_slice(&self.origin_seq.to_le_bytes());
        put_optional_bytes(&mut body, self.key.as_deref());
        body.extend_from_slice(&self.payload);
        put_frame(out, &body);
    }

    /// Fingerprint of the record's content (timestamp, key, payload): tells a replay of this
    /// record from a different record that reuses its origin sequence number.
    pub fn fingerprint(&self) -> u32 {
        fingerprint(self.timestamp_ms, self.key.as_deref(), &self.payload)
    }

    /// Decodes a frame body; `None` if malformed.
    pub fn decode(body: &[u8]) -> Option<PartitionRecord> {
        RecordView::decode(body).map(|view| view.to_record())
    }
}

/// A record decoded in place, its key and payload borrowed from the frame: what recovery and a
/// read's skipped frames need (offset, origin, fingerprint) without copying the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: u64,
    pub timestamp_ms: u64,
    pub origin_node: NodeId,
    pub origin_seq: u64,
    pub key: Option<&'a [u8]>,
    pub payload: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Decodes a frame body; `None` if malformed.
    pub fn decode(body: &'a [u8]) -> Option<RecordView<'a>> {
        let mut reader = Reader::new(body);
        let offset = reader.u64()?;
        let timestamp_ms = reader.u64()?;
        let origin_node = NodeId(reader.u32()?);
        let origin_seq = reader.u64()?;
        let key = reader.optional_bytes()?;
        let payload = reader.rest();
        Some(RecordView { offset, timestamp_ms, origin_node, origin_seq, key, payload })
    }

    /// See `PartitionRecord::fingerprint`.
    pub fn fingerprint(&self) -> u32 {
        fingerprint(self.timestamp_ms, self.key, self.payload)
    }

    /// The record, with its key and payload copied out of the frame.
    pub fn to_record(&self) -> PartitionRecord {
        PartitionRecord {
            offset: self.offset,
            timestamp_ms: self.timestamp_ms,
            origin_node: self.origin_node,
            origin_seq: self.origin_seq,
            key: self.key.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(self.payload),
        }
    }
}

fn fingerprint(timestamp_ms: u64, key: Option<&[u8]>, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&timestamp_ms.to_le_bytes());
    hasher.update(key.unwrap_or(b"\xff-no-key"));
    hasher.update(payload);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::scan;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(offset: u64, ts: u64, node: u32, seq: u64,
                      key in proptest::option::of(prop::collection::vec(any::<u8>(), 0..30)),
                      payload in prop::collection::vec(any::<u8>(), 1..300)) {
            let record = PartitionRecord { offset, timestamp_ms: ts, origin_node: NodeId(node),
                origin_seq: seq, key: key.map(Bytes::from), payload: Bytes::from(payload) };
            let mut bytes = Vec::new();
            record.encode_into(&mut bytes);
            let scanned = scan(&bytes);
            prop_assert_eq!(scanned.frames.len(), 1);
            let body = scanned.frames[0].body(&bytes);
            let view = RecordView::decode(body).expect("decodes");
            prop_assert_eq!(view.fingerprint(), record.fingerprint());
            prop_assert_eq!(PartitionRecord::decode(body), Some(record));
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..100)) {
            let _ = PartitionRecord::decode(&bytes);
        }
    }
}
