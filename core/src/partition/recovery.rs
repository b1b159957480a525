//! Recovering a partition log from its file a chunk at a time, so that a log far larger than
//! memory can be opened: each chunk's whole frames are checked (CRC, dense offsets) and indexed
//! (sparsely), and only an incomplete frame at a chunk's end is carried to the next.
//!
//! The first frame that is not intact ends the streaming part: everything from it to the end of
//! the file is then looked at whole, as `codec::scan` would (a zero tail is a clean end, a bad
//! frame with no valid frame after it is a torn tail to truncate, and one followed by a valid
//! frame is corruption of acknowledged records: recovery refuses). After a crash that tail is at
//! most the commit that was being written.
//!
//! A log of several segments is fed segment by segment, oldest first (`begin_segment` before
//! each). Only the last may end in a torn tail: the earlier ones were sealed after a verified
//! commit, so a bad tail there, or a segment that does not start where the one before it ends,
//! is damage and recovery refuses.
//!
//! A segment whose seal file can be trusted is adopted instead of fed (`open_segment`): its
//! index, size, newest timestamp, dedup tail and known checkpoints come from the seal, and not
//! one byte of it is read (`seal.rs` says when a seal is trusted). Any segment may be adopted or
//! scanned; a trusted seal of the last one makes it the active segment with no scan. Seals found
//! and not adopted (stale, damaged, or with no segment) are listed for deletion, and the seals of
//! the sealed segments that had to be scanned are written again once the node serves.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::codec::{ScanEnd, classify_bad, frame_at, frame_incomplete};
use crate::recovery_error::RecoveryError;

use super::PartitionLog;
use super::frame::RecordView;
use super::index::SparseIndex;
use super::seal::Seal;
use crate::ids::{NodeId, PartitionKey};

/// A partition log being recovered; see the module docs.
pub struct PartitionScan {
    log: PartitionLog,
    /// Bytes fed but not yet consumed: an incomplete frame, or the tail from a bad frame on.
    carry: Vec<u8>,
    /// File position of `carry[0]`.
    carry_at: u64,
    /// A frame that is not intact was found at `carry_at`: the rest of the file goes to `finish`.
    stopped: bool,
    /// `begin_segment` was called (a scan fed without it reads one segment at offset 0).
    begun: bool,
    /// Records of this origin below this sequence are not remembered for idempotent commits
    /// (see `forgetting_origin_below`).
    forget_below: Option<(NodeId, u64)>,
    /// The seal files found for this log, by base, not yet looked at.
    seals: BTreeMap<u64, Bytes>,
    /// The current segment was adopted from its seal (it is not fed).
    adopted_current: bool,
    /// Segments adopted from their seals, and segments scanned.
    adopted: u64,
    scanned: u64,
}

impl PartitionScan {
    /// Starts recovering the log of `key` (see `PartitionLog::with_index_interval`).
    pub fn new(key: PartitionKey, index_interval: u64) -> PartitionScan {
        let mut log = PartitionLog::with_index_interval(key, index_interval);
        log.file_exists = true;
        PartitionScan {
            log,
            carry: Vec::new(),
            carry_at: 0,
            stopped: false,
            begun: false,
            forget_below: None,
            seals: BTreeMap::new(),
            adopted_current: false,
            adopted: 0,
            scanned: 0,
        }
    }

    /// The seal files found for this log (by the base of their segment).
    pub fn with_seals(mut self, seals: BTreeMap<u64, Bytes>) -> PartitionScan {
        self.seals = seals;
        self
    }

    /// Segments adopted from their seal files so far.
    pub fn adopted(&self) -> u64 {
        self.adopted
    }

    /// Segments scanned (fed) so far.
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    /// Rolls the recovered log's active segment at `bytes` (see `PartitionLog::with_segment_bytes`).
    pub fn with_segment_bytes(mut self, bytes: u64) -> PartitionScan {
        self.log = self.log.with_segment_bytes(bytes);
        self
    }

    /// The next segment starts at offset `base` and its file holds `len` bytes. If its seal file
    /// can be trusted (it decodes, names `base`, records `len` bytes, and the segment starts
    /// where the one before it ended), the segment is adopted from it and `true` returned: do not
    /// feed it. Otherwise it is begun as by `begin_segment`: feed its bytes.
    pub fn open_segment(&mut self, base: u64, len: u64) -> Result<bool, RecoveryError> {
        let found = self.seals.remove(&base);
        let trusted = found
            .as_deref()
            .and_then(Seal::decode)
            .filter(|seal| seal.base == base && seal.size == len && self.continues_at(base));
        let Some(seal) = trusted else {
            if found.is_some() {
                self.log.stale_seals.insert(base);
            }
            self.begin_segment(base)?;
            return Ok(false);
        };
        self.end_segment(base)?;
        self.adopt(seal);
        Ok(true)
    }

    /// A segment starting at `base` would follow the one before it without a gap.
    fn continues_at(&self, base: u64) -> bool {
        let end = self.log.high_watermark();
        !self.begun
            || (!self.stopped && self.carry.is_empty() && end > self.log.base && end == base)
    }

    /// Takes the segment just begun from its seal.
    fn adopt(&mut self, seal: Seal) {
        let interval = self.log.index.interval();
        self.log.index = SparseIndex::from_entries(seal.entries, seal.end, interval);
        self.log.active_newest_ms = seal.newest_ms;
        self.carry_at = seal.size;
        for (origin, checkpoint) in seal.checkpoints {
            self.log.note_checkpoint(origin, checkpoint);
        }
        for (origin, seqs) in seal.tail {
            for (seq, fingerprint) in seqs {
                if !self.forgets(origin, seq) {
                    self.log.origins.insert_recovered(origin, seq, fingerprint);
                    self.log.active_origins.insert_recovered(origin, seq, fingerprint);
                }
            }
        }
        self.log.active_seal = Some((seal.base, seal.size));
        self.log.adopted_bases.insert(seal.base);
        self.adopted_current = true;
        self.adopted += 1;
    }

    fn forgets(&self, origin: NodeId, seq: u64) -> bool {
        self.forget_below.is_some_and(|(o, below)| origin == o && seq < below)
    }

    /// The next bytes fed are the segment starting at offset `base`. The segment fed until now
    /// is sealed: it must have ended cleanly (no torn tail, no damage) with at least one
    /// record, and `base` must be where it ended.
    pub fn begin_segment(&mut self, base: u64) -> Result<(), RecoveryError> {
        self.end_segment(base)?;
        self.scanned += 1;
        Ok(())
    }

    /// Seals the segment fed or adopted until now (see `begin_segment`) and starts the next at
    /// `base`. A sealed segment that was scanned gets its seal written once the node serves.
    fn end_segment(&mut self, base: u64) -> Result<(), RecoveryError> {
        if !self.begun {
            self.begun = true;
            let interval = self.log.index.interval();
            self.log.base = base;
            self.log.index = SparseIndex::starting_at(base, interval);
            return Ok(());
        }
        let file = self.file();
        if self.stopped || !self.carry.is_empty() {
            return Err(RecoveryError::Inconsistent {
                file,
                what: format!("a sealed segment ends in a damaged frame at byte {}", self.carry_at),
            });
        }
        let end = self.log.high_watermark();
        if end == self.log.base || base != end {
            return Err(RecoveryError::Inconsistent {
                file,
                what: format!(
                    "holds offsets {}..{end}, the next segment starts at {base}",
                    self.log.base
                ),
            });
        }
        self.log.size = self.carry_at;
        if !std::mem::take(&mut self.adopted_current) {
            let seal = self.log.active_summary();
            self.log.held_seals.push(seal);
        }
        self.log.roll_to(base);
        self.log.file_exists = true;
        self.carry_at = 0;
        Ok(())
    }

    /// Does not remember records of `origin` below `checkpoint` for idempotent commits: that
    /// origin's durable WAL checkpoint is past them, so it never sends them again.
    pub fn forgetting_origin_below(mut self, origin: NodeId, checkpoint: u64) -> PartitionScan {
        self.forget_below = Some((origin, checkpoint));
        self.log.note_checkpoint(origin, checkpoint);
        self
    }

    /// Bytes fed so far (the file position the next chunk starts at).
    pub fn fed(&self) -> u64 {
        self.carry_at + self.carry.len() as u64
    }

    /// A frame that is not intact was found: feed no more; hand the rest of the file (from
    /// `fed()`) to `finish`.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Feeds the next bytes of the file, in order. A frame that is intact but out of place (not
    /// the next offset) fails recovery at once.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), RecoveryError> {
        assert!(!self.stopped, "feed after the scan stopped");
        assert!(!self.adopted_current, "an adopted segment is not fed");
        self.begun = true;
        self.carry.extend_from_slice(chunk);
        let mut pos = 0;
        while pos < self.carry.len() {
            let Some(found) = frame_at(&self.carry, pos) else {
                self.stopped = !frame_incomplete(&self.carry, pos);
                break;
            };
            let at = self.carry_at + pos as u64;
            let record = RecordView::decode(found.body(&self.carry));
            take(&mut self.log, at, record, self.forget_below)?;
            pos = found.end();
        }
        self.carry.drain(..pos);
        self.carry_at += pos as u64;
        Ok(())
    }

    /// Ends recovery with `rest`, the file's bytes after the `fed()` ones (empty when the whole
    /// file was fed). A torn tail is truncated (the log queues the repair); corruption followed by
    /// valid frames is an error.
    pub fn finish(mut self, rest: &[u8]) -> Result<PartitionLog, RecoveryError> {
        self.carry.extend_from_slice(rest);
        let end = if self.carry.is_empty() { ScanEnd::Clean } else { classify_bad(&self.carry, 0) };
        if let ScanEnd::Corrupt { bad_pos, next_valid_pos } = end {
            return Err(RecoveryError::CorruptLog {
                file: self.file(),
                bad_pos: self.carry_at + bad_pos as u64,
                next_valid_pos: self.carry_at + next_valid_pos as u64,
            });
        }
        let mut log = self.log;
        log.stale_seals.extend(self.seals.into_keys());
        log.recovered_segments = (self.adopted, self.scanned);
        log.origins.prune_to_horizon();
        log.active_origins.prune_to_horizon();
        let checkpoints = std::mem::take(&mut log.checkpoints);
        log.origins.prune_below_all(&checkpoints);
        log.active_origins.prune_below_all(&checkpoints);
        log.checkpoints = checkpoints;
        log.size = self.carry_at;
        if !self.carry.is_empty() {
            log.start_repair(); // a torn tail, or a zero fill past the last frame
        }
        Ok(log)
    }

    fn file(&self) -> String {
        self.log.active_file().relative_path()
    }
}

/// Indexes the intact frame at file position `at`, which must hold the log's next offset.
fn take(
    log: &mut PartitionLog,
    at: u64,
    record: Option<RecordView<'_>>,
    forget_below: Option<(NodeId, u64)>,
) -> Result<(), RecoveryError> {
    let expected = log.index.records();
    match record {
        Some(record) if record.offset == expected => {
            log.index.push(at);
            log.active_newest_ms = log.active_newest_ms.max(record.timestamp_ms);
            let (origin, seq) = (record.origin_node, record.origin_seq);
            let forgotten = forget_below.is_some_and(|(o, below)| origin == o && seq < below);
            if !forgotten {
                log.origins.insert_recovered(origin, seq, record.fingerprint());
                log.active_origins.insert_recovered(origin, seq, record.fingerprint());
            }
            Ok(())
        }
        _ => Err(RecoveryError::Inconsistent {
            file: log.active_file().relative_path(),
            what: format!("frame at byte {at} is not offset {expected}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TopicId;
    use crate::partition::PartitionRecord;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn key() -> PartitionKey {
        PartitionKey { topic: TopicId(1), partition: 0 }
    }

    /// A log file of `count` records with payloads of varied length.
    fn log_file(count: u64) -> Vec<u8> {
        let mut file = Vec::new();
        for offset in 0..count {
            let record = PartitionRecord {
                offset,
                timestamp_ms: 1,
                origin_node: NodeId(1),
                origin_seq: offset,
                key: None,
                payload: Bytes::from(vec![7u8; 1 + (offset as usize * 37) % 300]),
            };
            record.encode_into(&mut file);
        }
        file
    }

    /// Recovers `file` fed in chunks of `chunk` bytes, as the runtime does.
    fn recover_chunked(file: &[u8], chunk: usize) -> Result<(u64, u64, bool), String> {
        let mut scan = PartitionScan::new(key(), 512);
        for piece in file.chunks(chunk) {
            if scan.stopped() {
                break;
            }
            scan.feed(piece).map_err(|e| e.to_string())?;
        }
        let rest = &file[usize::try_from(scan.fed()).unwrap()..];
        let mut log = scan.finish(rest).map_err(|e| e.to_string())?;
        Ok((log.high_watermark(), log.size_bytes(), log.poll_io().is_some()))
    }

    #[test]
    fn a_clean_log_recovers_whole_in_any_chunking() {
        let file = log_file(500);
        for chunk in [1, 7, 512, 4096, file.len()] {
            assert_eq!(recover_chunked(&file, chunk), Ok((500, file.len() as u64, false)));
        }
    }

    #[test]
    fn an_origin_below_its_checkpoint_is_not_remembered() {
        let file = log_file(10);
        let mut scan = PartitionScan::new(key(), 512).forgetting_origin_below(NodeId(1), 6);
        scan.feed(&file).unwrap();
        let log = scan.finish(&[]).unwrap();
        assert_eq!(log.high_watermark(), 10, "every record is still there and readable");
        assert_eq!(log.origins.len(), 4, "only sequences 6..10 are remembered");
        let mut scan = PartitionScan::new(key(), 512).forgetting_origin_below(NodeId(2), 6);
        scan.feed(&file).unwrap();
        assert_eq!(scan.finish(&[]).unwrap().origins.len(), 10, "other origins: all remembered");
    }

    proptest! {
        /// However the file is cut into chunks, recovery ends the same way as reading it whole
        /// (torn tail, zero fill, corruption, or an out-of-place frame).
        #[test]
        fn chunking_never_changes_the_outcome(
            records in 1u64..200,
            damage in prop::option::of((0.0f64..1.0, any::<u8>())),
            cut in prop::option::of(0.0f64..1.0),
            zeros in 0usize..300,
            chunk in 1usize..3000,
        ) {
            let mut file = log_file(records);
            if let Some((at, flip)) = damage {
                let i = ((file.len() - 1) as f64 * at) as usize;
                file[i] ^= flip.max(1);
            }
            if let Some(cut) = cut {
                file.truncate(((file.len() as f64) * cut) as usize);
            }
            file.extend(std::iter::repeat_n(0u8, zeros));
            let whole = recover_chunked(&file, file.len().max(1));
            prop_assert_eq!(recover_chunked(&file, chunk), whole);
        }
    }
}
