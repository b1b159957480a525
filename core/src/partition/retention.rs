//! Retention on the owner: whole sealed segments are deleted once their newest record is older
//! than `retention_ms`, or while the log without its oldest segment still holds at least
//! `retention_bytes`. Never the active segment (an idle active segment whose newest record is
//! past `retention_ms` is first sealed, so a quiet partition ages out too), never a segment with a
//! record inside `retention_ms`, and only from the front, so the log never has a gap.
//!
//! Crash safety: one segment is deleted at a time, oldest first (its seal file, then the segment:
//! a crash in between leaves a segment without a seal, which start-up scans), and the next delete is emitted
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

/// A retention pass in progress: a segment's delete (or the active segment's create) is in
/// flight.
#[derive(Clone, Copy, Debug)]
pub(super) struct Trim {
    base: u64,
    now_ms: u64,
    policy: RetentionPolicy,
    stage: TrimStage,
    /// An operation of the stage failed (the stage ends when all have completed).
    failed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TrimStage {
    /// The segment to delete is the last file of the log, and its name is all that says where
    /// offsets go on after a restart: the active segment's (empty) file is created and synced
    /// first (a new file's directory entry may be durable only once the file was synced).
    /// Holds the operations still in flight.
    OpeningActive(u32),
    /// The oldest sealed segment's seal file is being deleted; the segment's delete follows (a
    /// crash in between leaves a segment without a seal: scanned at start-up, correct).
    DeletingSeal,
    /// The oldest sealed segment's delete is in flight.
    DeletingSegment,
}

impl PartitionLog {
    /// Starts a retention pass at `now_ms` (the owner's clock): emits the delete of the oldest
    /// segment that is past the policy, if any, and goes on one segment at a time as deletes
    /// complete. Does nothing while a pass runs.
    pub fn start_retention(&mut self, now_ms: u64, policy: RetentionPolicy) {
        self.last_pass = Some((now_ms, policy));
        if self.trim.is_some() {
            return;
        }
        self.seal_if_due(now_ms, policy);
        self.trim_next(now_ms, policy);
    }

    /// A commit just rolled the active segment: the log grew by a sealed segment, so the size
    /// bound is looked at again now rather than at the next pass (between two passes a busy
    /// partition may roll several segments). Judged with the latest pass's clock and policy (an
    /// older clock deletes no more by age than that pass could). The commit is running, so this
    /// never creates the active segment's file; it only deletes.
    pub(super) fn retention_after_roll(&mut self) {
        if let Some((now_ms, policy)) = self.last_pass
            && self.trim.is_none()
        {
            self.trim_next(now_ms, policy);
        }
    }

    /// Seals the active segment when it is due: its newest record is past `retention_ms` (a
    /// quiet partition ages out too), or it holds records and is older than the roll age. Only
    /// an idle log rolls here (a poisoned segment may hold a failed commit's bytes past its
    /// size); otherwise the next commit rolls first.
    fn seal_if_due(&mut self, now_ms: u64, policy: RetentionPolicy) {
        if self.size == 0 || !self.file_exists {
            return;
        }
        let since = *self.active_since_ms.get_or_insert(now_ms);
        let aged = past(self.active_newest_ms, now_ms, policy.retention_ms);
        let old = roll_age_ms(policy.retention_ms).is_some_and(|age| now_ms >= since + age);
        if !aged && !old {
            return;
        }
        if matches!(self.state, super::LogState::Idle) {
            self.seal_and_roll();
        } else {
            self.roll_due = true;
        }
    }

    fn trim_next(&mut self, now_ms: u64, policy: RetentionPolicy) {
        let Some((&base, oldest)) = self.sealed.iter().next() else { return };
        let by_age = past(oldest.newest_ms, now_ms, policy.retention_ms);
        let by_size =
            policy.retention_bytes.is_some_and(|limit| self.size_bytes() - oldest.size >= limit);
        if (!by_age && !by_size) || self.seal_in_flight(base) {
            return;
        }
        let stage = if self.sealed.len() == 1 && !self.file_exists {
            // Without a file of its own, the active segment's base would be lost with the last
            // sealed one, and a restart would begin the log again at offset 0. An idle log only:
            // a running commit creates the file itself.
            if !matches!(self.state, super::LogState::Idle) {
                return;
            }
            let file = self.active_file();
            self.outbox.push_back((PartIo::Trim, DiskOp::Create { file }));
            self.outbox.push_back((PartIo::Trim, DiskOp::Sync { file }));
            self.fsyncs += 1;
            TrimStage::OpeningActive(2)
        } else {
            let file = FileId::PartitionSeal { key: self.key, base };
            self.outbox.push_back((PartIo::Trim, DiskOp::Delete { file }));
            TrimStage::DeletingSeal
        };
        self.trim = Some(Trim { base, now_ms, policy, stage, failed: false });
    }

    /// The pass's operation completed: on success the segment is gone (or the active segment's
    /// file exists) and the pass goes on; on failure nothing changed (the next pass tries again).
    pub(super) fn on_trim_io(&mut self, result: Result<DiskDone, DiskError>) {
        let mut trim = self.trim.take().expect("invariant: a trim completion follows a trim op");
        if let TrimStage::OpeningActive(left) = trim.stage {
            let failed = trim.failed || result.is_err();
            if let Err(error) = result {
                tracing::warn!(partition = %self.key, %error, "retention: creating the active segment failed; retrying at the next pass");
            }
            if left > 1 {
                trim.stage = TrimStage::OpeningActive(left - 1);
                trim.failed = failed;
                self.trim = Some(trim);
                return;
            }
            if failed {
                // The file may exist now, or not: a commit creates it again (a create
                // truncates, and nothing was written to it).
                return;
            }
            self.file_exists = true;
            return self.trim_next(trim.now_ms, trim.policy);
        }
        if let Err(error) = result {
            tracing::warn!(partition = %self.key, base = trim.base, %error, "retention: deleting a segment failed; retrying at the next pass");
            return;
        }
        if trim.stage == TrimStage::DeletingSeal {
            let file = FileId::PartitionSegment { key: self.key, base: trim.base };
            self.outbox.push_back((PartIo::Trim, DiskOp::Delete { file }));
            self.trim = Some(Trim { stage: TrimStage::DeletingSegment, ..trim });
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

    /// True while the pass creates the active segment's file: no commit may start (its own
    /// create or write could land before it, and a create truncates).
    pub(super) fn opening_active(&self) -> bool {
        self.trim.is_some_and(|trim| matches!(trim.stage, TrimStage::OpeningActive(_)))
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
            matches!(trim.stage, TrimStage::DeletingSeal | TrimStage::DeletingSegment)
                && offset >= trim.base
                && self.sealed.get(&trim.base).is_some_and(|s| offset < s.index.records())
        })
    }

    /// Retention's operations in flight (one delete, or the active segment's create and sync).
    pub(super) fn trims_in_flight(&self) -> u32 {
        match self.trim.map(|trim| trim.stage) {
            None => 0,
            Some(TrimStage::DeletingSeal | TrimStage::DeletingSegment) => 1,
            Some(TrimStage::OpeningActive(left)) => left,
        }
    }
}

/// How old an active segment holding records may grow before it rolls (`None`: retention is
/// off, segments roll by size only).
pub fn roll_age_ms(retention_ms: u64) -> Option<u64> {
    use crate::constants::{SEGMENT_ROLL_AGE_DIVISOR, SEGMENT_ROLL_MIN_AGE_MS};
    (retention_ms > 0)
        .then(|| (retention_ms / SEGMENT_ROLL_AGE_DIVISOR).max(SEGMENT_ROLL_MIN_AGE_MS))
}

/// A record stamped `newest_ms` is past `retention_ms` at `now_ms` (never with retention 0).
fn past(newest_ms: u64, now_ms: u64, retention_ms: u64) -> bool {
    retention_ms > 0 && now_ms >= newest_ms.saturating_add(retention_ms)
}
