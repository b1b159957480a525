//! Pre-writing the active WAL segment. An fdatasync that overwrites blocks already written and
//! synced costs less than one that appends, since no file size or extent change must be
//! committed with it (measured in docs/benchmarks.md). So when the WAL is idle (no group commit
//! in flight or staged) and every byte of the active segment is durable, it writes a chunk of
//! zeros past the segment's end and syncs it, until a chunk's worth of such space lies ahead of
//! the next group commit's write. Recovery reads a zero tail after the last frame as the clean
//! end of a log, so nothing else changes.
//!
//! These are ordinary `Write` and `Sync` operations, emitted and counted like every other, so the
//! simulated disk runs them with all its faults (a misdirected pre-write zeroes real records at
//! rest, and the checker sees it). One pre-write at a time; a group commit staged meanwhile is
//! queued behind it on the same file. A failed pre-write write stops pre-writing for the
//! segment. A failed pre-write sync latches the WAL, and fails the group commit queued behind it
//! if there is one: after a failed fsync the kernel may have dropped dirty pages and reports the
//! error only once, so a later sync's success proves nothing about them.

use bytes::Bytes;

use super::{Wal, WalIo};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};

/// The pre-write state of a WAL.
#[derive(Default)]
pub(super) struct Prewrite {
    /// The pre-write in flight: its segment, the end it extends to, its operations left.
    in_flight: Option<InFlightPrewrite>,
    /// A segment whose pre-write write failed: not pre-written again.
    stopped: Option<u64>,
    /// A chunk of zeros, shared by every pre-write.
    zeros: Bytes,
}

#[derive(Clone, Copy)]
struct InFlightPrewrite {
    segment: u64,
    end: u64,
    ios_left: u32,
}

/// What a completed pre-write operation means for the node.
#[derive(Debug)]
pub enum PrewriteDone {
    /// Nothing to report (done, or waiting for its sync).
    Quiet,
    /// The write failed: the segment is not pre-written any more (nothing was in doubt).
    Stopped(DiskError),
    /// The sync failed: the WAL latched.
    Latched(DiskError),
}

impl<W> Wal<W> {
    /// Starts a pre-write of the active segment if the WAL is idle and the segment is durable
    /// to its end with less than half a chunk pre-written ahead (and below its seal size).
    pub(super) fn maybe_prewrite(&mut self) {
        let chunk = self.sizes.prewrite_chunk_bytes;
        let idle = self.in_flight.is_none() && self.staging.is_empty();
        if chunk == 0 || !idle || self.prewrite.in_flight.is_some() || self.latched.is_some() {
            return;
        }
        if !self.is_repaired() || self.needs_new_segment() {
            return; // the next group commit opens a new segment
        }
        let Some((&segment, active)) = self.segments.last_key_value() else { return };
        let ahead = active.prewritten - active.written;
        let start = active.prewritten;
        let durable = active.durable == active.written;
        if !durable || ahead >= chunk / 2 || start >= self.sizes.segment_bytes {
            return;
        }
        if self.prewrite.stopped == Some(segment) {
            return;
        }
        if self.prewrite.zeros.len() as u64 != chunk {
            let len = usize::try_from(chunk).expect("invariant: a chunk fits in memory");
            self.prewrite.zeros = Bytes::from(vec![0; len]);
        }
        let file = FileId::WalSegment { first_seq: segment };
        let data = self.prewrite.zeros.clone();
        self.outbox.push_back((WalIo::Prewrite, DiskOp::Write { file, offset: start, data }));
        self.outbox.push_back((WalIo::Prewrite, DiskOp::Sync { file }));
        self.counters.prewrite_syncs += 1;
        let end = start + chunk;
        self.prewrite.in_flight = Some(InFlightPrewrite { segment, end, ios_left: 2 });
    }

    /// A pre-write operation completed (its write, then its sync).
    pub fn on_prewrite_io(&mut self, result: Result<DiskDone, DiskError>) -> PrewriteDone {
        let mut prewrite =
            self.prewrite.in_flight.take().expect("invariant: prewrite io only while in flight");
        prewrite.ios_left -= 1;
        let last = prewrite.ios_left == 0;
        match result {
            Err(error) if !last => {
                self.prewrite.stopped = Some(prewrite.segment);
                self.prewrite.in_flight = Some(prewrite);
                PrewriteDone::Stopped(error)
            }
            Ok(_) if !last => {
                self.prewrite.in_flight = Some(prewrite);
                PrewriteDone::Quiet
            }
            Err(error) => {
                if let Some(batch) = self.in_flight.as_mut() {
                    batch.error.get_or_insert_with(|| error.clone());
                }
                self.latch(error.clone());
                PrewriteDone::Latched(error)
            }
            Ok(_) => {
                // A segment is never pre-written again once stopped: stopped by this write.
                let write_failed = self.prewrite.stopped == Some(prewrite.segment);
                let segment = self.segments.get_mut(&prewrite.segment);
                if let Some(segment) = segment.filter(|_| !write_failed) {
                    segment.prewritten = segment.prewritten.max(prewrite.end);
                }
                PrewriteDone::Quiet
            }
        }
    }

    /// Pre-write operations awaited (for `outstanding_io`).
    pub(super) fn prewrite_ios(&self) -> u32 {
        self.prewrite.in_flight.map_or(0, |p| p.ios_left)
    }
}
