//! What the consumer journal records (`journal.rs`), one entry per frame: a delivery's count, an
//! ack, and, at the start of every journal file, the whole durable state of each partition's
//! queue (the file's *image*, closed by `ImageEnd`). Decoding accepts only what `encode`
//! writes (canonical: what decodes re-encodes to the same bytes), so a damaged entry is never
//! mistaken for another.

use crate::codec::Reader;
use crate::ids::{PartitionKey, TopicId};

/// One record of the consumer journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalEntry {
    /// `offset` of `key` was delivered for the `count`-th time (count ≥ 1). Durable before the
    /// delivery is answered, so a delivery count never goes back, through any crash.
    Delivered { key: PartitionKey, offset: u64, count: u32 },
    /// `offset` of `key` is settled (acked, or moved to the dead-letter topic): never
    /// delivered again. Durable before the ack is answered.
    Acked { key: PartitionKey, offset: u64 },
    /// A partition's whole durable queue state, in a journal file's image: every offset below
    /// `frontier` is settled; `acked` are settled offsets at or above it (ascending);
    /// `deliveries` the delivery counts of unsettled ones (ascending offsets, counts ≥ 1).
    State { key: PartitionKey, frontier: u64, acked: Vec<u64>, deliveries: Vec<(u64, u32)> },
    /// The image of a journal file is complete: what follows are ordinary entries.
    ImageEnd,
}

const TAG_DELIVERED: u8 = 1;
const TAG_ACKED: u8 = 2;
const TAG_STATE: u8 = 3;
const TAG_IMAGE_END: u8 = 4;

impl JournalEntry {
    /// Appends the entry's encoding (a frame body) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            JournalEntry::Delivered { key, offset, count } => {
                out.push(TAG_DELIVERED);
                put_key(out, *key);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
            }
            JournalEntry::Acked { key, offset } => {
                out.push(TAG_ACKED);
                put_key(out, *key);
                out.extend_from_slice(&offset.to_le_bytes());
            }
            JournalEntry::State { key, frontier, acked, deliveries } => {
                out.push(TAG_STATE);
                put_key(out, *key);
                out.extend_from_slice(&frontier.to_le_bytes());
                put_len(out, acked.len());
                for offset in acked {
                    out.extend_from_slice(&offset.to_le_bytes());
                }
                put_len(out, deliveries.len());
                for (offset, count) in deliveries {
                    out.extend_from_slice(&offset.to_le_bytes());
                    out.extend_from_slice(&count.to_le_bytes());
                }
            }
            JournalEntry::ImageEnd => out.push(TAG_IMAGE_END),
        }
    }

    /// The encoding as a new buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Decodes one frame body; `None` for anything `encode` would not have written.
    pub fn decode(body: &[u8]) -> Option<JournalEntry> {
        let mut reader = Reader::new(body);
        let entry = match reader.take(1)?[0] {
            TAG_DELIVERED => {
                let key = take_key(&mut reader)?;
                let offset = reader.u64()?;
                let count = reader.u32()?;
                (count >= 1).then_some(JournalEntry::Delivered { key, offset, count })?
            }
            TAG_ACKED => {
                let key = take_key(&mut reader)?;
                JournalEntry::Acked { key, offset: reader.u64()? }
            }
            TAG_STATE => decode_state(&mut reader)?,
            TAG_IMAGE_END => JournalEntry::ImageEnd,
            _ => return None,
        };
        (reader.remaining() == 0).then_some(entry)
    }
}

fn decode_state(reader: &mut Reader<'_>) -> Option<JournalEntry> {
    let key = take_key(reader)?;
    let frontier = reader.u64()?;
    let acked_len = reader.u32()? as usize;
    // Reserve only what the remaining bytes can hold: a damaged length cannot allocate much.
    let mut acked = Vec::with_capacity(acked_len.min(reader.remaining() / 8));
    for _ in 0..acked_len {
        acked.push(reader.u64()?);
    }
    let deliveries_len = reader.u32()? as usize;
    let mut deliveries = Vec::with_capacity(deliveries_len.min(reader.remaining() / 12));
    for _ in 0..deliveries_len {
        deliveries.push((reader.u64()?, reader.u32()?));
    }
    let ascending = acked.windows(2).all(|w| w[0] < w[1])
        && deliveries.windows(2).all(|w| w[0].0 < w[1].0)
        && acked.first().is_none_or(|&first| first >= frontier)
        && deliveries.first().is_none_or(|&(first, _)| first >= frontier)
        && deliveries.iter().all(|&(_, count)| count >= 1);
    ascending.then_some(JournalEntry::State { key, frontier, acked, deliveries })
}

fn put_key(out: &mut Vec<u8>, key: PartitionKey) {
    out.extend_from_slice(&key.topic.0.to_le_bytes());
    out.extend_from_slice(&key.partition.to_le_bytes());
}

fn take_key(reader: &mut Reader<'_>) -> Option<PartitionKey> {
    Some(PartitionKey { topic: TopicId(reader.u64()?), partition: reader.u32()? })
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).expect("invariant: a queue's state is bounded by its window");
    out.extend_from_slice(&len.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PartitionKey {
        PartitionKey { topic: TopicId(7), partition: 2 }
    }

    fn samples() -> Vec<JournalEntry> {
        vec![
            JournalEntry::Delivered { key: key(), offset: 42, count: 3 },
            JournalEntry::Acked { key: key(), offset: u64::MAX },
            JournalEntry::State { key: key(), frontier: 0, acked: vec![], deliveries: vec![] },
            JournalEntry::State {
                key: key(),
                frontier: 10,
                acked: vec![10, 12, 400],
                deliveries: vec![(11, 1), (13, 9)],
            },
            JournalEntry::ImageEnd,
        ]
    }

    #[test]
    fn entries_round_trip() {
        for entry in samples() {
            assert_eq!(JournalEntry::decode(&entry.encode()), Some(entry.clone()), "{entry:?}");
        }
    }

    #[test]
    fn truncated_extended_or_non_canonical_bytes_do_not_decode() {
        for entry in samples() {
            let bytes = entry.encode();
            for cut in 0..bytes.len() {
                assert_eq!(JournalEntry::decode(&bytes[..cut]), None, "{entry:?} cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(JournalEntry::decode(&longer), None, "{entry:?} with a trailing byte");
        }
        let zero_count = JournalEntry::Delivered { key: key(), offset: 1, count: 1 }.encode();
        let mut zero = zero_count.clone();
        let at = zero.len() - 4;
        zero[at..].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(JournalEntry::decode(&zero), None, "a delivery count of 0");
        let unordered =
            JournalEntry::State { key: key(), frontier: 5, acked: vec![9, 7], deliveries: vec![] };
        assert_eq!(JournalEntry::decode(&unordered.encode()), None, "acked out of order");
        let below =
            JournalEntry::State { key: key(), frontier: 5, acked: vec![4], deliveries: vec![] };
        assert_eq!(JournalEntry::decode(&below.encode()), None, "acked below the frontier");
        assert_eq!(JournalEntry::decode(&[9]), None, "unknown tag");
    }
}
