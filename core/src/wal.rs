//! The ingress WAL: where a produce becomes durable before it is acknowledged.
//!
//! Group commit: `stage` queues a request's records; whenever no sync is in flight, `pump`
//! numbers and encodes what the next group takes (every small request staged, bulk ones up to a
//! bound: `staging.rs`), writes it with one `Write` and makes it durable with one `Sync`; the
//! completion acknowledges every waiter of that batch at once. Under load each fsync carries many
//! records while every caller still waits only for its own bytes. A write or fsync failure
//! *latches* the WAL: that batch and every later append fail until restart (the dirty pages of a
//! failed fsync cannot be trusted, so we never retry it).
//!
//! Hygiene: the dispatcher reports the checkpoint (first sequence not yet done); it is stored in a
//! two-slot file, and segments wholly below the durable checkpoint are deleted. A fully dispatched
//! active segment past the rotate size (1 MiB) is rotated so that an idle node's WAL stays small.
//!
//! Sizes ([`WalSizes`], from `Config`): a segment is sealed once it has grown to its size; a group
//! commit always lands whole in the active segment, so a segment holds at least one whole record
//! however small the size (the simulator draws sizes of a few KiB to get many sealed segments).
//!
//! The dispatcher reads durable records through a cursor: straight from the batch that just
//! synced when it keeps up, from disk (`Read`) when it fell behind.
//!
//! Chunked bulk requests (`staging.rs`, `record.rs`): a bulk request past the group's bulk bound
//! is written as chunks in successive groups, and applies whole or not at all. The cursor stops
//! at its first record until its final record is durable (`hold_from`); a latch in between
//! freezes it instead (`frozen_request`: the dispatcher sets its records aside), and the next
//! start-up decides it (`RecoveredWal::abandoned`).

pub mod checkpoint;
mod damage;
pub mod invariants;
mod prewrite;
pub mod record;
mod recovery;
mod staging;

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::constants::{
    CHECKPOINT_SYNC_DELAY_MS, WAL_GROUP_BULK_BYTES, WAL_PREWRITE_CHUNK_BYTES, WAL_READ_CHUNK_BYTES,
    WAL_ROTATE_DISPATCHED_BYTES, WAL_SEGMENT_BYTES, WAL_SMALL_REQUEST_BYTES,
};
use crate::ids::Instant;
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
pub use prewrite::PrewriteDone;
pub use record::{Chunk, WalRecord};
pub use recovery::{RecoveredWal, recover};
use staging::{Bounds, Piece, Staged, Staging};

/// What a WAL disk operation was for; the node hands it back with the completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalIo {
    /// Part of the in-flight group commit (segment create, write or sync).
    Batch,
    /// Write or sync of the checkpoint file.
    Checkpoint,
    /// Creation of the checkpoint file.
    CheckpointCreate,
    /// Deletion of a compacted segment, or creation of the segment replacing an idle one.
    Delete,
    /// A dispatcher read starting at `offset` of segment `segment`.
    CursorRead { segment: u64, offset: u64 },
    /// Start-up repair (truncation of a torn tail and its sync).
    Repair,
    /// Zeros written past the active segment's end, or their sync (`prewrite.rs`).
    Prewrite,
}

/// A record as handed to `stage`: everything but the sequence number.
#[derive(Clone, Debug)]
pub struct Draft {
    pub timestamp_ms: u64,
    pub topic: String,
    pub topic_id: crate::ids::TopicId,
    pub partition: u32,
    pub key: Option<Bytes>,
    pub payload: Bytes,
}

impl Draft {
    /// Bytes the record will take in the WAL, but for its frame's envelope.
    fn weight(&self) -> usize {
        record::FIXED_BYTES
            + self.topic.len()
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.payload.len()
    }
}

/// What a dispatcher read of the WAL found.
#[derive(Debug)]
pub enum CursorRead {
    /// Records from the cursor on, each with its frame length (see `Wal::advance_cursor`).
    Records(Vec<(WalRecord, u64)>),
    /// These sequences were damaged at rest and are lost; the cursor moved past them.
    Lost(std::ops::Range<u64>),
    /// The read succeeded but holds no valid record where one must be: read the same bytes again
    /// soon (a damaged read costs no back-off; only `DAMAGED_READS_BEFORE_SKIP` of them in a row
    /// declare the records lost).
    Damaged(String),
}

/// The outcome of a group commit, for the node to answer waiters with.
#[derive(Debug)]
pub struct BatchOutcome<W> {
    /// Waiters whose records are durable.
    pub acked: Vec<W>,
    /// Waiters whose records failed (the WAL is latched); with the reason.
    pub failed: Vec<W>,
    pub error: Option<DiskError>,
    /// The records that became durable and may go to the dispatcher from memory, each with its
    /// frame length (see `Wal::advance_cursor`).
    pub durable: Vec<(WalRecord, u64)>,
}

/// The WAL's segment sizes (`Config::wal_segment_bytes`, `Config::wal_rotate_dispatched_bytes`).
/// `Default` is production's: `WAL_SEGMENT_BYTES` and `WAL_ROTATE_DISPATCHED_BYTES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalSizes {
    /// The active segment is sealed once it holds this many bytes: the next group commit opens
    /// a new one. Never a limit on a record: a batch is written whole whatever its size.
    pub segment_bytes: u64,
    /// A fully dispatched active segment of at least this many bytes is sealed early (and then
    /// compacted away).
    pub rotate_dispatched_bytes: u64,
    /// Zeros pre-written past the active segment's end at a time when idle (0: never); see
    /// `prewrite.rs`.
    pub prewrite_chunk_bytes: u64,
    /// A request whose records take more than this is bulk (`staging.rs`).
    pub small_request_bytes: u64,
    /// A group commit takes bulk requests while their bytes are below this (at least one) when
    /// no small request is about; bulk requests are chunked at a quarter of it (`staging.rs`).
    pub group_bulk_bytes: u64,
}

impl WalSizes {
    fn bounds(&self) -> Bounds {
        Bounds {
            small_request_bytes: self.small_request_bytes,
            group_bulk_bytes: self.group_bulk_bytes,
        }
    }
}

impl Default for WalSizes {
    fn default() -> Self {
        WalSizes {
            segment_bytes: WAL_SEGMENT_BYTES,
            rotate_dispatched_bytes: WAL_ROTATE_DISPATCHED_BYTES,
            prewrite_chunk_bytes: WAL_PREWRITE_CHUNK_BYTES,
            small_request_bytes: WAL_SMALL_REQUEST_BYTES,
            group_bulk_bytes: WAL_GROUP_BULK_BYTES,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    /// Bytes written (or being written) to the segment.
    written: u64,
    /// Bytes known durable (synced, or found at recovery).
    durable: u64,
    /// End of the zeros pre-written and synced past `written` (never below it).
    prewritten: u64,
}

impl Segment {
    /// A segment holding `len` durable bytes (found at recovery, or just created).
    fn found(len: u64) -> Segment {
        Segment { written: len, durable: len, prewritten: len }
    }

    fn append(&mut self, len: u64) {
        self.written += len;
        self.prewritten = self.prewritten.max(self.written);
    }
}

struct InFlight<W> {
    segment: u64,
    end_offset: u64,
    first_seq: u64,
    records: Vec<WalRecord>,
    frame_lens: Vec<u32>,
    waiters: Vec<W>,
    ios_left: u32,
    error: Option<DiskError>,
    /// The chunked request still open once this group is durable (its first sequence).
    open_after: Option<u64>,
}

/// Where the dispatcher reads next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    seq: u64,
    segment: u64,
    offset: u64,
}

/// A checkpoint write handed to the disk (create, write, sync of one slot).
#[derive(Clone, Copy, Debug)]
struct CheckpointWrite {
    /// The checkpoint being written; `None` once one of its operations failed, so it will not
    /// become durable when the rest complete.
    value: Option<u64>,
    /// Operations not yet completed.
    ios_left: u32,
    /// The slot written (0 or 1).
    slot: u64,
}

#[derive(Default)]
struct CheckpointState {
    durable: u64,
    target: u64,
    dirty_since: Option<Instant>,
    in_flight: Option<CheckpointWrite>,
    next_slot: u64,
    file_exists: bool,
    /// After a failed write, not before this (even when flushing for shutdown).
    retry_at: Option<Instant>,
}

/// The ingress WAL of one node. `W` is whatever the node uses to remember a waiting produce.
pub struct Wal<W> {
    segments: BTreeMap<u64, Segment>,
    next_seq: u64,
    durable_seq: u64,
    force_new_segment: bool,
    staging: Staging<W>,
    in_flight: Option<InFlight<W>>,
    /// The chunked request being written (its first sequence), from its first chunk's group to
    /// its last chunk's.
    open_request: Option<u64>,
    /// The first sequence of the chunked request whose last chunk is not durable yet: the cursor
    /// stops there, so none of the request reaches the dispatcher before all of it can (a
    /// request whose last chunk never becomes durable is dropped by the next start-up).
    hold_from: Option<u64>,
    /// The chunked request that was open when the WAL latched (its first sequence): the hold
    /// is lifted, and the dispatcher sets that request's records aside (`Dispatcher::freeze`)
    /// while everything around them still goes to its partitions. The next start-up decides the
    /// request: whole if its last chunk reached the disk after all, dropped if not.
    frozen_request: Option<u64>,
    latched: Option<DiskError>,
    checkpoint: CheckpointState,
    cursor: Cursor,
    read_in_flight: bool,
    /// Consecutive cursor reads that found no valid record at the cursor.
    damaged_reads: u32,
    /// The cursor last moved past damage (`skip_damage`) and has not been realigned with a
    /// batch the WAL wrote since: its offset may be that of a stale copy of its records.
    resumed_past_damage: bool,
    repairs_left: u32,
    outbox: VecDeque<(WalIo, DiskOp)>,
    counters: WalCounters,
    sizes: WalSizes,
    prewrite: prewrite::Prewrite,
}

/// Counters the node exports.
#[derive(Clone, Copy, Debug, Default)]
pub struct WalCounters {
    pub group_commits: u64,
    /// Syncs of group commits (pre-write syncs are counted in `prewrite_syncs`).
    pub fsyncs: u64,
    pub prewrite_syncs: u64,
    pub records_synced: u64,
    pub bytes_written: u64,
}

impl<W> Wal<W> {
    /// A WAL continuing from what recovery found.
    pub fn from_recovered(recovered: RecoveredWal) -> Wal<W> {
        let mut outbox = VecDeque::new();
        let mut repairs_left = 0;
        if let Some((first_seq, len)) = recovered.truncate_tail {
            let file = FileId::WalSegment { first_seq };
            outbox.push_back((WalIo::Repair, DiskOp::Truncate { file, len }));
            outbox.push_back((WalIo::Repair, DiskOp::Sync { file }));
            repairs_left = 2;
        }
        let segments =
            recovered.segments.iter().map(|(&first, &len)| (first, Segment::found(len))).collect();
        let cursor = Cursor {
            seq: recovered.checkpoint,
            segment: recovered.cursor_segment,
            offset: recovered.cursor_offset,
        };
        Wal {
            segments,
            next_seq: recovered.next_seq,
            durable_seq: recovered.next_seq,
            force_new_segment: recovered.force_new_segment,
            staging: Staging::default(),
            in_flight: None,
            open_request: None,
            hold_from: None,
            frozen_request: None,
            latched: None,
            checkpoint: CheckpointState {
                durable: recovered.checkpoint,
                target: recovered.checkpoint,
                file_exists: recovered.checkpoint_file_exists,
                ..CheckpointState::default()
            },
            cursor,
            read_in_flight: false,
            damaged_reads: 0,
            resumed_past_damage: false,
            repairs_left,
            outbox,
            counters: WalCounters::default(),
            sizes: WalSizes::default(),
            prewrite: prewrite::Prewrite::default(),
        }
    }

    /// The same WAL with segment sizes `sizes` (a size of 0 is taken as 1 byte: seal after every
    /// group commit).
    pub fn with_sizes(mut self, sizes: WalSizes) -> Wal<W> {
        self.sizes = WalSizes {
            segment_bytes: sizes.segment_bytes.max(1),
            rotate_dispatched_bytes: sizes.rotate_dispatched_bytes.max(1),
            ..sizes
        };
        self
    }

    /// True once start-up repairs are durable.
    pub fn is_repaired(&self) -> bool {
        self.repairs_left == 0
    }

    /// The error that latched the WAL, if it did.
    pub fn latched(&self) -> Option<&DiskError> {
        self.latched.as_ref()
    }

    /// Every sequence below this is durable.
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq
    }

    /// The durable checkpoint: every sequence below it is done.
    pub fn durable_checkpoint(&self) -> u64 {
        self.checkpoint.durable
    }

    /// Counters for metrics.
    pub fn counters(&self) -> WalCounters {
        self.counters
    }

    /// Number of segments and their total size in bytes.
    pub fn disk_usage(&self) -> (u64, u64) {
        let bytes = self.segments.values().map(|s| s.written).sum();
        (self.segments.len() as u64, bytes)
    }

    /// Stages records for the next group commit; `waiter` is returned in the batch outcome.
    /// Fails at once (with the latch reason) if the WAL is latched.
    pub fn stage(&mut self, drafts: Vec<Draft>, waiter: W) -> Result<(), DiskError> {
        if let Some(error) = &self.latched {
            return Err(error.clone());
        }
        self.staging.push(drafts, waiter, self.sizes.bounds());
        Ok(())
    }

    /// True unless `drafts` are a bulk request and the bulk lane is full (`staging.rs`); the
    /// node refuses such a produce with 503 rather than stage it.
    pub fn admits(&self, drafts: &[Draft]) -> bool {
        let bytes = drafts.iter().map(Draft::weight).sum::<usize>() as u64;
        let bulk_waiting = self.staging.bulk_bytes() as u64;
        let bound = self.sizes.group_bulk_bytes.saturating_mul(staging::BULK_STAGED_GROUPS);
        bytes <= self.sizes.small_request_bytes
            || bulk_waiting == 0
            || bulk_waiting + bytes <= bound
    }

    /// Starts a group commit if none is in flight and something is staged, and a checkpoint write
    /// if one is due (`flush_now` skips the checkpoint delay, for shutdown).
    pub fn pump(&mut self, now: Instant, flush_now: bool) {
        if self.in_flight.is_none() && !self.staging.is_empty() && self.is_repaired() {
            self.start_batch();
        }
        self.maybe_write_checkpoint(now, flush_now);
        self.maybe_rotate_idle();
        self.maybe_prewrite();
    }

    /// An idle, fully dispatched active segment past the rotate size is replaced by a fresh one so that
    /// compaction can delete it: an idle node's WAL stays small without waiting for a produce.
    fn maybe_rotate_idle(&mut self) {
        let idle = self.in_flight.is_none() && self.staging.is_empty();
        let fully_dispatched = self.checkpoint.durable == self.durable_seq;
        let Some((_, active)) = self.segments.last_key_value() else {
            return;
        };
        if !idle || !fully_dispatched || !self.is_repaired() || self.latched.is_some() {
            return;
        }
        if active.written < self.sizes.rotate_dispatched_bytes || self.cursor.seq != self.next_seq {
            return;
        }
        let first_seq = self.next_seq;
        let file = FileId::WalSegment { first_seq };
        self.outbox.push_back((WalIo::Delete, DiskOp::Create { file }));
        self.segments.insert(first_seq, Segment::found(0));
        self.cursor = Cursor { seq: first_seq, segment: first_seq, offset: 0 };
        self.compact();
    }

    fn start_batch(&mut self) {
        let first_seq = self.next_seq;
        let group = self.staging.take_group(self.sizes.bounds());
        let (mut bytes, mut records, mut frame_lens) = (Vec::new(), Vec::new(), Vec::new());
        let mut waiters = Vec::with_capacity(group.len());
        for Staged { drafts, waiter, piece, .. } in group {
            if let Piece::Chunk { first: true, .. } = piece {
                self.open_request = Some(self.next_seq);
            }
            let count = drafts.len();
            for (index, draft) in drafts.into_iter().enumerate() {
                let mut record = self.sequence(draft);
                if let Piece::Chunk { last, .. } = piece {
                    let request = self.open_request.expect("invariant: a chunk of an open request");
                    record.chunk = Some(Chunk { request, last: last && index + 1 == count });
                }
                let before = bytes.len();
                record.encode_into(&mut bytes);
                let frame_len = u32::try_from(bytes.len() - before)
                    .expect("invariant: a frame is at most a few MiB");
                frame_lens.push(frame_len);
                records.push(record);
            }
            if let Piece::Chunk { last: true, .. } = piece {
                self.open_request = None;
            }
            waiters.extend(waiter);
        }
        let mut ios = 2;
        if self.needs_new_segment() {
            let file = FileId::WalSegment { first_seq };
            self.outbox.push_back((WalIo::Batch, DiskOp::Create { file }));
            self.segments.insert(first_seq, Segment::found(0));
            self.force_new_segment = false;
            ios += 1;
        }
        let (&segment, active) = self.segments.last_key_value().expect("a segment exists");
        let offset = active.written;
        let len = bytes.len() as u64;
        let file = FileId::WalSegment { first_seq: segment };
        let data = Bytes::from(bytes);
        self.outbox.push_back((WalIo::Batch, DiskOp::Write { file, offset, data }));
        self.outbox.push_back((WalIo::Batch, DiskOp::Sync { file }));
        self.segments.get_mut(&segment).expect("active segment").append(len);
        self.counters.group_commits += 1;
        self.counters.fsyncs += 1;
        self.counters.bytes_written += len;
        self.in_flight = Some(InFlight {
            segment,
            end_offset: offset + len,
            first_seq,
            records,
            frame_lens,
            waiters,
            ios_left: ios,
            error: None,
            open_after: self.open_request,
        });
    }

    /// `draft` with the next sequence number.
    fn sequence(&mut self, draft: Draft) -> WalRecord {
        let seq = self.next_seq;
        self.next_seq += 1;
        WalRecord {
            seq,
            timestamp_ms: draft.timestamp_ms,
            topic: draft.topic,
            topic_id: draft.topic_id,
            partition: draft.partition,
            key: draft.key,
            payload: draft.payload,
            chunk: None,
        }
    }

    fn needs_new_segment(&self) -> bool {
        let Some((_, active)) = self.segments.last_key_value() else {
            return true;
        };
        let fully_dispatched = self.checkpoint.durable == self.durable_seq;
        self.force_new_segment
            || active.written >= self.sizes.segment_bytes
            || (active.written >= self.sizes.rotate_dispatched_bytes && fully_dispatched)
    }

    /// Handles the completion of a `WalIo::Batch` operation; returns the outcome once the whole
    /// group commit has completed.
    pub fn on_batch_io(&mut self, result: Result<DiskDone, DiskError>) -> Option<BatchOutcome<W>> {
        let in_flight = self.in_flight.as_mut().expect("invariant: batch io only while in flight");
        if let Err(error) = result {
            in_flight.error.get_or_insert(error);
        }
        in_flight.ios_left -= 1;
        if in_flight.ios_left > 0 {
            return None;
        }
        let mut done = self.in_flight.take().expect("checked above");
        Some(match done.error.take() {
            None => self.complete_batch(done),
            Some(error) => self.fail_batch(done, error),
        })
    }

    fn complete_batch(&mut self, done: InFlight<W>) -> BatchOutcome<W> {
        self.durable_seq = done.first_seq + done.records.len() as u64;
        self.hold_from = done.open_after;
        self.segments.get_mut(&done.segment).expect("segment of a batch").durable = done.end_offset;
        self.counters.records_synced += done.records.len() as u64;
        let InFlight { first_seq, segment, records, frame_lens, waiters, .. } = done;
        let start_offset = done_start(&frame_lens, self.segments[&segment].durable);
        let durable = self.take_for_cursor(first_seq, segment, start_offset, records, &frame_lens);
        BatchOutcome { acked: waiters, failed: Vec::new(), error: None, durable }
    }

    /// The records of a synced batch the cursor may take straight from memory: all of them when
    /// the cursor sits exactly at the batch and no disk read is running, else none (they will be
    /// read back from disk).
    fn take_for_cursor(
        &mut self,
        first_seq: u64,
        segment: u64,
        start_offset: u64,
        records: Vec<WalRecord>,
        frame_lens: &[u32],
    ) -> Vec<(WalRecord, u64)> {
        if self.read_in_flight || self.cursor.seq != first_seq {
            return Vec::new();
        }
        // The cursor sits at the batch's first record: it is where the WAL just wrote it. Only a
        // cursor that resumed past damage can believe otherwise (the valid records it resumed at
        // were a stale copy, as a misdirected write leaves): the WAL's own layout wins.
        let realign = std::mem::take(&mut self.resumed_past_damage);
        let in_place = if self.cursor.segment == segment {
            self.cursor.offset == start_offset
        } else {
            // The batch opened a new segment: the cursor read all of the previous one.
            self.cursor.offset == self.segments[&self.cursor.segment].durable
        };
        assert!(in_place || realign, "invariant: the cursor sits at the batch");
        self.cursor = Cursor { seq: first_seq, segment, offset: start_offset };
        let mut taken: Vec<(WalRecord, u64)> =
            records.into_iter().zip(frame_lens.iter().map(|&len| u64::from(len))).collect();
        self.keep_below_hold(&mut taken);
        taken
    }

    /// Drops the records at or past the cursor's hold (`hold_from`), a suffix of `records`.
    fn keep_below_hold(&self, records: &mut Vec<(WalRecord, u64)>) {
        if let Some(hold) = self.hold_from {
            records.truncate(records.partition_point(|(record, _)| record.seq < hold));
        }
    }

    /// Advances the cursor past records the dispatcher took (from a batch or a read), in order.
    pub fn advance_cursor(&mut self, taken: &[(WalRecord, u64)]) {
        for (record, frame_len) in taken {
            assert_eq!(record.seq, self.cursor.seq, "invariant: the cursor moves record by record");
            self.cursor.seq += 1;
            self.cursor.offset += frame_len;
        }
    }

    fn fail_batch(&mut self, done: InFlight<W>, error: DiskError) -> BatchOutcome<W> {
        // Latch: nothing written by this batch is trusted, and nothing is ever appended again.
        self.latched = Some(error.clone());
        self.freeze_open_request();
        let mut failed = done.waiters;
        failed.append(&mut self.staging.drain_waiters());
        BatchOutcome { acked: Vec::new(), failed, error: Some(error), durable: Vec::new() }
    }

    /// Records the dispatcher's checkpoint (first sequence not yet done).
    pub fn set_checkpoint_target(&mut self, checkpoint: u64, now: Instant) {
        assert!(checkpoint >= self.checkpoint.target, "checkpoint went backwards");
        assert!(checkpoint <= self.durable_seq, "checkpoint past the durable WAL");
        if checkpoint > self.checkpoint.target {
            self.checkpoint.target = checkpoint;
            self.checkpoint.dirty_since.get_or_insert(now);
        }
    }

    /// When the checkpoint should next be written, if it is dirty.
    pub fn checkpoint_deadline(&self) -> Option<Instant> {
        if self.checkpoint.in_flight.is_some() {
            return None;
        }
        let due =
            self.checkpoint.dirty_since.map(|since| since.plus_millis(CHECKPOINT_SYNC_DELAY_MS));
        due.map(|due| due.max(self.checkpoint.retry_at.unwrap_or(due)))
    }

    fn maybe_write_checkpoint(&mut self, now: Instant, flush_now: bool) {
        let repaired = self.is_repaired();
        let state = &mut self.checkpoint;
        let Some(since) = state.dirty_since else {
            return;
        };
        let backing_off = state.retry_at.is_some_and(|at| now < at);
        let due = !backing_off && (flush_now || now >= since.plus_millis(CHECKPOINT_SYNC_DELAY_MS));
        if state.in_flight.is_some() || !due || !repaired {
            return;
        }
        let file = FileId::WalCheckpoint;
        let mut ios = 2;
        if !state.file_exists {
            self.outbox.push_back((WalIo::CheckpointCreate, DiskOp::Create { file }));
            state.file_exists = true;
            ios += 1;
        }
        let slot = state.next_slot;
        let offset = slot * checkpoint::SLOT_STRIDE;
        state.next_slot = 1 - slot;
        let data = Bytes::from(checkpoint::encode_slot(state.target));
        self.outbox.push_back((WalIo::Checkpoint, DiskOp::Write { file, offset, data }));
        self.outbox.push_back((WalIo::Checkpoint, DiskOp::Sync { file }));
        state.in_flight = Some(CheckpointWrite { value: Some(state.target), ios_left: ios, slot });
        state.dirty_since = None;
        self.counters.fsyncs += 1;
    }

    /// Handles the completion of a checkpoint operation. Returns the new durable checkpoint when
    /// it became durable. A failed checkpoint write is retried later (it only delays compaction).
    pub fn on_checkpoint_io(
        &mut self,
        io: WalIo,
        result: Result<DiskDone, DiskError>,
        now: Instant,
    ) -> Option<u64> {
        let state = &mut self.checkpoint;
        let write = state.in_flight.as_mut().expect("invariant: checkpoint io while in flight");
        write.ios_left -= 1;
        if result.is_err() {
            // Not durable: retry later, into the same slot, so the other slot keeps the last
            // good checkpoint. Re-create the file only if creating it is what failed (creating
            // truncates: it would destroy the good slot).
            state.dirty_since = Some(now);
            state.retry_at = Some(now.plus_millis(crate::constants::FAILURE_BACKOFF_MS));
            state.next_slot = write.slot;
            if io == WalIo::CheckpointCreate {
                state.file_exists = false;
            }
            write.value = None;
        }
        if write.ios_left > 0 {
            return None;
        }
        let write = state.in_flight.take().expect("invariant: checked above");
        let value = write.value?;
        state.durable = value;
        if state.target > value {
            state.dirty_since.get_or_insert(now);
        }
        self.compact();
        Some(value)
    }

    /// Once start-up's syncs made what recovery read durable: deletes the segments wholly below
    /// the recovered checkpoint. A crash after a checkpoint became durable and before its
    /// compaction ran leaves them; without this a node with nothing new to checkpoint would
    /// keep them forever.
    pub fn compact_recovered(&mut self) {
        self.compact();
    }

    /// Deletes segments wholly below the durable checkpoint (never the active one).
    fn compact(&mut self) {
        let checkpoint = self.checkpoint.durable;
        let firsts: Vec<u64> = self.segments.keys().copied().collect();
        for pair in firsts.windows(2) {
            let (first, next_first) = (pair[0], pair[1]);
            if next_first <= checkpoint && self.cursor.segment != first {
                self.segments.remove(&first);
                let file = FileId::WalSegment { first_seq: first };
                self.outbox.push_back((WalIo::Delete, DiskOp::Delete { file }));
            }
        }
    }

    /// Latches the WAL: no append is acknowledged again until restart.
    pub fn latch(&mut self, error: DiskError) {
        self.latched.get_or_insert(error);
        self.freeze_open_request();
    }

    /// Once latched, the request the cursor was held for will not be finished by this
    /// incarnation: the cursor moves on, and its records are set aside (`frozen_request`).
    fn freeze_open_request(&mut self) {
        if let Some(request) = self.hold_from.take() {
            self.frozen_request = Some(request);
        }
    }

    /// The chunked request open when the WAL latched, whose records the dispatcher must set
    /// aside (never dispatch, never count done) until a restart decides it.
    pub fn frozen_request(&self) -> Option<u64> {
        self.frozen_request
    }

    /// Handles completion of a start-up repair operation.
    pub fn on_repair_io(&mut self, result: Result<DiskDone, DiskError>) -> Result<(), DiskError> {
        self.repairs_left -= 1;
        result.map(|_| ())
    }

    /// Asks for a read of durable records the dispatcher has not seen, if it has room, the cursor
    /// is below `limit_seq`, and no read is running.
    pub fn poll_read(&mut self, limit_seq: u64) {
        if self.read_in_flight
            || self.cursor.seq >= self.durable_seq
            || self.cursor.seq >= limit_seq
            || self.hold_from.is_some_and(|hold| self.cursor.seq >= hold)
        {
            return;
        }
        loop {
            let segment = *self.segments.get(&self.cursor.segment).expect("cursor segment exists");
            if self.cursor.offset < segment.durable {
                let len = (segment.durable - self.cursor.offset).min(WAL_READ_CHUNK_BYTES);
                let file = FileId::WalSegment { first_seq: self.cursor.segment };
                let io =
                    WalIo::CursorRead { segment: self.cursor.segment, offset: self.cursor.offset };
                let read = DiskOp::ReadUpTo { file, offset: self.cursor.offset, len };
                self.outbox.push_back((io, read));
                self.read_in_flight = true;
                return;
            }
            // The cursor's segment is exhausted: the next record starts the next segment.
            let next = self.segments.range(self.cursor.segment + 1..).next().map(|(&f, _)| f);
            let next = next.expect("invariant: durable records past the cursor live in a segment");
            assert_eq!(next, self.cursor.seq, "segments are dense");
            self.cursor = Cursor { seq: next, segment: next, offset: 0 };
        }
    }

    /// Decodes a completed cursor read into records (from the cursor on). A failed read is an
    /// error (retried after a back-off). Bytes with no valid record where one must be (damaged,
    /// or none: the segment ends short of what the WAL wrote) are `Damaged`, read again soon (a
    /// read can return damaged data once); after `DAMAGED_READS_BEFORE_SKIP` such reads the
    /// records there are declared lost (the only copy was damaged at rest) and the cursor moves
    /// past them, so one damaged record cannot hold back every record behind it.
    pub fn on_cursor_read(
        &mut self,
        segment: u64,
        offset: u64,
        result: Result<DiskDone, DiskError>,
    ) -> Result<CursorRead, String> {
        self.read_in_flight = false;
        if segment != self.cursor.segment || offset != self.cursor.offset {
            return Ok(CursorRead::Records(Vec::new())); // the cursor moved on meanwhile
        }
        let bytes = match result {
            Ok(DiskDone::Data(bytes)) => bytes,
            Ok(DiskDone::Done) => return Err("read returned no data".to_string()),
            Err(error) => return Err(error.to_string()),
        };
        let mut records = damage::decode_run(&bytes, self.cursor.seq);
        if !records.is_empty() {
            self.damaged_reads = 0;
            self.keep_below_hold(&mut records);
            return Ok(CursorRead::Records(records));
        }
        self.damaged_reads += 1;
        let at = offset;
        if self.damaged_reads < damage::DAMAGED_READS_BEFORE_SKIP {
            return Ok(CursorRead::Damaged(format!(
                "WAL segment {segment}: no valid record at byte {at}"
            )));
        }
        self.damaged_reads = 0;
        Ok(CursorRead::Lost(self.skip_damage(segment, offset, &bytes)))
    }

    /// Moves the cursor past damaged bytes to the next valid record (or the segment's end) and
    /// returns the sequences lost on the way.
    fn skip_damage(&mut self, segment: u64, offset: u64, bytes: &[u8]) -> std::ops::Range<u64> {
        let first_lost = self.cursor.seq;
        let segment_end_seq =
            self.segments.range(segment + 1..).next().map_or(self.durable_seq, |(&next, _)| next);
        let (resume_offset, resume_seq) =
            match damage::find_resume(bytes, first_lost, segment_end_seq) {
                Some((pos, seq)) => (offset + pos as u64, seq),
                None => (self.segments[&segment].durable, segment_end_seq),
            };
        self.cursor = Cursor { seq: resume_seq, segment, offset: resume_offset };
        self.resumed_past_damage = true;
        first_lost..resume_seq
    }

    /// Next disk operation to emit.
    pub fn poll_io(&mut self) -> Option<(WalIo, DiskOp)> {
        self.outbox.pop_front()
    }
}

#[cfg(test)]
mod prewrite_tests;
#[cfg(test)]
mod tests;

/// Byte offset where a batch of frames ending at `end_offset` started.
fn done_start(frame_lens: &[u32], end_offset: u64) -> u64 {
    end_offset - frame_lens.iter().map(|&len| u64::from(len)).sum::<u64>()
}
