//! The ingress WAL record: everything the dispatcher needs to commit a record on its partition
//! later, possibly after a crash. Encoded as the body of one CRC frame (see `codec`).
//!
//! A record of a bulk request written in chunks (`staging.rs`) also carries a chunk header: the
//! request's id (the sequence number of its first record) and whether it is the request's final
//! record. It is flagged by bit 15 of the topic name's length (names are at most 200 bytes, so
//! the bit is free): records without it decode as they always did, and a binary that predates
//! chunks fails to decode a chunked record rather than misread it.

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
    /// Set when the record belongs to a bulk request written in chunks.
    pub chunk: Option<Chunk>,
}

/// Where a record of a chunked bulk request stands in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Chunk {
    /// The request's id: the sequence number of its first record (never above the record's).
    pub request: u64,
    /// This is the request's final record: with it in the WAL, every record of the request is
    /// (groups are written in order and a torn write only ever cuts the log's end).
    pub last: bool,
}

pub(super) const FIXED_BYTES: usize = 8 + 8 + 8 + 4 + 2 + 4;
/// What the chunk header adds to a record: the request id and a flags byte.
pub(super) const CHUNK_HEADER_BYTES: usize = 8 + 1;
/// Bit of the encoded topic length that says a chunk header follows the topic name.
const CHUNKED_BIT: u16 = 1 << 15;
/// Chunk flags: the request's final record.
const LAST_FLAG: u8 = 1;

impl WalRecord {
    /// The destination the record was accepted for.
    pub fn destination(&self) -> PartitionKey {
        PartitionKey { topic: self.topic_id, partition: self.partition }
    }

    /// Bytes this record takes in memory and in a commit batch (payload + key + envelope).
    pub fn weight(&self) -> usize {
        FIXED_BYTES
            + self.topic.len()
            + self.chunk.map_or(0, |_| CHUNK_HEADER_BYTES)
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
        let topic_len = u16::try_from(self.topic.len())
            .ok()
            .filter(|&len| len < CHUNKED_BIT)
            .expect("invariant: topic names ≤ 200 bytes");
        let flagged = if self.chunk.is_some() { topic_len | CHUNKED_BIT } else { topic_len };
        body.extend_from_slice(&flagged.to_le_bytes());
        body.extend_from_slice(self.topic.as_bytes());
        if let Some(chunk) = self.chunk {
            body.extend_from_slice(&chunk.request.to_le_bytes());
            body.push(if chunk.last { LAST_FLAG } else { 0 });
        }
        put_optional_bytes(&mut body, self.key.as_deref());
        body.extend_from_slice(&self.payload);
        put_frame(out, &body);
    }

    /// Decodes a frame body; `None` if it is not a well-formed record (a chunk header with
    /// unknown flags, or naming a request that starts after the record, is not).
    pub fn decode(body: &[u8]) -> Option<WalRecord> {
        let mut reader = Reader::new(body);
        let seq = reader.u64()?;
        let timestamp_ms = reader.u64()?;
        let topic_id = TopicId(reader.u64()?);
        let partition = reader.u32()?;
        let flagged = reader.u16()?;
        let topic_len = usize::from(flagged & !CHUNKED_BIT);
        let topic = std::str::from_utf8(reader.take(topic_len)?).ok()?.to_string();
        let chunk =
            if flagged & CHUNKED_BIT != 0 { Some(decode_chunk(&mut reader, seq)?) } else { None };
        let key = reader.optional_bytes()?.map(Bytes::copy_from_slice);
        let payload = Bytes::copy_from_slice(reader.rest());
        Some(WalRecord { seq, timestamp_ms, topic, topic_id, partition, key, payload, chunk })
    }
}

fn decode_chunk(reader: &mut Reader<'_>, seq: u64) -> Option<Chunk> {
    let request = reader.u64()?;
    let flags = reader.u8()?;
    let well_formed = request <= seq && flags & !LAST_FLAG == 0;
    well_formed.then_some(Chunk { request, last: flags & LAST_FLAG != 0 })
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
            chunk: None,
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
            proptest::option::of((any::<u64>(), any::<bool>())),
        )
            .prop_map(|(seq, ts, topic, id, partition, key, payload, chunk)| WalRecord {
                seq,
                timestamp_ms: ts,
                topic,
                topic_id: TopicId(id),
                partition,
                key: key.map(Bytes::from),
                payload: Bytes::from(payload),
                chunk: chunk.map(|(back, last)| Chunk {
                    request: seq - back % seq.saturating_add(1),
                    last,
                }),
            })
    }

    fn chunked(request: u64, last: bool) -> WalRecord {
        let (bytes, _) = test_segment(7, 1, 3);
        let mut record = WalRecord::decode(scan(&bytes).frames[0].body(&bytes)).unwrap();
        record.chunk = Some(Chunk { request, last });
        record
    }

    fn body_of(record: &WalRecord) -> Vec<u8> {
        let mut bytes = Vec::new();
        record.encode_into(&mut bytes);
        scan(&bytes).frames[0].body(&bytes).to_vec()
    }

    /// Records without a chunk keep the layout binaries before chunks wrote (and read).
    #[test]
    fn an_unchunked_record_keeps_the_old_layout() {
        let (bytes, _) = test_segment(7, 1, 3);
        let body = scan(&bytes).frames[0].body(&bytes).to_vec();
        let mut expected = Vec::new();
        for field in [7u64, 1, 1] {
            expected.extend_from_slice(&field.to_le_bytes());
        }
        expected.extend_from_slice(&0u32.to_le_bytes()); // partition
        expected.extend_from_slice(&1u16.to_le_bytes()); // topic length, no chunk bit
        expected.extend_from_slice(b"t");
        expected.extend_from_slice(&u32::MAX.to_le_bytes()); // no key
        expected.extend_from_slice(&[7, 7, 7]);
        assert_eq!(body, expected);
    }

    #[test]
    fn a_chunk_header_is_flagged_by_the_topic_length_and_round_trips() {
        let record = chunked(5, true);
        let body = body_of(&record);
        assert_eq!(u16::from_le_bytes([body[28], body[29]]), 1 | CHUNKED_BIT);
        assert_eq!(body.len(), body_of(&chunked(5, false)).len());
        assert_eq!(WalRecord::decode(&body), Some(record.clone()));
        assert_eq!(record.weight(), FIXED_BYTES + 1 + CHUNK_HEADER_BYTES + 3);
    }

    #[test]
    fn a_chunk_header_naming_a_later_request_or_unknown_flags_is_not_a_record() {
        assert!(WalRecord::decode(&body_of(&chunked(7, false))).is_some());
        assert_eq!(WalRecord::decode(&body_of(&chunked(8, false))), None);
        let mut body = body_of(&chunked(7, true));
        body[30 + 1 + 8] = 2; // the flags byte: an unknown flag
        assert_eq!(WalRecord::decode(&body), None);
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
