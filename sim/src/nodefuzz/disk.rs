//! The fuzzed disk executor: runtime-sim's `SimDisk` (volatile vs durable bytes, sync, power
//! loss) behind one queue of pending operations per file. Operations on one file complete in
//! emission order (the core's disk contract); which file's head completes next is the input's
//! choice, and so is whether it fails. A failed operation changes nothing, except a failed sync,
//! which drops the file's unsynced writes (as Linux drops dirty pages after a failed fsync).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use narad_core::{DiskDone, DiskError, DiskOp, FileId, IoToken};
use narad_sim_runtime::{Component, FileClass, FileMatch, SimDisk, component_rng};

use super::input::{CrashKind, Fault};

/// An operation the node emitted and is waiting for.
#[derive(Clone, Debug)]
pub struct Pending {
    /// Emission order over every file.
    pub seq: u64,
    pub token: IoToken,
    pub op: DiskOp,
}

/// The disk of the node under test.
pub struct FuzzDisk {
    disk: SimDisk,
    queues: BTreeMap<FileId, VecDeque<Pending>>,
    next_seq: u64,
    /// Operations completed (successfully or not) since the run began.
    pub completed: u64,
}

impl Default for FuzzDisk {
    fn default() -> Self {
        FuzzDisk {
            disk: SimDisk::new(component_rng(0x6e6f_6465, Component::Disk(1))),
            queues: BTreeMap::new(),
            next_seq: 0,
            completed: 0,
        }
    }
}

impl FuzzDisk {
    /// Queues an operation the node emitted.
    pub fn submit(&mut self, token: IoToken, op: DiskOp) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queues.entry(op.file()).or_default().push_back(Pending { seq, token, op });
    }

    /// True when nothing is in flight.
    pub fn idle(&self) -> bool {
        self.queues.is_empty()
    }

    /// Operations in flight.
    pub fn in_flight(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    /// Removes the head of the `pick`-th busy file's queue (modulo the number of busy files).
    pub fn pop_pick(&mut self, pick: u8) -> Option<Pending> {
        let busy = self.queues.len();
        let file = *self.queues.keys().nth(usize::from(pick) % busy.max(1))?;
        self.pop_file(file)
    }

    /// Removes the oldest operation in flight (what a FIFO executor would finish next).
    pub fn pop_oldest(&mut self) -> Option<Pending> {
        let file = *self
            .queues
            .iter()
            .min_by_key(|(_, queue)| queue.front().map_or(u64::MAX, |p| p.seq))?
            .0;
        self.pop_file(file)
    }

    /// Removes the head of the queue whose head was emitted last (tests: the reverse of FIFO
    /// wherever the contract allows it).
    pub fn pop_newest_head(&mut self) -> Option<Pending> {
        let file =
            *self.queues.iter().max_by_key(|(_, queue)| queue.front().map_or(0, |p| p.seq))?.0;
        self.pop_file(file)
    }

    /// Files with operations in flight.
    pub fn busy_files(&self) -> Vec<FileId> {
        self.queues.keys().copied().collect()
    }

    fn pop_file(&mut self, file: FileId) -> Option<Pending> {
        let queue = self.queues.get_mut(&file)?;
        let pending = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&file);
        }
        pending
    }

    /// Performs `op` and returns what the node is told; with `fault`, it fails instead.
    pub fn execute(&mut self, op: &DiskOp, fault: Option<Fault>) -> Result<DiskDone, DiskError> {
        self.completed += 1;
        let Some(fault) = fault else {
            return self.disk.complete(op);
        };
        if let DiskOp::Sync { file } = op {
            // The sync fails and the file's dirty pages are dropped.
            self.disk.faults.fail_next_sync = Some(file_match(file));
            let _ = self.disk.complete(op);
            self.disk.faults.fail_next_sync = None;
        }
        Err(match fault {
            Fault::Io => DiskError::Io("injected I/O error".into()),
            Fault::NoSpace => DiskError::NoSpace,
        })
    }

    /// The process died: nothing in flight completes any more (the `land` heads picked first
    /// reached the disk; the node never learns it). Power loss then drops what is not synced.
    pub fn crash(&mut self, kind: CrashKind, land: &[u8]) {
        for &pick in land {
            if let Some(pending) = self.pop_pick(pick) {
                let _ = self.execute(&pending.op, None);
            }
        }
        self.queues.clear();
        self.disk.process_crash();
        if kind != CrashKind::Process {
            self.disk.faults.torn_at_power_loss = kind == CrashKind::PowerLossTorn;
            self.disk.power_loss();
            self.disk.faults.torn_at_power_loss = false;
        }
    }

    /// What a restarting process finds.
    pub fn snapshot(&self) -> BTreeMap<FileId, Bytes> {
        self.disk.snapshot()
    }

    /// Current length of every WAL segment, in order.
    pub fn wal_segment_sizes(&self) -> Vec<u64> {
        self.disk
            .files()
            .filter(|(id, _)| matches!(id, FileId::WalSegment { .. }))
            .map(|(_, file)| file.len())
            .collect()
    }
}

/// A `FileMatch` that selects `file` among the files of the disk.
fn file_match(file: &FileId) -> FileMatch {
    match file {
        FileId::PartitionSegment { key, .. } => FileMatch::partition(key.partition),
        other => FileMatch::class(FileClass::of(other)),
    }
}
