//! The ingress WAL record: everything the dispatcher needs to commit a record on its partition
//! later, possibly after a crash. Encoded as the body of one CRC frame (see `codec`).

use bytes::Bytes;

use crate::codec::{Reader, put_frame, put_optional_bytes};
use crate::ids::{PartitionKey, TopicId};

/// One record staged in the ingress WAL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalRecord {
    /// Dense, increasing sequence number within this node's WAL.
    pub seq: u64,
    /// Milliseconds since the Unix epoch at accept time.
    pub timestamp_ms: u64,
    /// Topic name (kept so logs and discard decisions can name it).
    pub topic: String,
    /// Topic incarnation the record was accepted for.
    pub topic_id: TopicId,
    /// Partition resolved at accept time.
    pub partition: u32,
    /// Optional key.
    pub key: Option<Bytes>,
    /// The payload.
    pub payload: Bytes,
}

pub(super) const FIXED_BYTES: usize = 8 + 8 + 8 + 4 + 2 + 4;

impl WalRecord {
    /// The destination the record was accepted for.
    pub fn destination(&self) -> PartitionKey {
        PartitionKey { topic: self.topic_id, partition: self.partition }
    }

    /// Bytes this record takes in memory and in a commit batch (payload + key + envelope).
    pub fn weight(&self) -> usize {
        FIXED_BYTES
            + self.topic.len()
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.payload.len()
    }

    /// Appends this record as one frame to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut body = Vec::with_capacity(self.weight());
        body.extend_from_slice(&self.seq.to_le_bytes());
        body.extend_from_slice(&self.timestamp_ms.to_le_bytes());
        body.extend_from_slice(&self.topic_id.0.to_le_bytes());
        body.extend_from_slice(&self.partition.to_le_bytes());
        let topic_len =
            u16::try_from(self.topic.len()).expect("invariant: topic names ≤ 200 bytes");
        body.extend_from_slice(&topic_len.to_le_bytes());
        body.extend_from_slice(self.topic.as_bytes());
        put_optional_bytes(&mut body, self.key.as_deref());
        body.extend_from_slice(&self.payload);
        put_frame(out, &body);
    }

    /// Decodes a frame body; `None` if it is not a well-formed record.
    pub fn decode(body: &[u8]) -> Option<WalRecord> {
        let mut reader = Reader::new(body);
        let seq = reader.u64()?;
        let timestamp_ms = reader.u64()?;
        let topic_id = TopicId(reader.u64()?);
        let partition = reader.u32()?;
        let topic_len = reader.u16()? as usize;
        let topic = std::str::from_utf8(reader.take(topic_len)?).ok()?.to_string();
        let key = reader.optional_bytes()?.map(Bytes::copy_from_slice);
        let payload = Bytes::copy_from_slice(reader.rest());
        Some(WalRecord { seq, timestamp_ms, topic, topic_id, partition, key, payload })
    }
}

/// Encoded WAL records for tests: `count` records from sequence `first` with `payload_len`-byte
/// payloads, and the byte position where each starts.
#[cfg(test)]
pub(crate) fn test_segment(first: u64, count: u64, payload_len: usize) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for seq in first..first + count {
        starts.push(out.len());
        let record = WalRecord {
            seq,
            timestamp_ms: 1,
            topic: "t".into(),
            topic_id: TopicId(1),
            partition: 0,
            key: None,
            payload: Bytes::from(vec![seq as u8; payload_len]),
        };
        record.encode_into(&mut out);
    }
    (out, starts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{ScanEnd, scan};
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = WalRecord> {
        (
            any::<u64>(),
            any::<u64>(),
            "[a-z0-9._-]{1,20}",
            any::<u64>(),
            any::<u32>(),
            proptest::option::of(prop::collection::vec(any::<u8>(), 0..40)),
            prop::collection::vec(any::<u8>(), 1..500),
        )
            .prop_map(|(seq, ts, topic, id, partition, key, payload)| WalRecord {
                seq,
                timestamp_ms: ts,
                topic,
                topic_id: TopicId(id),
                partition,
                key: key.map(Bytes::from),
                payload: Bytes::from(payload),
            })
    }

    proptest! {
        #[test]
        fn round_trip(records in prop::collection::vec(arb_record(), 1..10)) {
            let mut bytes = Vec::new();
            for record in &records { record.encode_into(&mut bytes); }
            let scan = scan(&bytes);
            prop_assert_eq!(&scan.end, &ScanEnd::Clean);
            let decoded: Vec<WalRecord> =
                scan.frames.iter().map(|f| WalRecord::decode(f.body(&bytes)).unwrap()).collect();
            prop_assert_eq!(decoded, records);
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = WalRecord::decode(&bytes);
        }
    }
}
