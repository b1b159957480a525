//! The metastore's disk pipeline: turns Raft's persistence needs into ordered `DiskOp`s on the
//! Raft log and snapshot files, and tells the metastore when each Raft `Ready` is durable.
//!
//! Ordering is the whole point. Jobs run in the order Raft produced them. A log job is a write
//! plus a sync; its completion acknowledges its `Ready` (and releases the messages that had to
//! wait for it) and makes the commit index of the hard state it wrote durable (entries up to it
//! may then be applied: see `driver.rs`). A snapshot job writes a record to a fresh slot of the snapshot file and syncs it;
//! only then is the log reset (truncate, sync, new header, sync), and log jobs queued behind it
//! wait until that reset is durable: a log write emitted behind a header write that then fails
//! would leave valid frames after a hole, which recovery must refuse as corruption. The runtime
//! completes ops on one file in emission order, so nothing here needs more than that contract.
//! Any disk error latches the pipeline: a failed fsync may have lost pages, so nothing more is
//! written or acknowledged until a restart.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use raft::eraftpb::Message;

use crate::io::{DiskDone, DiskError, DiskOp, FileId};

use super::storage::{Slot, place_snap_record, put_header};

/// Identifies a disk operation the metastore emitted; hand it back with the completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaIo(IoKind);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IoKind {
    /// Any op whose success only matters for the latch (writes, truncates, creates).
    Plain,
    /// A start-up repair of the log (counted: the metastore is ready once they are done).
    Repair,
    /// The sync that makes a log job durable.
    JobSync { job: u64 },
    /// The sync that makes a snapshot record durable.
    SnapSync,
    /// The last sync of a log reset (its header is durable); `repair` when it is a start-up
    /// repair, counted like the other repairs.
    ResetSync { repair: bool },
}

/// A log job made durable: what it acknowledges.
#[derive(Debug, Default)]
pub struct Durable {
    /// Highest `Ready` number now persisted.
    pub ready: Option<u64>,
    /// Messages that waited for this persistence.
    pub messages: Vec<Message>,
    /// Index of a received snapshot that is now durable.
    pub snapshot_index: Option<u64>,
    /// Commit index of the last hard state this job wrote: entries up to it may be applied.
    pub commit: Option<u64>,
}

enum Job {
    Log { data: Vec<u8>, durable: Durable },
    Snapshot { seq: u64, record: Vec<u8> },
}

struct SnapInFlight {
    seq: u64,
    slot: Slot,
}

/// The pipeline. See the module docs.
pub struct Persister {
    queue: VecDeque<Job>,
    held: BTreeMap<u64, Durable>,
    next_job: u64,
    log_len: u64,
    snap_exists: bool,
    snap_slot: Option<Slot>,
    snap_file_len: u64,
    snap_in_flight: Option<SnapInFlight>,
    /// A log reset was emitted and its header is not durable yet: nothing else goes to the log.
    resetting: bool,
    repairs_left: u32,
    failed: Option<DiskError>,
    outbox: VecDeque<(MetaIo, DiskOp)>,
    /// Bytes written to the log since its last reset (drives compaction).
    pub log_bytes: u64,
}

/// How recovery left the log file.
pub enum LogRepair {
    /// The file is fine and `len` bytes long.
    None { len: u64 },
    /// Cut a torn tail back to `len`.
    Truncate { len: u64 },
    /// Missing, empty or stale: (create and) reset it to a header naming `base_seq`.
    Reset { create: bool, base_seq: u64 },
}

impl Persister {
    /// A pipeline over files as recovery found them.
    pub fn new(repair: LogRepair, snap_file_len: Option<u64>, snap_slot: Option<Slot>) -> Self {
        let mut persister = Persister {
            queue: VecDeque::new(),
            held: BTreeMap::new(),
            next_job: 1,
            log_len: 0,
            snap_exists: snap_file_len.is_some(),
            snap_slot,
            snap_file_len: snap_file_len.unwrap_or(0),
            snap_in_flight: None,
            resetting: false,
            repairs_left: 0,
            failed: None,
            outbox: VecDeque::new(),
            log_bytes: 0,
        };
        match repair {
            LogRepair::None { len } => persister.log_len = len,
            LogRepair::Truncate { len } => {
                persister.log_len = len;
                persister.repair(DiskOp::Truncate { file: LOG, len });
                persister.repair(DiskOp::Sync { file: LOG });
            }
            LogRepair::Reset { create, base_seq } => {
                if create {
                    persister.repair(DiskOp::Create { file: LOG });
                }
                persister.reset_log(base_seq, true);
            }
        }
        persister.log_bytes = persister.log_len;
        persister
    }

    fn repair(&mut self, op: DiskOp) {
        self.repairs_left += 1;
        self.outbox.push_back((MetaIo(IoKind::Repair), op));
    }

    /// Empties the log and gives it a header naming `base_seq`. Log jobs wait until the header
    /// is durable (see the module docs).
    fn reset_log(&mut self, base_seq: u64, as_repair: bool) {
        let mut header = Vec::new();
        put_header(&mut header, base_seq);
        self.log_len = header.len() as u64;
        self.log_bytes = self.log_len;
        let ops = [
            DiskOp::Truncate { file: LOG, len: 0 },
            DiskOp::Sync { file: LOG },
            DiskOp::Write { file: LOG, offset: 0, data: Bytes::from(header) },
        ];
        for op in ops {
            if as_repair {
                self.repair(op);
            } else {
                self.outbox.push_back((MetaIo(IoKind::Plain), op));
            }
        }
        if as_repair {
            self.repairs_left += 1;
        }
        self.resetting = true;
        let done = IoKind::ResetSync { repair: as_repair };
        self.outbox.push_back((MetaIo(done), DiskOp::Sync { file: LOG }));
    }

    /// True once start-up repairs are durable.
    pub fn is_repaired(&self) -> bool {
        self.repairs_left == 0
    }

    /// The latched error, if any disk operation failed.
    pub fn failed(&self) -> Option<&DiskError> {
        self.failed.as_ref()
    }

    /// True while any job is queued or in flight (for tests: nothing is left behind).
    #[cfg(test)]
    pub fn is_busy(&self) -> bool {
        !self.queue.is_empty()
            || !self.held.is_empty()
            || self.snap_in_flight.is_some()
            || self.resetting
    }

    /// True while a snapshot record is queued or being written.
    pub fn snapshot_pending(&self) -> bool {
        self.snap_in_flight.is_some()
            || self.queue.iter().any(|j| matches!(j, Job::Snapshot { .. }))
    }

    /// Queues the persistence of one `Ready`. With nothing to write and nothing in flight, it is
    /// durable at once and handed back; otherwise it rides on the last pending job.
    pub fn push_ready(
        &mut self,
        data: Vec<u8>,
        durable: Durable,
        must_sync: bool,
    ) -> Option<Durable> {
        if !must_sync {
            if let Some(last) = self.last_pending() {
                last.ready = last.ready.max(durable.ready);
                last.messages.extend(durable.messages);
                last.commit = last.commit.max(durable.commit);
                return None;
            }
            return Some(durable);
        }
        self.queue.push_back(Job::Log { data, durable });
        self.pump();
        None
    }

    /// Queues a snapshot record; the log is reset behind it once it is durable.
    pub fn push_snapshot(&mut self, seq: u64, record: Vec<u8>) {
        self.queue.push_back(Job::Snapshot { seq, record });
        self.pump();
    }

    /// The durability point a write-less `Ready` can share: the last log job queued, else the
    /// last in flight, else (only a snapshot queued) a fresh empty job behind it.
    fn last_pending(&mut self) -> Option<&mut Durable> {
        if let Some(i) = self.queue.iter().rposition(|j| matches!(j, Job::Log { .. })) {
            let Job::Log { durable, .. } = &mut self.queue[i] else {
                unreachable!("position of a log job");
            };
            return Some(durable);
        }
        if !self.held.is_empty() {
            return self.held.values_mut().next_back();
        }
        if self.queue.is_empty() {
            return None;
        }
        self.queue.push_back(Job::Log { data: Vec::new(), durable: Durable::default() });
        let Some(Job::Log { durable, .. }) = self.queue.back_mut() else {
            unreachable!("just pushed a log job");
        };
        Some(durable)
    }

    /// Emits the next job once nothing is in flight. One log write + sync at a time: if a sync
    /// fails its pages may be gone, and a later write already on its way could then land valid
    /// frames *after* a hole, which recovery must treat as corruption. Log jobs queued meanwhile
    /// go out together as one write and one sync (group commit).
    fn pump(&mut self) {
        while self.failed.is_none()
            && self.snap_in_flight.is_none()
            && self.held.is_empty()
            && !self.resetting
        {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            match job {
                Job::Log { mut data, mut durable } => {
                    while let Some(Job::Log { .. }) = self.queue.front() {
                        let Some(Job::Log { data: more, durable: later }) = self.queue.pop_front()
                        else {
                            unreachable!("front is a log job");
                        };
                        data.extend_from_slice(&more);
                        durable.ready = durable.ready.max(later.ready);
                        durable.messages.extend(later.messages);
                        durable.snapshot_index = durable.snapshot_index.max(later.snapshot_index);
                        durable.commit = durable.commit.max(later.commit);
                    }
                    self.emit_log_job(data, durable);
                }
                Job::Snapshot { seq, record } => self.emit_snapshot(seq, record),
            }
        }
    }

    fn emit_log_job(&mut self, data: Vec<u8>, durable: Durable) {
        if !data.is_empty() {
            let len = data.len() as u64;
            self.outbox.push_back((
                MetaIo(IoKind::Plain),
                DiskOp::Write { file: LOG, offset: self.log_len, data: Bytes::from(data) },
            ));
            self.log_len += len;
            self.log_bytes += len;
        }
        let job = self.next_job;
        self.next_job += 1;
        self.held.insert(job, durable);
        self.outbox.push_back((MetaIo(IoKind::JobSync { job }), DiskOp::Sync { file: LOG }));
    }

    fn emit_snapshot(&mut self, seq: u64, record: Vec<u8>) {
        let len = record.len() as u64;
        let offset = place_snap_record(self.snap_slot, len);
        if !self.snap_exists {
            self.snap_exists = true;
            self.outbox.push_back((MetaIo(IoKind::Plain), DiskOp::Create { file: SNAP }));
        }
        let data = Bytes::from(record);
        self.outbox.push_back((MetaIo(IoKind::Plain), DiskOp::Write { file: SNAP, offset, data }));
        self.outbox.push_back((MetaIo(IoKind::SnapSync), DiskOp::Sync { file: SNAP }));
        self.snap_file_len = self.snap_file_len.max(offset + len);
        self.snap_in_flight = Some(SnapInFlight { seq, slot: Slot { offset, len } });
    }

    /// Handles the completion of an op we emitted. Returns what became durable, if anything.
    pub fn on_disk(&mut self, io: MetaIo, result: Result<DiskDone, DiskError>) -> Option<Durable> {
        if matches!(io.0, IoKind::Repair | IoKind::ResetSync { repair: true }) {
            self.repairs_left -= 1;
        }
        if let Err(error) = result {
            tracing::warn!(%error, "metastore disk operation failed; latched until restart");
            self.failed.get_or_insert(error);
            return None;
        }
        if self.failed.is_some() {
            return None;
        }
        match io.0 {
            IoKind::Plain | IoKind::Repair => None,
            IoKind::JobSync { job } => {
                let durable = self.held.remove(&job);
                self.pump();
                durable
            }
            IoKind::SnapSync => {
                self.on_snapshot_durable();
                None
            }
            IoKind::ResetSync { .. } => {
                self.resetting = false;
                self.pump();
                None
            }
        }
    }

    fn on_snapshot_durable(&mut self) {
        let done = self
            .snap_in_flight
            .take()
            .expect("invariant: a snapshot sync completes a snapshot in flight");
        self.snap_slot = Some(done.slot);
        if done.slot.offset == 0 && self.snap_file_len > done.slot.len {
            // The older record behind it is superseded: drop it to keep the file bounded.
            self.snap_file_len = done.slot.len;
            self.outbox.push_back((
                MetaIo(IoKind::Plain),
                DiskOp::Truncate { file: SNAP, len: done.slot.len },
            ));
        }
        self.reset_log(done.seq, false);
        self.pump();
    }

    /// Next disk operation to emit.
    pub fn poll_io(&mut self) -> Option<(MetaIo, DiskOp)> {
        self.outbox.pop_front()
    }
}

const LOG: FileId = FileId::MetaRaftLog;
const SNAP: FileId = FileId::MetaSnapshot;

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(persister: &mut Persister) -> Vec<(MetaIo, DiskOp)> {
        std::iter::from_fn(|| persister.poll_io()).collect()
    }

    /// Issue 9, defect 2: a log job queued behind a reset must not be emitted before the reset's
    /// header is durable, or a failed header write leaves valid frames after a hole.
    #[test]
    fn log_jobs_wait_for_the_reset_header_to_be_durable() {
        let mut persister =
            Persister::new(LogRepair::Reset { create: true, base_seq: 0 }, None, None);
        let ready = Durable { ready: Some(1), ..Durable::default() };
        assert!(persister.push_ready(vec![7; 40], ready, true).is_none());
        let emitted = drain(&mut persister);
        let writes: Vec<u64> = emitted
            .iter()
            .filter_map(|(_, op)| match op {
                DiskOp::Write { offset, .. } => Some(*offset),
                _ => None,
            })
            .collect();
        assert_eq!(writes, [0], "only the header is written until it is durable");
        // The header write fails once: the pipeline latches and nothing more reaches the log.
        for (io, op) in emitted {
            let result = match op {
                DiskOp::Write { .. } => Err(DiskError::Io("injected".into())),
                _ => Ok(DiskDone::Done),
            };
            assert!(persister.on_disk(io, result).is_none());
        }
        assert!(persister.failed().is_some());
        assert!(drain(&mut persister).is_empty());
    }

    #[test]
    fn the_queued_job_follows_once_the_reset_is_durable() {
        let mut persister =
            Persister::new(LogRepair::Reset { create: false, base_seq: 5 }, None, None);
        let ready = Durable { ready: Some(3), ..Durable::default() };
        assert!(persister.push_ready(vec![1; 10], ready, true).is_none());
        let mut acknowledged = None;
        for _ in 0..3 {
            for (io, _) in drain(&mut persister) {
                acknowledged = acknowledged.or(persister.on_disk(io, Ok(DiskDone::Done)));
            }
        }
        assert!(persister.is_repaired());
        assert_eq!(acknowledged.and_then(|d| d.ready), Some(3));
        assert!(!persister.is_busy());
    }
}
