//! Raft's view of our log (`LogStore`, an in-memory `raft::Storage`) and the two files that make
//! it durable, with their recovery.
//!
//! Why not raft's `MemStorage`: its `snapshot()` fabricates a data-less snapshot at the commit
//! index, while a lagging follower needs our state machine image at a known index. `LogStore`
//! keeps the latest image with its metadata and serves exactly that.
//!
//! Files (see `meta/mod.rs` for how they are written):
//! * `MetaRaftLog`: CRC frames (`codec::put_frame`). The first frame is a header naming the
//!   snapshot (by sequence number) the log continues; then entries and hard states in the order
//!   they were produced. Replay truncates-and-appends like Raft does, so a later entry at an index
//!   replaces earlier ones. A torn tail is truncated; a bad frame followed by valid ones is an error.
//! * `MetaSnapshot`: self-delimiting records `magic, seq, len, crc, body` holding the image, the
//!   Raft metadata, the hard state and every log entry past the snapshot index. A new record never
//!   overwrites the newest valid one, so a torn write falls back to the previous snapshot, and the
//!   log is reset (emptied, then given a new header) only after the new record is durable.

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use crate::codec::{Reader, ScanEnd, put_frame, scan};
use crate::io::FileId;
use crate::recovery_error::RecoveryError;

/// Raft's storage: hard state, configuration, the latest snapshot and the entries after it.
pub struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// Latest snapshot (image in `data`); index 0 means none yet.
    snapshot: Snapshot,
    /// `entries[i].index == snapshot index + 1 + i`.
    entries: Vec<Entry>,
}

impl LogStore {
    pub fn new(conf_state: ConfState) -> LogStore {
        LogStore {
            hard_state: HardState::default(),
            conf_state,
            snapshot: Snapshot::default(),
            entries: Vec::new(),
        }
    }

    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    pub fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    pub fn last(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn set_hard_state(&mut self, hard_state: HardState) {
        self.hard_state = hard_state;
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// Entries with index greater than `index`.
    pub fn entries_after(&self, index: u64) -> &[Entry] {
        let skip = index.saturating_sub(self.snapshot_index()) as usize;
        &self.entries[skip.min(self.entries.len())..]
    }

    /// Appends entries, replacing any conflicting suffix (Raft's truncate-and-append). Entries at
    /// or below the snapshot index are already covered by it and skipped.
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), String> {
        let first = self.first();
        let entries: Vec<&Entry> = entries.iter().filter(|e| e.index >= first).collect();
        let Some(head) = entries.first() else {
            return Ok(());
        };
        if head.index > self.last() + 1 {
            return Err(format!("entry {} would leave a gap after {}", head.index, self.last()));
        }
        self.entries.truncate((head.index - first) as usize);
        for (expected, entry) in (head.index..).zip(&entries) {
            if entry.index != expected {
                return Err(format!("entry {} out of order", entry.index));
            }
            self.entries.push((*entry).clone());
        }
        Ok(())
    }

    /// Installs a snapshot received from the leader: it replaces the whole log.
    pub fn install_snapshot(&mut self, snapshot: Snapshot) {
        let meta = snapshot.get_metadata();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.conf_state = meta.get_conf_state().clone();
        self.entries.clear();
        self.snapshot = snapshot;
    }

    /// Replaces the snapshot by a newer local one and drops the entries it covers.
    pub fn compact_to(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        assert!(
            index >= self.snapshot_index() && index <= self.last(),
            "invariant: a local snapshot lies within the log"
        );
        let drop = (index - self.snapshot_index()) as usize;
        self.entries.drain(..drop);
        self.snapshot = snapshot;
    }

    /// Term of the entry at `index` if it is the snapshot's or still in the log.
    pub fn term_of(&self, index: u64) -> Option<u64> {
        if index == self.snapshot_index() {
            return Some(self.snapshot.get_metadata().term);
        }
        if index < self.first() || index > self.last() {
            return None;
        }
        Some(self.entries[(index - self.first()) as usize].term)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut entries = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index < self.snapshot_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_of(index).ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() == 0 || self.snapshot_index() < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}

// ---- Raft log file ------------------------------------------------------------------------

const TAG_HEADER: u8 = 1;
const TAG_ENTRY: u8 = 2;
const TAG_HARD_STATE: u8 = 3;

/// One frame of the Raft log file.
#[derive(Clone, Debug, PartialEq)]
pub enum LogFrame {
    /// First frame: the log continues the snapshot with this sequence number (0: none).
    Header {
        base_seq: u64,
    },
    Entry(Entry),
    HardState(HardState),
}

/// Appends the frame for a header to `out`.
pub fn put_header(out: &mut Vec<u8>, base_seq: u64) {
    let mut body = vec![TAG_HEADER];
    body.extend_from_slice(&base_seq.to_le_bytes());
    put_frame(out, &body);
}

/// Appends the frames for new entries and an optional hard state to `out`.
pub fn put_entries(out: &mut Vec<u8>, entries: &[Entry], hard_state: Option<&HardState>) {
    for entry in entries {
        let mut body = vec![TAG_ENTRY];
        body.extend_from_slice(&entry.write_to_bytes().expect("invariant: entries encode"));
        put_frame(out, &body);
    }
    if let Some(hs) = hard_state {
        let mut body = vec![TAG_HARD_STATE];
        put_hard_state(&mut body, hs);
        put_frame(out, &body);
    }
}

fn put_hard_state(out: &mut Vec<u8>, hs: &HardState) {
    for v in [hs.term, hs.vote, hs.commit] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn get_hard_state(r: &mut Reader<'_>) -> Option<HardState> {
    Some(HardState { term: r.u64()?, vote: r.u64()?, commit: r.u64()?, ..HardState::default() })
}

fn decode_frame(body: &[u8]) -> Option<LogFrame> {
    let mut r = Reader::new(body);
    let frame = match r.take(1)?[0] {
        TAG_HEADER => LogFrame::Header { base_seq: r.u64()? },
        TAG_ENTRY => LogFrame::Entry(Entry::parse_from_bytes(r.rest()).ok()?),
        TAG_HARD_STATE => LogFrame::HardState(get_hard_state(&mut r)?),
        _ => return None,
    };
    r.rest().is_empty().then_some(frame)
}

/// Merges a persisted hard state into `into` monotonically: a term never goes back, a vote cast
/// in a term is kept, the commit index never decreases.
pub fn merge_hard_state(into: &mut HardState, hs: &HardState) {
    if hs.term > into.term {
        into.term = hs.term;
        into.vote = hs.vote;
    } else if hs.term == into.term && into.vote == 0 {
        into.vote = hs.vote;
    }
    into.commit = into.commit.max(hs.commit);
}

/// What the Raft log file holds.
pub struct LogScan {
    pub base_seq: Option<u64>,
    pub frames: Vec<LogFrame>,
    pub valid_len: u64,
    pub file_len: u64,
}

/// Scans the Raft log file. A torn tail (or zero fill) is reported through `valid_len < file_len`.
pub fn scan_log(bytes: &[u8]) -> Result<LogScan, RecoveryError> {
    let file = FileId::MetaRaftLog.relative_path();
    let scanned = scan(bytes);
    if let ScanEnd::Corrupt { bad_pos, next_valid_pos } = scanned.end {
        return Err(RecoveryError::CorruptLog {
            file,
            bad_pos: bad_pos as u64,
            next_valid_pos: next_valid_pos as u64,
        });
    }
    let mut frames = Vec::with_capacity(scanned.frames.len());
    for found in &scanned.frames {
        let frame = decode_frame(found.body(bytes)).ok_or_else(|| RecoveryError::Inconsistent {
            file: file.clone(),
            what: format!("undecodable frame at byte {}", found.pos),
        })?;
        frames.push(frame);
    }
    let base_seq = match frames.first() {
        None => None,
        Some(LogFrame::Header { base_seq }) => Some(*base_seq),
        Some(_) => {
            return Err(RecoveryError::Inconsistent {
                file,
                what: "the log does not start with a header".into(),
            });
        }
    };
    Ok(LogScan {
        base_seq,
        frames,
        // Also cuts zero fill after the last frame: an append must follow the frames directly.
        valid_len: scanned.valid_len() as u64,
        file_len: bytes.len() as u64,
    })
}

// ---- Snapshot file ------------------------------------------------------------------------

const SNAP_MAGIC: &[u8; 8] = b"NRDMSNP1";
const SNAP_HEADER_BYTES: usize = 8 + 8 + 8 + 4;

/// A snapshot record: everything needed to rebuild Raft's storage and the state machine.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapRecord {
    pub seq: u64,
    pub metadata: SnapshotMetadata,
    pub hard_state: HardState,
    pub image: Bytes,
    /// Entries after `metadata.index` that the log held when the record was made.
    pub entries: Vec<Entry>,
}

/// Bytes of a snapshot record.
pub fn encode_snap_record(record: &SnapRecord) -> Vec<u8> {
    let mut body = Vec::new();
    let meta = record.metadata.write_to_bytes().expect("invariant: metadata encodes");
    body.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    body.extend_from_slice(&meta);
    put_hard_state(&mut body, &record.hard_state);
    body.extend_from_slice(&(record.image.len() as u64).to_le_bytes());
    body.extend_from_slice(&record.image);
    body.extend_from_slice(&(record.entries.len() as u32).to_le_bytes());
    for entry in &record.entries {
        let bytes = entry.write_to_bytes().expect("invariant: entries encode");
        body.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        body.extend_from_slice(&bytes);
    }
    let mut out = Vec::with_capacity(SNAP_HEADER_BYTES + body.len());
    out.extend_from_slice(SNAP_MAGIC);
    out.extend_from_slice(&record.seq.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&snap_crc(record.seq, &body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn snap_crc(seq: u64, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(&(body.len() as u64).to_le_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// The valid record starting at `pos`, with its length in bytes.
fn snap_record_at(bytes: &[u8], pos: usize) -> Option<(SnapRecord, usize)> {
    let mut r = Reader::new(bytes.get(pos..)?);
    if r.take(8)? != SNAP_MAGIC {
        return None;
    }
    let seq = r.u64()?;
    let len = usize::try_from(r.u64()?).ok()?;
    let crc = r.u32()?;
    let body = r.take(len)?;
    if snap_crc(seq, body) != crc {
        return None;
    }
    let record = decode_snap_body(seq, body)?;
    Some((record, SNAP_HEADER_BYTES + len))
}

fn decode_snap_body(seq: u64, body: &[u8]) -> Option<SnapRecord> {
    let mut r = Reader::new(body);
    let meta_len = r.u32()? as usize;
    let metadata = SnapshotMetadata::parse_from_bytes(r.take(meta_len)?).ok()?;
    let hard_state = get_hard_state(&mut r)?;
    let image_len = usize::try_from(r.u64()?).ok()?;
    let image = Bytes::copy_from_slice(r.take(image_len)?);
    let mut entries = Vec::new();
    for _ in 0..r.u32()? {
        let len = r.u32()? as usize;
        entries.push(Entry::parse_from_bytes(r.take(len)?).ok()?);
    }
    r.rest().is_empty().then_some(SnapRecord { seq, metadata, hard_state, image, entries })
}

/// Where a record sits in the snapshot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub offset: u64,
    pub len: u64,
}

/// The newest valid record of the snapshot file (highest sequence number), wherever it sits.
pub fn newest_snap_record(bytes: &[u8]) -> Option<(SnapRecord, Slot)> {
    let mut best: Option<(SnapRecord, Slot)> = None;
    let candidates = bytes
        .windows(SNAP_MAGIC.len())
        .enumerate()
        .filter(|(_, window)| *window == SNAP_MAGIC)
        .map(|(pos, _)| pos);
    for pos in candidates {
        if let Some((record, len)) = snap_record_at(bytes, pos)
            && best.as_ref().is_none_or(|(b, _)| record.seq > b.seq)
        {
            let slot = Slot { offset: pos as u64, len: len as u64 };
            best = Some((record, slot));
        }
    }
    best
}

/// Where to write a record of `len` bytes so it never overlaps the current one.
pub fn place_snap_record(current: Option<Slot>, len: u64) -> u64 {
    match current {
        Some(slot) if len > slot.offset => slot.offset + slot.len,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry { index, term, data: Bytes::from(vec![index as u8; 3]), ..Entry::default() }
    }

    #[test]
    fn append_replaces_a_conflicting_suffix_and_refuses_gaps() {
        let mut store = LogStore::new(ConfState::default());
        store.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]).unwrap();
        store.append(&[entry(2, 2)]).unwrap();
        assert_eq!(store.last(), 2);
        assert_eq!(store.term_of(2), Some(2));
        assert!(store.append(&[entry(5, 2)]).is_err());
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 2;
        snap.mut_metadata().term = 2;
        store.compact_to(snap);
        assert_eq!((store.first(), store.last()), (3, 2));
        assert_eq!(store.term(2).unwrap(), 2);
        assert!(store.term(1).is_err());
        store.append(&[entry(2, 2), entry(3, 2)]).unwrap();
        assert_eq!(store.last(), 3);
    }

    #[test]
    fn snapshot_records_survive_a_torn_successor_and_placement_never_overlaps() {
        let record = |seq: u64, image: &[u8]| SnapRecord {
            seq,
            metadata: SnapshotMetadata::default(),
            hard_state: HardState::default(),
            image: Bytes::copy_from_slice(image),
            entries: vec![entry(7, 3)],
        };
        let first = encode_snap_record(&record(1, b"one"));
        let mut file = first.clone();
        let slot = newest_snap_record(&file).unwrap().1;
        assert_eq!(slot, Slot { offset: 0, len: first.len() as u64 });
        let second = encode_snap_record(&record(2, b"two, a bit longer"));
        let at = place_snap_record(Some(slot), second.len() as u64);
        assert_eq!(at, first.len() as u64, "does not fit before: goes after");
        // Torn: only half of the second record landed.
        file.extend_from_slice(&second[..second.len() / 2]);
        assert_eq!(newest_snap_record(&file).unwrap().0.seq, 1);
        file.truncate(at as usize);
        file.extend_from_slice(&second);
        let (newest, slot) = newest_snap_record(&file).unwrap();
        assert_eq!((newest.seq, newest.entries.len()), (2, 1));
        assert_eq!(place_snap_record(Some(slot), first.len() as u64), 0);
    }

    #[test]
    fn the_log_must_start_with_a_header_and_corruption_is_loud() {
        let mut bytes = Vec::new();
        put_header(&mut bytes, 4);
        let hs = HardState { term: 2, ..HardState::default() };
        put_entries(&mut bytes, &[entry(1, 1), entry(2, 2)], Some(&hs));
        let scan = scan_log(&bytes).unwrap();
        assert_eq!(scan.base_seq, Some(4));
        assert_eq!(scan.frames.len(), 4);
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 3);
        let scan = scan_log(&torn).unwrap();
        assert_eq!(scan.frames.len(), 3);
        assert!(scan.valid_len < scan.file_len);
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(matches!(scan_log(&flipped), Err(RecoveryError::CorruptLog { .. })));
        let mut headless = Vec::new();
        put_entries(&mut headless, &[entry(1, 1)], None);
        assert!(matches!(scan_log(&headless), Err(RecoveryError::Inconsistent { .. })));
    }

    #[test]
    fn hard_states_merge_monotonically() {
        let hs = |term, vote, commit| {
            let mut h = HardState::default();
            (h.term, h.vote, h.commit) = (term, vote, commit);
            h
        };
        let mut into = hs(3, 2, 10);
        merge_hard_state(&mut into, &hs(2, 1, 4));
        assert_eq!(into, hs(3, 2, 10));
        merge_hard_state(&mut into, &hs(3, 0, 12));
        assert_eq!(into, hs(3, 2, 12));
        merge_hard_state(&mut into, &hs(4, 0, 12));
        assert_eq!(into, hs(4, 0, 12));
    }
}
