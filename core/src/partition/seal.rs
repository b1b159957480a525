//! Seal files (docs/design.md §4.4): a small summary of one partition segment, written beside
//! it in the background once the segment is sealed by a roll, and for the active segment at
//! clean shutdown. Start-up adopts a segment from its seal instead of reading and checking every
//! byte of it, so start-up reads little more than the active segment after a crash, and nearly
//! nothing after a clean shutdown.
//!
//! A seal is trusted only if it decodes (magic, version, canonical content, CRC), names the
//! segment's first offset, records exactly the segment file's current length, and starts where
//! the segment before it ended (`PartitionScan::open_segment`). Committed bytes of a segment are
//! never rewritten (commits append; a repair truncates back to the committed size, never below),
//! so a file of the recorded length holds the bytes the seal describes. Anything else is scanned
//! as before: a missing, torn or stale seal costs time, never correctness. Damage inside an
//! adopted segment is found by the CRC check of every frame on every read.
//!
//! Encoding (little endian): magic `NSEL`, version `u16`, base, end (the offset after the last
//! record), size (bytes of the segment file), newest_ms (its newest record's timestamp, what
//! retention judges), the sparse index entries (`u32` count, then offset and byte position
//! each), the known durable checkpoints of origins (`u32` count, then origin `u32` and
//! checkpoint `u64` each), the dedup tail (`u32` count of origins, then per origin its id,
//! a `u32` count and (sequence `u64`, fingerprint `u32`) entries), and a CRC32 of everything
//! before it. The tail holds only this segment's records whose sequence is at or above their
//! origin's known checkpoint: origins never re-send below it (`dedup.rs`). A 64 MiB segment's
//! index is about 16 KiB; its tail is usually a handful of records (those committed within one
//! checkpoint interval of the roll) and is bounded by the segment's records and the dedup horizon.

use std::collections::BTreeMap;

use super::index::IndexEntry;
use crate::codec::Reader;
use crate::ids::NodeId;

const MAGIC: &[u8; 4] = b"NSEL";
const VERSION: u16 = 1;
const CRC_BYTES: usize = 4;
const ENTRY_BYTES: usize = 16;
const CHECKPOINT_BYTES: usize = 12;
const TAIL_ENTRY_BYTES: usize = 12;

/// Replayable records of one segment: origin → sequence → content fingerprint.
pub type DedupTail = BTreeMap<NodeId, BTreeMap<u64, u32>>;

/// What a seal file says about its segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seal {
    /// First offset of the segment.
    pub base: u64,
    /// The offset after its last record.
    pub end: u64,
    /// Bytes of the segment file.
    pub size: u64,
    /// Timestamp of its newest record.
    pub newest_ms: u64,
    /// The segment's sparse index.
    pub entries: Vec<IndexEntry>,
    /// The highest durable checkpoint each origin reported to the partition.
    pub checkpoints: BTreeMap<NodeId, u64>,
    /// The segment's records an origin may still replay.
    pub tail: DedupTail,
}

impl Seal {
    /// The seal file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let tail_entries: usize = self.tail.values().map(BTreeMap::len).sum();
        let mut out = Vec::with_capacity(
            64 + self.entries.len() * ENTRY_BYTES + tail_entries * TAIL_ENTRY_BYTES,
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        for value in [self.base, self.end, self.size, self.newest_ms] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        put_len(&mut out, self.entries.len());
        for entry in &self.entries {
            out.extend_from_slice(&entry.offset.to_le_bytes());
            out.extend_from_slice(&entry.pos.to_le_bytes());
        }
        put_len(&mut out, self.checkpoints.len());
        for (origin, checkpoint) in &self.checkpoints {
            out.extend_from_slice(&origin.0.to_le_bytes());
            out.extend_from_slice(&checkpoint.to_le_bytes());
        }
        put_len(&mut out, self.tail.len());
        for (origin, seqs) in &self.tail {
            out.extend_from_slice(&origin.0.to_le_bytes());
            put_len(&mut out, seqs.len());
            for (seq, fingerprint) in seqs {
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&fingerprint.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a seal file; `None` unless it is whole, intact and canonical (what decodes
    /// re-encodes to the same bytes) and describes a consistent segment.
    pub fn decode(bytes: &[u8]) -> Option<Seal> {
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(CRC_BYTES)?)?;
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let mut reader = Reader::new(body);
        if reader.take(MAGIC.len())? != MAGIC || reader.u16()? != VERSION {
            return None;
        }
        let (base, end, size, newest_ms) =
            (reader.u64()?, reader.u64()?, reader.u64()?, reader.u64()?);
        let entries = read_entries(&mut reader)?;
        let checkpoints = read_checkpoints(&mut reader)?;
        let tail = read_tail(&mut reader)?;
        let seal = Seal { base, end, size, newest_ms, entries, checkpoints, tail };
        (reader.remaining() == 0 && seal.is_consistent()).then_some(seal)
    }

    /// The index starts at the first record, at byte 0, and increases within the segment; an
    /// empty segment has no entries and no bytes; the tail holds at most the segment's records.
    fn is_consistent(&self) -> bool {
        let Some(records) = self.end.checked_sub(self.base) else { return false };
        let tail_entries: u64 = self.tail.values().map(|seqs| seqs.len() as u64).sum();
        let first_ok = match self.entries.first() {
            None => records == 0 && self.size == 0,
            Some(first) => first.offset == self.base && first.pos == 0 && self.size > 0,
        };
        let increasing = self
            .entries
            .windows(2)
            .all(|pair| pair[0].offset < pair[1].offset && pair[0].pos < pair[1].pos);
        let last_ok = self.entries.last().is_none_or(|e| e.offset < self.end && e.pos < self.size);
        first_ok && increasing && last_ok && tail_entries <= records
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).expect("invariant: a segment's index and tail fit u32 counts");
    out.extend_from_slice(&len.to_le_bytes());
}

/// A count of items of `item_bytes` each, refused if the rest of the input cannot hold them
/// (so a garbled count never reserves more than the input's size).
fn read_count(reader: &mut Reader<'_>, item_bytes: usize) -> Option<usize> {
    let count = reader.u32()? as usize;
    (count <= reader.remaining() / item_bytes).then_some(count)
}

fn read_entries(reader: &mut Reader<'_>) -> Option<Vec<IndexEntry>> {
    let count = read_count(reader, ENTRY_BYTES)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push(IndexEntry { offset: reader.u64()?, pos: reader.u64()? });
    }
    Some(entries)
}

fn read_checkpoints(reader: &mut Reader<'_>) -> Option<BTreeMap<NodeId, u64>> {
    let count = read_count(reader, CHECKPOINT_BYTES)?;
    let mut checkpoints = BTreeMap::new();
    for _ in 0..count {
        let origin = NodeId(reader.u32()?);
        let increasing = checkpoints.last_key_value().is_none_or(|(&last, _)| last < origin);
        if !increasing {
            return None;
        }
        checkpoints.insert(origin, reader.u64()?);
    }
    Some(checkpoints)
}

fn read_tail(reader: &mut Reader<'_>) -> Option<DedupTail> {
    let origins = read_count(reader, 8)?;
    let mut tail = DedupTail::new();
    for _ in 0..origins {
        let origin = NodeId(reader.u32()?);
        let increasing = tail.last_key_value().is_none_or(|(&last, _)| last < origin);
        let count = read_count(reader, TAIL_ENTRY_BYTES)?;
        if !increasing || count == 0 {
            return None;
        }
        let mut seqs = BTreeMap::new();
        for _ in 0..count {
            let seq = reader.u64()?;
            if seqs.last_key_value().is_some_and(|(&last, _)| last >= seq) {
                return None;
            }
            seqs.insert(seq, reader.u32()?);
        }
        tail.insert(origin, seqs);
    }
    Some(tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Seal {
        let entries = vec![
            IndexEntry { offset: 100, pos: 0 },
            IndexEntry { offset: 180, pos: 65_600 },
            IndexEntry { offset: 260, pos: 131_300 },
        ];
        let tail = DedupTail::from([
            (NodeId(1), BTreeMap::from([(7_000, 11), (7_001, 12)])),
            (NodeId(3), BTreeMap::from([(42, 9)])),
        ]);
        Seal {
            base: 100,
            end: 300,
            size: 160_000,
            newest_ms: 1_700_000_000_000,
            entries,
            checkpoints: BTreeMap::from([(NodeId(1), 7_000), (NodeId(3), 40)]),
            tail,
        }
    }

    #[test]
    fn a_seal_round_trips() {
        let seal = sample();
        assert_eq!(Seal::decode(&seal.encode()), Some(seal));
        let empty = Seal { base: 5, end: 5, ..Seal::default() };
        assert_eq!(Seal::decode(&empty.encode()), Some(empty));
    }

    #[test]
    fn a_torn_or_garbled_seal_is_refused() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert_eq!(Seal::decode(&bytes[..len]), None, "cut at {len}");
        }
        for i in 0..bytes.len() {
            let mut garbled = bytes.clone();
            garbled[i] ^= 0x10;
            assert_eq!(Seal::decode(&garbled), None, "byte {i} flipped");
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 4]);
        assert_eq!(Seal::decode(&longer), None, "trailing bytes");
    }

    #[test]
    fn an_inconsistent_seal_is_refused_even_with_a_good_crc() {
        let unsorted = Seal {
            entries: vec![IndexEntry { offset: 100, pos: 0 }, IndexEntry { offset: 100, pos: 9 }],
            ..sample()
        };
        let first_not_at_base =
            Seal { entries: vec![IndexEntry { offset: 101, pos: 0 }], ..sample() };
        let end_before_base = Seal { end: 99, ..sample() };
        let empty_with_bytes = Seal { base: 5, end: 5, size: 3, ..Seal::default() };
        for seal in [unsorted, first_not_at_base, end_before_base, empty_with_bytes] {
            assert_eq!(Seal::decode(&seal.encode()), None, "{seal:?}");
        }
    }

    proptest! {
        /// Decoding never panics, and what decodes re-encodes to the same bytes.
        #[test]
        fn decoding_is_total_and_canonical(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Some(seal) = Seal::decode(&bytes) {
                prop_assert_eq!(seal.encode(), bytes);
            }
        }

        #[test]
        fn a_garbled_body_with_its_crc_fixed_never_panics(flip in 0usize..200, bit in 0u8..8) {
            let mut bytes = sample().encode();
            let body = bytes.len() - CRC_BYTES;
            bytes[flip % body] ^= 1 << bit;
            let crc = crc32fast::hash(&bytes[..body]);
            bytes[body..].copy_from_slice(&crc.to_le_bytes());
            if let Some(seal) = Seal::decode(&bytes) {
                prop_assert_eq!(seal.encode(), bytes);
            }
        }
    }
}
