//! Reading WAL records for dispatch when the bytes may be damaged: decode the run of valid
//! records at the cursor, and, when the record at the cursor is damaged beyond doubt, find where
//! the next valid record starts so dispatch can go on without it.

use super::record::WalRecord;
use crate::codec;

/// Reads at one position that must fail before its records are declared lost (a read error or
/// a transient bit flip on the way must not cost a healthy record).
pub const DAMAGED_READS_BEFORE_SKIP: u32 = 10;

/// The valid records at the start of `bytes`, in sequence from `expected`, each with its frame
/// length. Stops at the first frame that is damaged or out of sequence.
pub fn decode_run(bytes: &[u8], mut expected: u64) -> Vec<(WalRecord, u64)> {
    let mut records = Vec::new();
    let mut pos = 0;
    while let Some(frame) = codec::frame_at(bytes, pos) {
        let Some(record) = WalRecord::decode(frame.body(bytes)).filter(|r| r.seq == expected)
        else {
            break;
        };
        records.push((record, (frame.end() - pos) as u64));
        expected += 1;
        pos = frame.end();
    }
    records
}

/// Where dispatch resumes after the damaged record `after` at the start of `bytes`: the valid
/// record with the smallest sequence in `after + 1..before` found anywhere in `bytes` (its byte
/// position and sequence). The smallest, not the first found: a misdirected write can leave
/// valid copies of *later* records inside the damaged region, and resuming at one of them would
/// skip healthy records.
pub fn find_resume(bytes: &[u8], after: u64, before: u64) -> Option<(usize, u64)> {
    (1..bytes.len())
        .filter_map(|pos| {
            let frame = codec::frame_at(bytes, pos)?;
            let record = WalRecord::decode(frame.body(bytes))?;
            (record.seq > after && record.seq < before).then_some((pos, record.seq))
        })
        .min_by_key(|&(_, seq)| seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(first: u64, count: u64) -> (Vec<u8>, Vec<usize>) {
        super::super::record::test_segment(first, count, 40)
    }

    #[test]
    fn a_damaged_record_is_skipped_to_the_next_valid_one() {
        let (mut bytes, starts) = records(10, 4);
        bytes[starts[1] + 12] ^= 0xff; // damage record 11's body
        assert_eq!(decode_run(&bytes, 10).len(), 1);
        let rest = &bytes[starts[1]..];
        assert!(decode_run(rest, 11).is_empty());
        assert_eq!(find_resume(rest, 11, 100), Some((starts[2] - starts[1], 12)));
        assert_eq!(find_resume(rest, 11, 12), None, "only sequences of this segment count");
    }

    #[test]
    fn a_misdirected_copy_of_a_later_record_does_not_skip_healthy_ones() {
        let (mut bytes, starts) = records(10, 6);
        let (later, _) = records(14, 1);
        // Record 14's frame lands over record 11 (a misdirected write): 11 is damaged.
        bytes[starts[1]..starts[1] + later.len()].copy_from_slice(&later);
        let rest = &bytes[starts[1]..];
        assert_eq!(find_resume(rest, 11, 100).map(|(_, seq)| seq), Some(12));
    }
}
