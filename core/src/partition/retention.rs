//! Retention on the owner: whole sealed segments are deleted once their newest record is older
//! than `retention_ms`, or while the log without its oldest segment still holds at least
//! `retention_bytes`. Never the active segment (an idle active segment whose newest record is
//! past `retention_ms` is first sealed, so a quiet partition ages out too), never a segment with a
//! record inside `retention_ms`, and only from the front, so the log never has a gap.
//!
//! Crash safety: one segment is deleted at a time, oldest first, and the next delete is emitted
//! only once the previous one completed. Deletes of different files may complete in any order, so
//! two in flight could leave a younger segment deleted and an older one present after a crash: a
//! gap recovery must refuse. The log start offset advances when a delete has completed (the
//! removal is durable then, by the disk contract), so a restart never finds it lower than what
//! reads were told. A read of a segment whose delete is in flight is refused as busy (the file
//! may be gone by the time the read runs).

use super::{PartIo, PartitionLog};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};

/// A topic's retention, as the metastore holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep records this long after their timestamp (0: forever).
    pub retention_ms: u64,
    /// Keep at most about this many bytes per partition (whole sealed segments beyond go).
    pub retention_bytes: Option<u64>,
}

/// What one completed segment deletion removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trimmed {
    /// The log's first offset from now on.
    pub log_start_offset: u64,
    pub records: u64,
    pub bytes: u64,
    /// Timestamp of the newest record the segment held.
    pub newest_ms: u64,
}

/// Why a read at some offset cannot be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadRefusal {
    /// Below the log start offset: the records are gone.
    Gone { log_start_offset: u64 },
    /// In the segment whose delete is in flight (it is about to be gone).
    BeingTrimmed,
}

/// A retention pass in progress: a segment's delete is in flight.
#[derive(Clone, Copy, Debug)]
pub(super) struct Trim {
    base: u64,
    now_ms: u64,
    policy: RetentionPolicy,
}

impl PartitionLog {
    /// Starts a retention pass at `now_ms` (the owner's clock): emits the delete of the oldest
    /// segment that is past the policy, if any, and goes on one segment at a time as deletes
    /// complete. Does nothing while a pass runs.
    pub fn start_retention(&mut self, now_ms: u64, policy: RetentionPolicy) {
        if self.trim.is_some() {
            return;
        }
        self.seal_if_aged(now_ms, policy);
        self.trim_next(now_ms, policy);
    }

    /// A record past `retention_ms` in an idle, quiet active segment: seal it so it can go (the
    /// next commit starts a new segment at the high watermark).
    fn seal_if_aged(&mut self, now_ms: u64, policy: RetentionPolicy) {
        let aged = past(self.active_newest_ms, now_ms, policy.retention_ms);
        // Idle only: a poisoned segment may hold a failed commit's bytes past its size.
        let idle = matches!(self.state, super::LogState::Idle);
        if aged && idle && self.size > 0 && self.file_exists {
            self.roll_to(self.high_watermark());
        }
    }

    fn trim_next(&mut self, now_ms: u64, policy: RetentionPolicy) {
        let Some((&base, oldest)) = self.sealed.iter().next() else { return };
        let by_age = past(oldest.newest_ms, now_ms, policy.retention_ms);
        let by_size =
            policy.retention_bytes.is_some_and(|limit| self.size_bytes() - oldest.size >= limit);
        if !by_age && !by_size {
            return;
        }
        let file = FileId::PartitionSegment { key: self.key, base };
        self.outbox.push_back((PartIo::Trim, DiskOp::Delete { file }));
        self.trim = Some(Trim { base, now_ms, policy });
    }

    /// The delete of the pass's segment completed: on success the segment is gone and the pass
    /// goes on; on failure the segment stays (the next pass tries again).
    pub(super) fn on_trim_io(&mut self, result: Result<DiskDone, DiskError>) {
        let trim = self.trim.take().expect("invariant: a trim completion follows a trim delete");
        if let Err(error) = result {
            tracing::warn!(partition = %self.key, base = trim.base, %error, "retention: deleting a segment failed; retrying at the next pass");
            return;
        }
        let segment = self.sealed.remove(&trim.base).expect("invariant: the trimmed segment");
        self.trimmed.push_back(Trimmed {
            log_start_offset: self.log_start_offset(),
            records: segment.index.records() - trim.base,
            bytes: segment.size,
            newest_ms: segment.newest_ms,
        });
        self.trim_next(trim.now_ms, trim.policy);
    }

    /// The next completed deletion, for events and metrics.
    pub fn poll_trimmed(&mut self) -> Option<Trimmed> {
        self.trimmed.pop_front()
    }

    /// Why a read at `offset` must not be sent, if it must not.
    pub fn refuse_read(&self, offset: u64) -> Option<ReadRefusal> {
        let log_start_offset = self.log_start_offset();
        if offset < log_start_offset {
            return Some(ReadRefusal::Gone { log_start_offset });
        }
        self.is_being_trimmed(offset).then_some(ReadRefusal::BeingTrimmed)
    }

    /// True if `offset` sits in a segment whose delete is in flight (a read must not be sent).
    pub fn is_being_trimmed(&self, offset: u64) -> bool {
        self.trim.is_some_and(|trim| {
            offset >= trim.base
                && self.sealed.get(&trim.base).is_some_and(|s| offset < s.index.records())
        })
    }

    /// Delete operations in flight (0 or 1).
    pub(super) fn trims_in_flight(&self) -> u32 {
        u32::from(self.trim.is_some())
    }
}

/// A record stamped `newest_ms` is past `retention_ms` at `now_ms` (never with retention 0).
fn past(newest_ms: u64, now_ms: u64, retention_ms: u64) -> bool {
    retention_ms > 0 && now_ms >= newest_ms.saturating_add(retention_ms)
}
