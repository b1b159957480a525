//! Recovery of the ingress WAL from the bytes found on disk at start-up: validate every segment,
//! find the torn tail of the last one (to truncate), refuse loudly on corruption, position the
//! dispatcher's cursor at the durable checkpoint, and name the chunked bulk requests that never
//! got their final record written (abandoned: none of their records is ever dispatched).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::checkpoint;
use super::record::{Chunk, WalRecord};
use crate::codec::{ScanEnd, scan};
use crate::constants::MAX_WAL_SEQ;
use crate::io::FileId;
use crate::recovery_error::RecoveryError;

/// What recovery found; `Wal::from_recovered` continues from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredWal {
    /// Segment first sequence → valid length in bytes.
    pub segments: BTreeMap<u64, u64>,
    /// Next sequence number to assign.
    pub next_seq: u64,
    /// Durable checkpoint (first sequence not yet done).
    pub checkpoint: u64,
    /// Segment and byte offset of the record at `checkpoint` (where dispatch resumes).
    pub cursor_segment: u64,
    pub cursor_offset: u64,
    /// A torn tail to cut: (segment first sequence, valid length).
    pub truncate_tail: Option<(u64, u64)>,
    /// Start a new segment at the next append (no usable active segment).
    pub force_new_segment: bool,
    /// The checkpoint file exists.
    pub checkpoint_file_exists: bool,
    /// Records above the checkpoint (the dispatch backlog at start-up).
    pub backlog: u64,
    /// Chunked bulk requests whose final record is not in the WAL, each with how many of its
    /// records are: a crash or a disk failure ended them before their 202, and they are dropped
    /// whole (`Dispatcher::with_abandoned`).
    pub abandoned: BTreeMap<u64, u64>,
}

struct SegmentScan {
    valid_len: u64,
    /// (sequence, byte offset) of every record.
    records: Vec<(u64, u64)>,
    /// (sequence, chunk header) of every record of a chunked request.
    chunks: Vec<(u64, Chunk)>,
    torn: bool,
}

/// Recovers the WAL from its segments' bytes and the checkpoint file's bytes.
pub fn recover(
    segments: &BTreeMap<u64, Bytes>,
    checkpoint_file: Option<&Bytes>,
) -> Result<RecoveredWal, RecoveryError> {
    let found = checkpoint_file.and_then(|bytes| checkpoint::decode_file(bytes));
    if let Some(found) = found.filter(|&c| c > MAX_WAL_SEQ) {
        return Err(RecoveryError::Inconsistent {
            file: FileId::WalCheckpoint.relative_path(),
            what: beyond_max("checkpoint", found),
        });
    }
    let last_first = segments.keys().next_back().copied();
    let mut scans = BTreeMap::new();
    let mut expected_seq: Option<u64> = None;
    for (&first_seq, bytes) in segments {
        let is_last = Some(first_seq) == last_first;
        if first_seq > MAX_WAL_SEQ {
            return Err(inconsistent(first_seq, beyond_max("segment name", first_seq)));
        }
        let scan = scan_segment(first_seq, bytes, is_last)?;
        // Compaction deletes the segments below the checkpoint concurrently (different files
        // complete in any order), so a crash can leave a gap wholly below the durable
        // checkpoint: those records are done, and the segments before it are compacted again.
        let gap_is_done = |expected: u64| expected < first_seq && Some(first_seq) <= found;
        if let Some(expected) = expected_seq
            && expected != first_seq
            && !gap_is_done(expected)
        {
            return Err(inconsistent(first_seq, format!("expected to start at {expected}")));
        }
        expected_seq = Some(first_seq + scan.records.len() as u64);
        scans.insert(first_seq, scan);
    }
    let first_seq = segments.keys().next().copied();
    let wal_end = expected_seq.unwrap_or(0);
    let checkpoint = found.or(first_seq).unwrap_or(0);
    if let Some(first) = first_seq
        && checkpoint < first
    {
        return Err(RecoveryError::Inconsistent {
            file: FileId::WalCheckpoint.relative_path(),
            what: format!("checkpoint {checkpoint} is below the oldest WAL record {first}"),
        });
    }
    let abandoned = abandoned_requests(&scans)?;
    let mut recovered = assemble(scans, checkpoint, wal_end, checkpoint_file.is_some());
    recovered.abandoned = abandoned;
    Ok(recovered)
}

/// The chunked requests whose final record is not in the log, with their record counts. A
/// record of a request after its final record is damage: the WAL never writes one.
fn abandoned_requests(
    scans: &BTreeMap<u64, SegmentScan>,
) -> Result<BTreeMap<u64, u64>, RecoveryError> {
    let mut ended = BTreeSet::new();
    let mut open: BTreeMap<u64, u64> = BTreeMap::new();
    for (&first_seq, scan) in scans {
        for &(seq, chunk) in &scan.chunks {
            if ended.contains(&chunk.request) {
                let what = format!(
                    "record {seq} of chunked request {} follows its final record",
                    chunk.request
                );
                return Err(inconsistent(first_seq, what));
            }
            if chunk.last {
                open.remove(&chunk.request);
                ended.insert(chunk.request);
            } else {
                *open.entry(chunk.request).or_default() += 1;
            }
        }
    }
    Ok(open)
}

fn beyond_max(what: &str, value: u64) -> String {
    format!("{what} {value} is beyond the largest WAL sequence number {MAX_WAL_SEQ} (damaged)")
}

fn assemble(
    scans: BTreeMap<u64, SegmentScan>,
    checkpoint: u64,
    wal_end: u64,
    checkpoint_file_exists: bool,
) -> RecoveredWal {
    let next_seq = wal_end.max(checkpoint);
    let truncate_tail = scans
        .iter()
        .next_back()
        .filter(|(_, scan)| scan.torn)
        .map(|(&first, scan)| (first, scan.valid_len));
    let cursor = scans.iter().find_map(|(&first, scan)| {
        let index = usize::try_from(checkpoint.checked_sub(first)?).ok()?;
        let offset = match scan.records.get(index) {
            Some(&(_, offset)) => offset,
            None if index == scan.records.len() => scan.valid_len,
            None => return None,
        };
        Some((first, offset))
    });
    // A checkpoint past every record (all dispatched, or the records were compacted away) leaves
    // no usable position in the existing segments: start a fresh segment at the checkpoint.
    let force_new_segment = cursor.is_none() || checkpoint > wal_end;
    let (cursor_segment, cursor_offset) = match cursor {
        Some(position) if checkpoint <= wal_end => position,
        _ => (next_seq, 0),
    };
    RecoveredWal {
        segments: scans.iter().map(|(&first, scan)| (first, scan.valid_len)).collect(),
        next_seq,
        checkpoint,
        cursor_segment,
        cursor_offset,
        truncate_tail,
        force_new_segment,
        checkpoint_file_exists,
        backlog: next_seq - checkpoint,
        abandoned: BTreeMap::new(),
    }
}

fn scan_segment(first_seq: u64, bytes: &[u8], is_last: bool) -> Result<SegmentScan, RecoveryError> {
    let file = FileId::WalSegment { first_seq }.relative_path();
    let scanned = scan(bytes);
    let torn = match scanned.end {
        ScanEnd::Clean => false,
        ScanEnd::TornTail { .. } if is_last => true,
        ScanEnd::TornTail { valid_len } => {
            return Err(inconsistent(
                first_seq,
                format!("sealed segment torn at byte {valid_len}"),
            ));
        }
        ScanEnd::Corrupt { bad_pos, next_valid_pos } => {
            return Err(RecoveryError::CorruptLog {
                file,
                bad_pos: bad_pos as u64,
                next_valid_pos: next_valid_pos as u64,
            });
        }
    };
    let mut records = Vec::with_capacity(scanned.frames.len());
    let mut chunks = Vec::new();
    for (index, frame) in scanned.frames.iter().enumerate() {
        let expected = first_seq + index as u64;
        match WalRecord::decode(frame.body(bytes)) {
            Some(record) if record.seq == expected => {
                records.push((expected, frame.pos as u64));
                chunks.extend(record.chunk.map(|chunk| (expected, chunk)));
            }
            _ => {
                let what = format!("record at byte {} is not sequence {expected}", frame.pos);
                return Err(inconsistent(first_seq, what));
            }
        }
    }
    Ok(SegmentScan { valid_len: scanned.valid_len() as u64, records, chunks, torn })
}

fn inconsistent(first_seq: u64, what: String) -> RecoveryError {
    RecoveryError::Inconsistent { file: FileId::WalSegment { first_seq }.relative_path(), what }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(first: u64, count: u64) -> Vec<u8> {
        super::super::record::test_segment(first, count, 100).0
    }

    fn files(parts: &[(u64, Vec<u8>)]) -> BTreeMap<u64, Bytes> {
        parts.iter().map(|(f, b)| (*f, Bytes::from(b.clone()))).collect()
    }

    /// Issue 9, defect 4: a CRC-valid checkpoint near `u64::MAX` used to be accepted, and the
    /// dispatcher's `checkpoint + lookahead` then overflowed.
    #[test]
    fn a_checkpoint_or_segment_beyond_the_largest_sequence_is_refused() {
        for value in [u64::MAX, u64::MAX - 5, MAX_WAL_SEQ + 1] {
            let ckpt = Bytes::from(checkpoint::encode_slot(value));
            let error = recover(&files(&[(0, segment(0, 3))]), Some(&ckpt)).unwrap_err();
            assert!(error.to_string().contains("beyond the largest WAL sequence"), "{error}");
            let error = recover(&files(&[(value, Vec::new())]), None).unwrap_err();
            assert!(error.to_string().contains("segment name"), "{error}");
        }
        let ckpt = Bytes::from(checkpoint::encode_slot(MAX_WAL_SEQ));
        let got = recover(&BTreeMap::new(), Some(&ckpt)).expect("the bound itself is accepted");
        assert_eq!((got.next_seq, got.backlog), (MAX_WAL_SEQ, 0));
    }

    #[test]
    fn empty_disk_starts_at_zero() {
        let got = recover(&BTreeMap::new(), None).unwrap();
        assert_eq!((got.next_seq, got.checkpoint, got.force_new_segment), (0, 0, true));
    }

    #[test]
    fn torn_tail_of_last_segment_is_cut_and_cursor_sits_at_checkpoint() {
        let mut last = segment(10, 5);
        let cut = last.len() - 30;
        last.truncate(cut);
        let ckpt = Bytes::from(checkpoint::encode_slot(12));
        let got = recover(&files(&[(0, segment(0, 10)), (10, last)]), Some(&ckpt)).unwrap();
        assert_eq!(got.next_seq, 14);
        assert_eq!(got.checkpoint, 12);
        assert_eq!(got.cursor_segment, 10);
        assert!(got.truncate_tail.is_some());
        assert_eq!(got.backlog, 2);
    }

    /// Found by the swarm once segments were small (seed 0x1e1): compaction deleted segments 52
    /// and 64 at once, the delete of 64 landed first, and a crash kept 52: recovery refused the
    /// gap 64..70 although every record in it was below the checkpoint.
    #[test]
    fn a_gap_wholly_below_the_checkpoint_is_compaction_interrupted_not_damage() {
        let parts = files(&[(0, segment(0, 10)), (20, segment(20, 5))]);
        let ckpt = Bytes::from(checkpoint::encode_slot(22));
        let got = recover(&parts, Some(&ckpt)).expect("the gap 10..20 is below the checkpoint");
        assert_eq!((got.next_seq, got.checkpoint, got.backlog), (25, 22, 3));
        let third = scan(&segment(20, 5)).frames[2].pos as u64;
        assert_eq!((got.cursor_segment, got.cursor_offset), (20, third));
        let ckpt = Bytes::from(checkpoint::encode_slot(15));
        assert!(recover(&parts, Some(&ckpt)).is_err(), "records 15..20 were not done");
        assert!(recover(&parts, None).is_err(), "no checkpoint: a gap is damage");
    }

    #[test]
    fn a_torn_sealed_segment_is_an_error() {
        let mut first = segment(0, 10);
        first.truncate(first.len() - 5);
        assert!(recover(&files(&[(0, first), (9, segment(9, 2))]), None).is_err());
    }

    #[test]
    fn corruption_before_valid_records_is_an_error() {
        let mut only = segment(0, 10);
        only[20] ^= 1;
        let err = recover(&files(&[(0, only)]), None).unwrap_err();
        assert!(matches!(err, RecoveryError::CorruptLog { .. }), "{err}");
    }

    /// Records 0..6 with a chunked request from 1 (records 1, 3 and, if `ended`, 5) and small
    /// records between its chunks.
    fn chunked_log(ended: bool) -> Vec<u8> {
        let (plain, starts) = super::super::record::test_segment(0, 6, 20);
        let mut out = Vec::new();
        for (index, &start) in starts.iter().enumerate() {
            let end = starts.get(index + 1).copied().unwrap_or(plain.len());
            let frame = &plain[start..end];
            let mut record = WalRecord::decode(scan(frame).frames[0].body(frame)).unwrap();
            let seq = record.seq;
            if seq == 1 || seq == 3 || (seq == 5 && ended) {
                record.chunk = Some(Chunk { request: 1, last: seq == 5 });
            }
            record.encode_into(&mut out);
        }
        out
    }

    #[test]
    fn a_chunked_request_without_its_final_record_is_abandoned_whatever_the_checkpoint() {
        let whole = recover(&files(&[(0, chunked_log(true))]), None).unwrap();
        assert_eq!(whole.abandoned, BTreeMap::new());
        let cut = recover(&files(&[(0, chunked_log(false))]), None).unwrap();
        assert_eq!(cut.abandoned, BTreeMap::from([(1, 2)]));
        // An earlier start-up dropped part of it already: the rest is still dropped.
        let ckpt = Bytes::from(checkpoint::encode_slot(3));
        let later = recover(&files(&[(0, chunked_log(false))]), Some(&ckpt)).unwrap();
        assert_eq!(later.abandoned, BTreeMap::from([(1, 2)]));
    }

    #[test]
    fn a_record_of_a_chunked_request_after_its_final_record_is_an_error() {
        let mut log = chunked_log(true);
        let mut late = WalRecord::decode(&segment(6, 1)[8..]).unwrap();
        late.chunk = Some(Chunk { request: 1, last: false });
        late.encode_into(&mut log);
        let error = recover(&files(&[(0, log)]), None).unwrap_err();
        assert!(error.to_string().contains("follows its final record"), "{error}");
    }

    #[test]
    fn checkpoint_at_end_of_wal_starts_a_new_segment() {
        let ckpt = Bytes::from(checkpoint::encode_slot(10));
        let got = recover(&files(&[(0, segment(0, 10))]), Some(&ckpt)).unwrap();
        assert_eq!((got.next_seq, got.backlog), (10, 0));
        assert_eq!((got.cursor_segment, got.cursor_offset), (0, segment(0, 10).len() as u64));
    }
}
