//! The disk's fault knobs. Rates are per operation (or per start-up) and are drawn once per seed
//! (swarm testing); switches (`disk_full`, `slow_factor`, `failing`, `lie_on`) are flipped by the
//! fault schedule for a while and then cleared, and one-shots (`fail_next_sync`,
//! `fail_next_write`, ...) strike the next matching operation, so faults are structured, not only
//! per-event noise.

use narad_core::FileId;

/// What kind of file a `FileId` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileClass {
    /// An ingress WAL segment.
    Wal,
    /// The WAL checkpoint.
    Checkpoint,
    /// A partition log.
    Partition,
    /// A partition segment's seal file: the random disk faults strike it like any file, but
    /// targeted partition faults aim at the segments (`FileMatch::partition`).
    Seal,
    /// The metastore's Raft log or snapshot (cluster).
    Meta,
    /// The consumer journal (queue acks and delivery counts).
    Journal,
}

impl FileClass {
    /// The class of `file`.
    pub fn of(file: &FileId) -> FileClass {
        match file {
            FileId::WalSegment { .. } => FileClass::Wal,
            FileId::WalCheckpoint => FileClass::Checkpoint,
            FileId::PartitionSegment { .. } => FileClass::Partition,
            FileId::PartitionSeal { .. } => FileClass::Seal,
            FileId::MetaRaftLog | FileId::MetaSnapshot => FileClass::Meta,
            FileId::ConsumerJournal { .. } => FileClass::Journal,
        }
    }

    /// Files that hold records.
    pub fn holds_records(self) -> bool {
        matches!(self, FileClass::Wal | FileClass::Partition)
    }

    /// Files the corruption-class faults (misdirected writes, lying fsyncs, bit flips at rest,
    /// torn live writes) strike: those holding records, and the seal files describing them.
    pub fn corruptible(self) -> bool {
        self.holds_records() || self == FileClass::Seal
    }
}

/// Selects files for a targeted fault: a class, optionally one partition index (of any topic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMatch {
    /// Class of the file.
    pub class: FileClass,
    /// For partition logs: only this partition index.
    pub partition: Option<u32>,
}

impl FileMatch {
    /// Every file of `class`.
    pub fn class(class: FileClass) -> FileMatch {
        FileMatch { class, partition: None }
    }

    /// Partition `index` of any topic.
    pub fn partition(index: u32) -> FileMatch {
        FileMatch { class: FileClass::Partition, partition: Some(index) }
    }

    /// True when `file` is selected.
    pub fn matches(&self, file: &FileId) -> bool {
        if FileClass::of(file) != self.class {
            return false;
        }
        match (self.partition, file) {
            (Some(index), FileId::PartitionSegment { key, .. }) => key.partition == index,
            _ => true,
        }
    }
}

/// Every fault knob of one node's disk. `Default` is a perfect disk.
#[derive(Clone, Debug)]
pub struct DiskFaults {
    /// Probability that a sync fails (dirty data lost).
    pub fsync_error_rate: f64,
    /// Probability that a write to any file fails once with EIO (nothing of it lands).
    pub write_error_rate: f64,
    /// Probability that a read fails.
    pub read_error_rate: f64,
    /// Probability, per metastore file and start-up, that reading it at start-up fails.
    pub start_read_error_rate: f64,
    /// Probability that a read returns one flipped bit.
    pub read_corruption_rate: f64,
    /// Probability that a write to a partition log (or seal file) lands only a sector prefix but
    /// reports success.
    pub torn_live_rate: f64,
    /// Probability that a write to a record file (or seal file) lands at the wrong offset.
    pub misdirect_rate: f64,
    /// Probability that a sync of a record file (or seal file) lies.
    pub lying_fsync_rate: f64,
    /// Created files' directory entries are durable only at their first sync.
    pub missing_dir_fsync: bool,
    /// Power loss keeps a sector-aligned prefix of unsynced writes instead of dropping them all.
    pub torn_at_power_loss: bool,
    /// Writes that grow a file (and creates) fail with ENOSPC while set.
    pub disk_full: bool,
    /// Latency multiplier (1 = healthy).
    pub slow_factor: u64,
    /// One-shot: the next sync of a matching file fails.
    pub fail_next_sync: Option<FileMatch>,
    /// One-shot: the next write to a matching file fails with EIO (nothing of it lands).
    pub fail_next_write: Option<FileMatch>,
    /// One-shot: the next write to a matching file is torn but reports success.
    pub torn_next_write: Option<FileMatch>,
    /// One-shot: the next write to a matching file lands this many sectors off (negative = back).
    pub misdirect_next_write: Option<(FileMatch, i64)>,
    /// While set, every sync of a matching file lies.
    pub lie_on: Option<FileMatch>,
    /// While set, every write and sync of a matching file fails (a stuck destination).
    pub failing: Option<FileMatch>,
}

impl Default for DiskFaults {
    fn default() -> Self {
        DiskFaults {
            fsync_error_rate: 0.0,
            write_error_rate: 0.0,
            read_error_rate: 0.0,
            start_read_error_rate: 0.0,
            read_corruption_rate: 0.0,
            torn_live_rate: 0.0,
            misdirect_rate: 0.0,
            lying_fsync_rate: 0.0,
            missing_dir_fsync: false,
            torn_at_power_loss: false,
            disk_full: false,
            slow_factor: 1,
            fail_next_sync: None,
            fail_next_write: None,
            torn_next_write: None,
            misdirect_next_write: None,
            lie_on: None,
            failing: None,
        }
    }
}

impl DiskFaults {
    /// True when a one-shot `slot` matches `file`; consumes it.
    pub fn take_if_matches(slot: &mut Option<FileMatch>, file: &FileId) -> bool {
        if slot.is_some_and(|m| m.matches(file)) {
            *slot = None;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_core::{PartitionKey, TopicId};

    #[test]
    fn matches_by_class_and_partition() {
        let p1 = FileId::PartitionSegment {
            key: PartitionKey { topic: TopicId(3), partition: 1 },
            base: 0,
        };
        assert!(FileMatch::partition(1).matches(&p1));
        assert!(!FileMatch::partition(0).matches(&p1));
        assert!(FileMatch::class(FileClass::Partition).matches(&p1));
        assert!(!FileMatch::class(FileClass::Wal).matches(&p1));
        let mut slot = Some(FileMatch::class(FileClass::Partition));
        assert!(DiskFaults::take_if_matches(&mut slot, &p1));
        assert!(slot.is_none());
    }
}
