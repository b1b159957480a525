//! One partition log and `commit_durable`, the only place a record becomes visible:
//! append the batch, fsync, read every frame back and verify it, and only then advance the high
//! watermark. A failed commit leaves nothing visible and nothing half-written behind the high
//! watermark (the file is truncated back and synced), so a retry lands exactly one copy. We never
//! retry an fsync over the same dirty pages: a failure poisons the log until the truncation that
//! discards those pages is durable.
//!
//! A log is a sequence of segment files named by their first offset (`FileId::PartitionSegment`).
//! Commits append to the last, active segment; once it holds `segment_bytes` the next commit
//! rolls: it creates a new segment at the high watermark and writes there. A roll happens only
//! between commits, with nothing to repair, so every sealed segment ends with a durable,
//! verified frame and is never written again. Creating the new file is the commit's first step:
//! until its write, fsync and read-back succeed, nothing of it is visible, and a crash leaves at
//! most an empty file at the high watermark, which recovery takes as the (empty) active segment.
//!
//! A roll also writes the sealed segment's seal file in the background (`seal.rs`), and a clean
//! shutdown writes the active segment's: start-up adopts a segment from a seal it can trust
//! instead of reading it. A seal write never delays or fails a commit; a failed one is logged
//! and forgotten (that segment is scanned at the next start-up).

mod dedup;
pub mod frame;
mod index;
mod invariants;
mod recovery;
mod retention;
pub mod seal;
mod sealing;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::api::PartitionNumbers;
use crate::codec::{FRAME_HEADER_BYTES, MAX_FRAME_BODY_BYTES, frame_at};
use crate::ids::{NodeId, PartitionKey};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use dedup::{OriginIndex, SegmentTail};
pub use frame::{PartitionRecord, RecordView};
pub use index::IndexEntry;
use index::SparseIndex;
pub use recovery::PartitionScan;
pub use retention::{ReadRefusal, RetentionPolicy, Trimmed};
use seal::Seal;

/// Identifies a commit so its outcome can be matched to the dispatcher's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommitId(pub u64);

/// What a partition disk operation was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartIo {
    /// Create, write, sync or read-back of the commit in progress.
    Commit,
    /// Truncation back to the high watermark (and its sync).
    Repair,
    /// Deletion of a sealed segment (its seal file first) by retention.
    Trim,
    /// Create, write or sync of the seal file of the segment starting at `base`.
    Seal { base: u64 },
}

/// The result of a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitOutcome {
    pub id: CommitId,
    /// What became visible, or why the commit failed (then nothing became visible).
    pub result: Result<Landed, String>,
}

/// One request's share of a commit: records from one origin node's WAL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPart {
    pub id: CommitId,
    pub origin: NodeId,
    /// The origin's durable WAL checkpoint: it never re-sends a sequence below it.
    pub origin_checkpoint: u64,
    pub records: Vec<PartitionRecord>,
}

/// Records a successful commit made visible. Records the partition already held (a retried or
/// replayed commit) are not written again and are not listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Landed {
    /// Offset of the first newly visible record.
    pub first_offset: u64,
    /// WAL sequence of each newly visible record, in offset order.
    pub origin_seqs: Vec<u64>,
    /// Timestamp of the first newly visible record (`None` when none landed).
    pub first_timestamp_ms: Option<u64>,
}

/// Operations of the persisting stage: write, sync, read-back.
const WRITE_SYNC_READ: u32 = 3;

enum Stage {
    /// The file is being created; nothing is written until that succeeded (a write after a
    /// failed create could land in an old file's leftover bytes).
    Creating,
    /// Write, sync and the read-back of the written bytes are running (queued together: a
    /// file's operations complete in the order they were issued, so the read runs after the
    /// sync returned, and the commit costs one round trip to the disk, not two).
    Persisting,
}

/// One part of a combined commit: the fresh records of one request.
struct WrittenPart {
    id: CommitId,
    origin: NodeId,
    origin_seqs: Vec<u64>,
    fingerprints: Vec<u32>,
    first_timestamp_ms: Option<u64>,
}

struct Commit {
    data: Bytes,
    count: u64,
    /// Timestamp of the newest record written.
    newest_ms: u64,
    parts: Vec<WrittenPart>,
    stage: Stage,
    ios_left: u32,
    error: Option<String>,
    /// What the read-back returned (checked once every operation of the stage completed).
    read_back: Option<Bytes>,
}

enum LogState {
    Idle,
    Committing(Commit),
    /// Truncating back to the committed size; `failed` once one of its operations failed (the
    /// repair then ends `Poisoned`).
    Repairing {
        ios_left: u32,
        failed: bool,
    },
    /// A repair failed; the next commit attempt repairs first.
    Poisoned,
}

/// A segment before the active one: immutable, read only.
#[derive(Debug, PartialEq, Eq)]
struct SealedSegment {
    /// Where its offsets start (sparse); it ends at `index.records()`.
    index: SparseIndex,
    size: u64,
    /// Timestamp of its newest record (what retention by time judges).
    newest_ms: u64,
}

/// One partition log.
pub struct PartitionLog {
    key: PartitionKey,
    /// First offset of the active segment (the one commits append to).
    base: u64,
    /// Where the active segment's offsets start (sparse); its end is the high watermark.
    index: SparseIndex,
    /// Committed bytes of the active segment.
    size: u64,
    /// The active segment's file exists (it is created by the first commit to it).
    file_exists: bool,
    /// The segments before the active one, by first offset.
    sealed: BTreeMap<u64, SealedSegment>,
    /// Bytes after which the active segment is sealed and the next commit starts a new one.
    segment_bytes: u64,
    /// Timestamp of the active segment's newest committed record.
    active_newest_ms: u64,
    /// When (on the owner's clock) a retention pass first saw the active segment hold records:
    /// the segment rolls once it is older than the topic's roll age (see `retention`).
    active_since_ms: Option<u64>,
    /// The active segment is due to roll at the next commit (it aged while a commit ran).
    roll_due: bool,
    /// The retention pass in progress (a segment's delete in flight).
    trim: Option<retention::Trim>,
    /// The latest pass's clock and policy: a roll checks the size bound again at once.
    last_pass: Option<(u64, RetentionPolicy)>,
    /// Completed deletions not yet taken by `poll_trimmed`.
    trimmed: VecDeque<Trimmed>,
    state: LogState,
    outbox: VecDeque<(PartIo, DiskOp)>,
    origins: OriginIndex,
    /// The dedup entries of the active segment's records (what its seal file's tail records).
    active_origins: SegmentTail,
    /// The highest durable WAL checkpoint each origin reported in a commit part (it never
    /// re-sends below it): seal files record them so that a restart can prune the dedup index.
    checkpoints: BTreeMap<NodeId, u64>,
    /// Seal file operations in flight, by segment base.
    seal_ios: BTreeMap<u64, u32>,
    /// (base, size) of the active segment that its seal file describes: adopted at start-up,
    /// or the last seal write emitted at shutdown (each state is written once).
    active_seal: Option<(u64, u64)>,
    /// Seals of the segments recovery had to scan, written once the node serves.
    held_seals: Vec<Seal>,
    /// Seal files start-up found but did not adopt (stale, damaged or orphaned): deleted before
    /// the node serves.
    stale_seals: BTreeSet<u64>,
    /// Segments recovery adopted from their seals, and segments it scanned.
    recovered_segments: (u64, u64),
    /// Bases of the segments recovery adopted, until start-up takes them (`startup_sync_files`).
    adopted_bases: BTreeSet<u64>,
    /// Skip records this partition already holds (on by default; off only to measure what
    /// idempotent commits save).
    pub idempotent: bool,
    /// fsyncs issued, for metrics.
    pub fsyncs: u64,
}

/// A committed range to read for a consume: the byte range (whole frames, starting with the
/// record at `start_offset`) and what to return from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    /// The first record to return.
    pub first_offset: u64,
    /// Records to return at most.
    pub max: u64,
    /// Frame bytes to return at most (at least one record is returned).
    pub max_bytes: u64,
    /// The record the range starts with (at or before `first_offset`).
    pub start_offset: u64,
    /// The segment file to read, and the range in it.
    pub file: FileId,
    pub pos: u64,
    pub len: u64,
}

impl PartitionLog {
    /// A new, empty partition log with the default index interval (tests).
    #[cfg(test)]
    pub fn new(key: PartitionKey) -> PartitionLog {
        PartitionLog::with_index_interval(key, crate::constants::PARTITION_INDEX_INTERVAL_BYTES)
    }

    /// A new, empty partition log (its file is created with the first commit), indexing one
    /// entry per `index_interval` bytes of log.
    pub fn with_index_interval(key: PartitionKey, index_interval: u64) -> PartitionLog {
        PartitionLog {
            key,
            base: 0,
            index: SparseIndex::new(index_interval),
            size: 0,
            file_exists: false,
            sealed: BTreeMap::new(),
            segment_bytes: crate::constants::PARTITION_SEGMENT_BYTES,
            active_newest_ms: 0,
            active_since_ms: None,
            roll_due: false,
            trim: None,
            last_pass: None,
            trimmed: VecDeque::new(),
            state: LogState::Idle,
            outbox: VecDeque::new(),
            origins: OriginIndex::default(),
            active_origins: SegmentTail::default(),
            checkpoints: BTreeMap::new(),
            seal_ios: BTreeMap::new(),
            active_seal: None,
            held_seals: Vec::new(),
            stale_seals: BTreeSet::new(),
            adopted_bases: BTreeSet::new(),
            recovered_segments: (0, 0),
            idempotent: true,
            fsyncs: 0,
        }
    }

    /// Seals the active segment once it holds `bytes` (at least 1).
    pub fn with_segment_bytes(mut self, bytes: u64) -> PartitionLog {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// The partition this log holds.
    pub fn key(&self) -> PartitionKey {
        self.key
    }

    /// The first offset the log holds (records below it are gone).
    pub fn log_start_offset(&self) -> u64 {
        self.sealed.keys().next().copied().unwrap_or(self.base)
    }

    /// Segments, the active one included (whether or not its file exists yet).
    pub fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }

    /// The partition's numbers as `partition_stats` shows them.
    pub fn numbers(&self) -> PartitionNumbers {
        PartitionNumbers {
            log_start_offset: self.log_start_offset(),
            high_watermark: self.high_watermark(),
            segments: self.sealed.len() as u64 + u64::from(self.file_exists),
            size_bytes: self.size_bytes(),
            ..PartitionNumbers::default()
        }
    }

    /// Every segment file of the log that exists, oldest first.
    pub fn segment_files(&self) -> Vec<FileId> {
        self.segment_bases().map(|base| FileId::PartitionSegment { key: self.key, base }).collect()
    }

    /// The segment files start-up must sync before the node trusts them: every one it scanned.
    /// An adopted segment is left alone: its seal was written only after every byte the seal
    /// describes was durable (a roll and a clean shutdown follow a verified commit; a scanned
    /// segment's seal waits until start-up synced it), so syncing it again would only cost a
    /// device flush per segment. Called once, at the end of recovery.
    pub fn startup_sync_files(&mut self) -> Vec<FileId> {
        let adopted = std::mem::take(&mut self.adopted_bases);
        let key = self.key;
        self.segment_bases()
            .filter(|base| !adopted.contains(base))
            .map(|base| FileId::PartitionSegment { key, base })
            .collect()
    }

    /// Every file of the log, in the order deleting the log removes them: oldest segment first,
    /// each segment's seal file (which may or may not exist: a seal write may have failed)
    /// before the segment, as retention does.
    pub fn files_oldest_first(&self) -> Vec<FileId> {
        let key = self.key;
        self.segment_bases()
            .flat_map(|base| {
                [FileId::PartitionSeal { key, base }, FileId::PartitionSegment { key, base }]
            })
            .collect()
    }

    fn segment_bases(&self) -> impl Iterator<Item = u64> + '_ {
        let active = self.file_exists.then_some(self.base);
        self.sealed.keys().copied().chain(active)
    }

    /// Segments recovery adopted from their seal files, and segments it scanned.
    pub fn recovered_segments(&self) -> (u64, u64) {
        self.recovered_segments
    }

    fn active_file(&self) -> FileId {
        FileId::PartitionSegment { key: self.key, base: self.base }
    }

    /// The high watermark: offsets below it are visible.
    pub fn high_watermark(&self) -> u64 {
        self.index.records()
    }

    /// Committed bytes, every segment together.
    pub fn size_bytes(&self) -> u64 {
        self.size + self.sealed.values().map(|segment| segment.size).sum::<u64>()
    }

    /// A commit may be started now: the log is idle, or poisoned (starting one begins the repair).
    pub fn can_start_commit(&self) -> bool {
        matches!(self.state, LogState::Idle | LogState::Poisoned) && !self.opening_active()
    }

    /// True while no commit or repair runs (a new commit may start).
    pub fn is_idle(&self) -> bool {
        matches!(self.state, LogState::Idle)
    }

    /// Starts `commit_durable` for several requests at once: their records go out in one write
    /// and one fsync (offsets are assigned here, in part order). Records this partition already
    /// holds are skipped (idempotent commits); parts left with nothing to write are decided at
    /// once and returned. Fails every part at once if a commit or repair is running, or the log
    /// is poisoned (a repair then starts).
    pub fn begin_commit(&mut self, parts: Vec<CommitPart>) -> Result<Vec<CommitOutcome>, String> {
        match self.state {
            LogState::Idle if self.opening_active() => {
                return Err(format!("{}: creating the active segment, busy", self.key));
            }
            LogState::Idle => {}
            LogState::Poisoned => {
                self.start_repair();
                return Err(format!("{}: poisoned by an earlier failure, repairing", self.key));
            }
            _ => return Err(format!("{}: busy", self.key)),
        }
        let mut decided = Vec::new();
        let mut fresh_parts = Vec::new();
        // Records taken by an earlier part of this same group (a replay arriving together with
        // the original): written once; the later part shares the write's outcome.
        let mut taken = std::collections::BTreeSet::new();
        for part in parts {
            assert!(part.records.iter().all(|r| r.origin_node == part.origin), "one origin a part");
            self.note_checkpoint(part.origin, part.origin_checkpoint);
            let (origins, idempotent) = (&self.origins, self.idempotent);
            let mut shares_write = false;
            let fresh: Vec<PartitionRecord> = part
                .records
                .into_iter()
                .filter(|r| {
                    let id = (part.origin, r.origin_seq, r.fingerprint());
                    if !idempotent {
                        return true;
                    }
                    if origins.contains(id.0, id.1, id.2) {
                        return false;
                    }
                    let first_copy = taken.insert(id);
                    shares_write |= !first_copy;
                    first_copy
                })
                .collect();
            if fresh.is_empty() && !shares_write {
                let first_offset = self.high_watermark();
                let landed = Landed { first_offset, ..Landed::default() };
                decided.push(CommitOutcome { id: part.id, result: Ok(landed) });
            } else {
                fresh_parts.push((part.id, part.origin, fresh));
            }
        }
        if !fresh_parts.is_empty() {
            self.start_write(fresh_parts);
        }
        Ok(decided)
    }

    fn start_write(&mut self, fresh_parts: Vec<(CommitId, NodeId, Vec<PartitionRecord>)>) {
        let mut data = Vec::new();
        let mut count = 0;
        let mut newest_ms = 0;
        let mut parts = Vec::with_capacity(fresh_parts.len());
        for (id, origin, records) in fresh_parts {
            let origin_seqs = records.iter().map(|r| r.origin_seq).collect();
            let fingerprints = records.iter().map(PartitionRecord::fingerprint).collect();
            let first_timestamp_ms = records.first().map(|r| r.timestamp_ms);
            for mut record in records {
                newest_ms = newest_ms.max(record.timestamp_ms);
                record.offset = self.high_watermark() + count;
                record.encode_into(&mut data);
                count += 1;
            }
            parts.push(WrittenPart { id, origin, origin_seqs, fingerprints, first_timestamp_ms });
        }
        let data = Bytes::from(data);
        let rolled = self.roll_if_full();
        let (stage, ios_left) = if self.file_exists {
            self.emit_write(&data);
            (Stage::Persisting, WRITE_SYNC_READ)
        } else {
            let file = self.active_file();
            self.outbox.push_back((PartIo::Commit, DiskOp::Create { file }));
            (Stage::Creating, 1)
        };
        self.state = LogState::Committing(Commit {
            data,
            count,
            newest_ms,
            parts,
            stage,
            ios_left,
            error: None,
            read_back: None,
        });
        if rolled {
            self.retention_after_roll();
        }
    }

    /// Seals a full or aged active segment: the commit being started goes to a new one at the
    /// high watermark (only ever called between commits, with nothing to repair). True if it
    /// rolled.
    fn roll_if_full(&mut self) -> bool {
        let due = (self.size >= self.segment_bytes || self.roll_due) && self.file_exists;
        if due {
            self.seal_and_roll();
        }
        due
    }

    /// Seals the active segment, writing its seal file in the background (only ever called with
    /// nothing to repair, so the segment ends in a verified, durable frame).
    fn seal_and_roll(&mut self) {
        let seal = self.active_summary();
        self.roll_to(self.high_watermark());
        self.emit_seal(&seal);
    }

    /// Seals the active segment; a new, empty one (no file yet) starts at `base`, the high
    /// watermark.
    fn roll_to(&mut self, base: u64) {
        debug_assert_eq!(base, self.high_watermark(), "segments are dense");
        let interval = self.index.interval();
        let index = std::mem::replace(&mut self.index, SparseIndex::starting_at(base, interval));
        let size = std::mem::take(&mut self.size);
        let newest_ms = std::mem::take(&mut self.active_newest_ms);
        self.sealed.insert(self.base, SealedSegment { index, size, newest_ms });
        self.base = base;
        self.file_exists = false;
        self.active_since_ms = None;
        self.roll_due = false;
        self.active_origins = SegmentTail::default();
        self.active_seal = None;
    }

    /// Remembers an origin's durable checkpoint and forgets what it will never re-send.
    fn note_checkpoint(&mut self, origin: NodeId, checkpoint: u64) {
        let known = self.checkpoints.entry(origin).or_insert(checkpoint);
        *known = (*known).max(checkpoint);
        self.origins.prune_below(origin, checkpoint);
    }

    fn emit_write(&mut self, data: &Bytes) {
        let file = self.active_file();
        let write = DiskOp::Write { file, offset: self.size, data: data.clone() };
        self.outbox.push_back((PartIo::Commit, write));
        self.outbox.push_back((PartIo::Commit, DiskOp::Sync { file }));
        let read = DiskOp::Read { file, offset: self.size, len: data.len() as u64 };
        self.outbox.push_back((PartIo::Commit, read));
        self.fsyncs += 1;
    }

    /// Handles a completion; returns the outcome of every part once the commit is decided.
    pub fn on_io(&mut self, io: PartIo, result: Result<DiskDone, DiskError>) -> Vec<CommitOutcome> {
        match io {
            PartIo::Repair => {
                self.on_repair_io(result);
                Vec::new()
            }
            PartIo::Commit => self.on_commit_io(result),
            PartIo::Trim => {
                self.on_trim_io(result);
                Vec::new()
            }
            PartIo::Seal { base } => {
                self.on_seal_io(base, result);
                Vec::new()
            }
        }
    }

    fn on_commit_io(&mut self, result: Result<DiskDone, DiskError>) -> Vec<CommitOutcome> {
        let LogState::Committing(commit) = &mut self.state else {
            panic!("invariant: commit io only while committing");
        };
        commit.ios_left -= 1;
        match result {
            Err(error) => {
                commit.error.get_or_insert(error.to_string());
            }
            Ok(DiskDone::Data(bytes)) => commit.read_back = Some(bytes),
            Ok(DiskDone::Done) => {}
        }
        if commit.ios_left > 0 {
            return Vec::new();
        }
        if let Some(error) = commit.error.take() {
            return self.fail_commit(error);
        }
        match commit.stage {
            Stage::Creating => {
                self.file_exists = true;
                let data = commit.data.clone();
                let LogState::Committing(commit) = &mut self.state else { unreachable!("above") };
                commit.stage = Stage::Persisting;
                commit.ios_left = WRITE_SYNC_READ;
                self.emit_write(&data);
                Vec::new()
            }
            Stage::Persisting => {
                let read = commit.read_back.take().unwrap_or_default();
                self.verify_and_publish(&read)
            }
        }
    }

    /// Read-back check: every frame must be intact, carry the expected offsets, and equal what
    /// we wrote. Only then do the records become visible.
    fn verify_and_publish(&mut self, read: &[u8]) -> Vec<CommitOutcome> {
        let LogState::Committing(commit) = &self.state else { unreachable!("checked by caller") };
        if read != &commit.data[..] {
            return self.fail_commit("read-back differs from the bytes written".to_string());
        }
        let mut pos = 0;
        let mut starts = Vec::with_capacity(commit.count as usize);
        while let Some(found) = frame_at(read, pos) {
            starts.push(self.size + pos as u64);
            pos = found.end();
        }
        if starts.len() as u64 != commit.count || pos != read.len() {
            return self.fail_commit("read-back CRC check failed".to_string());
        }
        let mut first_offset = self.high_watermark();
        for start in starts {
            self.index.push(start);
        }
        self.size += read.len() as u64;
        let LogState::Committing(commit) = std::mem::replace(&mut self.state, LogState::Idle)
        else {
            unreachable!("checked above")
        };
        self.active_newest_ms = self.active_newest_ms.max(commit.newest_ms);
        let mut outcomes = Vec::with_capacity(commit.parts.len());
        for part in commit.parts {
            for (&seq, &fingerprint) in part.origin_seqs.iter().zip(&part.fingerprints) {
                self.origins.insert(part.origin, seq, fingerprint);
                self.active_origins.insert(part.origin, seq, fingerprint);
            }
            let landed_count = part.origin_seqs.len() as u64;
            let first_timestamp_ms = part.first_timestamp_ms;
            let landed = Landed { first_offset, origin_seqs: part.origin_seqs, first_timestamp_ms };
            outcomes.push(CommitOutcome { id: part.id, result: Ok(landed) });
            first_offset += landed_count;
        }
        self.active_origins.maybe_prune(&self.checkpoints);
        outcomes
    }

    fn fail_commit(&mut self, error: String) -> Vec<CommitOutcome> {
        let state = std::mem::replace(&mut self.state, LogState::Idle);
        let LogState::Committing(commit) = state else { unreachable!("checked by caller") };
        if matches!(commit.stage, Stage::Creating) {
            // Nothing was written: create the file again next time.
            self.file_exists = false;
        } else {
            // Cut whatever the failed commit left past the high watermark, durably, before
            // anything else is written (never re-sync the same dirty pages).
            self.start_repair();
        }
        let reason = format!("{}: {error}", self.key);
        commit
            .parts
            .into_iter()
            .map(|part| CommitOutcome { id: part.id, result: Err(reason.clone()) })
            .collect()
    }

    /// Truncates the file back to the committed size and syncs it, discarding whatever a failed
    /// commit (or a crash) left past the high watermark.
    fn start_repair(&mut self) {
        let file = self.active_file();
        self.outbox.push_back((PartIo::Repair, DiskOp::Truncate { file, len: self.size }));
        self.outbox.push_back((PartIo::Repair, DiskOp::Sync { file }));
        self.fsyncs += 1;
        self.state = LogState::Repairing { ios_left: 2, failed: false };
    }

    fn on_repair_io(&mut self, result: Result<DiskDone, DiskError>) {
        let LogState::Repairing { ios_left, failed } = &mut self.state else {
            panic!("invariant: repair io only while repairing");
        };
        *ios_left -= 1;
        *failed |= result.is_err();
        if *ios_left == 0 {
            self.state = if *failed { LogState::Poisoned } else { LogState::Idle };
        }
    }

    /// The committed byte range to read for up to `max` records from `offset`, at most
    /// `max_bytes` of them (at least one record). `None` when `offset` is at or past the high
    /// watermark. The range may start a little before `offset` and end a little past what is
    /// returned (the index is sparse): `decode_read` skips and cuts.
    pub fn read_plan(&self, offset: u64, max: u64, max_bytes: u64) -> Option<ReadPlan> {
        if offset >= self.high_watermark() || offset < self.log_start_offset() || max == 0 {
            return None;
        }
        let (base, index, size) = match self.sealed.range(..=offset).next_back() {
            Some((&base, sealed)) if offset < self.base => (base, &sealed.index, sealed.size),
            _ => (self.base, &self.index, self.size),
        };
        let span = index.span(offset, max, max_bytes, size);
        Some(ReadPlan {
            first_offset: offset,
            max,
            max_bytes,
            start_offset: span.start.offset,
            file: FileId::PartitionSegment { key: self.key, base },
            pos: span.start.pos,
            len: span.end - span.start.pos,
        })
    }

    /// Decodes the bytes of a `read_plan` read: skips the frames before the wanted offset, then
    /// returns records up to the plan's count and byte limits. The range holds whole frames only,
    /// so a frame that does not decode (or carries a wrong offset) is damage. Damage costs only
    /// itself where it can: a damaged frame before the wanted offset is stepped over by its
    /// length field (the next frame must then be intact and carry the next offset), and damage
    /// after some wanted records ends the answer there (the next read reports it). An error
    /// names the damaged offset, and the file and byte where it was found.
    pub fn decode_read(
        &self,
        plan: ReadPlan,
        bytes: &[u8],
    ) -> Result<Vec<PartitionRecord>, ReadDamage> {
        let (key, file) = (self.key, plan.file);
        let damaged =
            |offset: u64, pos: usize| ReadDamage { key, offset, file, byte: plan.pos + pos as u64 };
        let mut records = Vec::new();
        let mut pos = 0;
        let mut expected = plan.start_offset;
        let mut returned_bytes = 0u64;
        while pos < bytes.len() && (records.len() as u64) < plan.max {
            let wanted = expected >= plan.first_offset;
            let decoded = frame_at(bytes, pos).and_then(|found| {
                let record = RecordView::decode(found.body(bytes))?;
                (record.offset == expected).then_some((found, record))
            });
            let Some((found, record)) = decoded else {
                if !wanted {
                    let next_intact = |&end: &usize| frame_at(bytes, end).is_some();
                    let next = claimed_frame_end(bytes, pos).filter(next_intact);
                    pos = next.ok_or_else(|| damaged(expected, pos))?;
                    expected += 1;
                    continue;
                }
                return if records.is_empty() { Err(damaged(expected, pos)) } else { Ok(records) };
            };
            let frame_bytes = (found.end() - pos) as u64;
            if wanted {
                if !records.is_empty() && returned_bytes + frame_bytes > plan.max_bytes {
                    break;
                }
                returned_bytes += frame_bytes;
                records.push(record.to_record());
            }
            pos = found.end();
            expected += 1;
        }
        if records.is_empty() {
            return Err(damaged(plan.first_offset, pos));
        }
        Ok(records)
    }

    /// Next disk operation to emit.
    pub fn poll_io(&mut self) -> Option<(PartIo, DiskOp)> {
        self.outbox.pop_front()
    }
}

/// A read found a frame that does not decode (or carries the wrong offset): nothing from it is
/// served. Displays as the client is told (partition and offset); `file` and `byte` are for the
/// log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadDamage {
    pub key: PartitionKey,
    /// The offset of the damaged record.
    pub offset: u64,
    /// The segment file, and the byte of it where the damaged frame starts.
    pub file: FileId,
    pub byte: u64,
}

impl std::fmt::Display for ReadDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "partition {}: damaged record at offset {}", self.key, self.offset)
    }
}

/// Where a frame whose content is damaged ends, by its length field, if that is plausible.
fn claimed_frame_end(bytes: &[u8], pos: usize) -> Option<usize> {
    let len_bytes: [u8; 4] = bytes.get(pos..pos + 4)?.try_into().ok()?;
    let body_len = u32::from_le_bytes(len_bytes) as usize;
    let end = pos + FRAME_HEADER_BYTES + body_len;
    (body_len > 0 && body_len <= MAX_FRAME_BODY_BYTES && end <= bytes.len()).then_some(end)
}

#[cfg(test)]
mod segment_tests;
#[cfg(test)]
mod tests;
