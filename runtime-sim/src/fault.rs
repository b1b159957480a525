//! Fault classes and their hit counters. Every fault the simulator injects is counted under its
//! class, so a sweep can show which classes were actually exercised (a class that is "on" but
//! never hits tests nothing).

/// One class of injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultClass {
    /// The process is killed: volatile state is gone, the OS page cache survives.
    ProcessCrash,
    /// Power loss: unsynced data is dropped (or torn, see `TornWrite`).
    PowerLoss,
    /// At power loss a file keeps a sector-aligned prefix of its unsynced writes.
    TornWrite,
    /// fsync fails; the dirty data it covered is lost.
    FsyncError,
    /// One write fails with EIO and nothing of it lands; the file's next operations behave.
    WriteError,
    /// A read fails with an I/O error.
    ReadError,
    /// Reading a metastore file at start-up fails: the process exits and is restarted later.
    StartReadError,
    /// A read returns a flipped bit (the data at rest is intact).
    ReadCorruption,
    /// Writes that would grow a file fail with ENOSPC.
    DiskFull,
    /// Operations take far longer than usual.
    SlowDisk,
    /// A created file's directory entry is not durable until the file's first fsync.
    MissingDirFsync,
    /// The process stops running for a while, then resumes.
    Pause,
    /// A write reports success but only a sector-aligned prefix of it landed.
    TornWriteLive,
    /// A write lands at the wrong offset (corruption class when it overwrites older data).
    MisdirectedWrite,
    /// A bit of data at rest flips (corruption class).
    BitFlip,
    /// fsync reports success without making the data durable (corruption class).
    LyingFsync,
    /// A scheduled graceful restart (after a WAL latch, as an operator would).
    Restart,
    /// A peer message took far longer than usual (so later messages overtake it).
    NetDelay,
    /// A peer message was lost.
    NetDrop,
    /// A peer message was delivered twice.
    NetDuplicate,
    /// A peer message was stopped by a symmetric partition.
    Partition,
    /// A peer message was stopped by a one-way partition.
    OneWayPartition,
    /// The metastore leader was cut off from every other node.
    LeaderIsolation,
    /// A peer message was held on a clogged link (released later in a burst).
    Clog,
    /// A node died for longer than the membership dead timeout.
    NodeDeath,
    /// A node runs with a skewed clock (offset and drift).
    ClockSkew,
    /// The metastore leader changed (observed, not injected: the fruit of the faults above).
    LeaderChange,
    /// A metastore snapshot record was written (observed: the path that resets the Raft log).
    MetaSnapshotWrite,
    /// A transient write error hit the metastore's Raft log or snapshot (observed: the subset
    /// of `WriteError` that reaches the metastore's persistence pipeline).
    WriteErrorMeta,
    /// A WAL segment was compacted away while a sealed segment still held undispatched records
    /// (observed on the disk: the checkpoint file's value is below the newest segment's first
    /// sequence when a segment is deleted), so compaction ran with several sealed segments and a
    /// backlog.
    WalSealedWithBacklog,
    /// A write to a partition log after a failed commit on it (a failed write, create or fsync,
    /// or a write that landed torn or misdirected): the retried or next commit on that partition.
    PartitionCommitAfterFailure,
    /// A partition log rolled: a segment after its first was created (observed on the disk), so
    /// commits, reads and recovery ran across sealed segments.
    PartitionSegmentRoll,
    /// A start-up adopted at least one partition segment from its seal file without reading it
    /// (observed), so reads, commits and retention ran on adopted segments.
    PartitionSealAdopted,
    /// Tier 2: a graceful restart began while a WAL fsync the driver submitted was in flight
    /// (the shutdown must let that group commit finish and answer its produces).
    RestartInGroupCommit,
}

impl FaultClass {
    /// Every class, in reporting order.
    pub const ALL: [FaultClass; 34] = [
        FaultClass::ProcessCrash,
        FaultClass::PowerLoss,
        FaultClass::TornWrite,
        FaultClass::FsyncError,
        FaultClass::WriteError,
        FaultClass::ReadError,
        FaultClass::StartReadError,
        FaultClass::ReadCorruption,
        FaultClass::DiskFull,
        FaultClass::SlowDisk,
        FaultClass::MissingDirFsync,
        FaultClass::Pause,
        FaultClass::TornWriteLive,
        FaultClass::MisdirectedWrite,
        FaultClass::BitFlip,
        FaultClass::LyingFsync,
        FaultClass::Restart,
        FaultClass::NetDelay,
        FaultClass::NetDrop,
        FaultClass::NetDuplicate,
        FaultClass::Partition,
        FaultClass::OneWayPartition,
        FaultClass::LeaderIsolation,
        FaultClass::Clog,
        FaultClass::NodeDeath,
        FaultClass::ClockSkew,
        FaultClass::LeaderChange,
        FaultClass::MetaSnapshotWrite,
        FaultClass::WriteErrorMeta,
        FaultClass::WalSealedWithBacklog,
        FaultClass::PartitionCommitAfterFailure,
        FaultClass::PartitionSegmentRoll,
        FaultClass::PartitionSealAdopted,
        FaultClass::RestartInGroupCommit,
    ];

    /// Stable snake_case name (JSON keys, reports).
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::ProcessCrash => "process_crash",
            FaultClass::PowerLoss => "power_loss",
            FaultClass::TornWrite => "torn_write",
            FaultClass::FsyncError => "fsync_error",
            FaultClass::WriteError => "write_error",
            FaultClass::ReadError => "read_error",
            FaultClass::StartReadError => "start_read_error",
            FaultClass::ReadCorruption => "read_corruption",
            FaultClass::DiskFull => "disk_full",
            FaultClass::SlowDisk => "slow_disk",
            FaultClass::MissingDirFsync => "missing_dir_fsync",
            FaultClass::Pause => "pause",
            FaultClass::TornWriteLive => "torn_write_live",
            FaultClass::MisdirectedWrite => "misdirected_write",
            FaultClass::BitFlip => "bit_flip",
            FaultClass::LyingFsync => "lying_fsync",
            FaultClass::Restart => "restart",
            FaultClass::NetDelay => "net_delay",
            FaultClass::NetDrop => "net_drop",
            FaultClass::NetDuplicate => "net_duplicate",
            FaultClass::Partition => "partition",
            FaultClass::OneWayPartition => "one_way_partition",
            FaultClass::LeaderIsolation => "leader_isolation",
            FaultClass::Clog => "clog",
            FaultClass::NodeDeath => "node_death",
            FaultClass::ClockSkew => "clock_skew",
            FaultClass::LeaderChange => "leader_change",
            FaultClass::MetaSnapshotWrite => "meta_snapshot_write",
            FaultClass::WriteErrorMeta => "write_error_meta",
            FaultClass::WalSealedWithBacklog => "wal_sealed_with_backlog",
            FaultClass::PartitionCommitAfterFailure => "partition_commit_after_failure",
            FaultClass::PartitionSegmentRoll => "partition_segment_roll",
            FaultClass::PartitionSealAdopted => "partition_seal_adopted",
            FaultClass::RestartInGroupCommit => "restart_in_group_commit",
        }
    }

    fn index(self) -> usize {
        // `ALL` lists the variants in declaration order (checked by a test).
        self as usize
    }
}

/// Hits per fault class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultHits([u64; FaultClass::ALL.len()]);

impl Default for FaultHits {
    fn default() -> Self {
        FaultHits([0; FaultClass::ALL.len()])
    }
}

impl FaultHits {
    /// Counts one hit of `class`.
    pub fn hit(&mut self, class: FaultClass) {
        self.0[class.index()] += 1;
    }

    /// Counts `n` hits of `class`.
    pub fn hit_n(&mut self, class: FaultClass, n: u64) {
        self.0[class.index()] += n;
    }

    /// Hits of `class`.
    pub fn get(&self, class: FaultClass) -> u64 {
        self.0[class.index()]
    }

    /// Adds every counter of `other`.
    pub fn add(&mut self, other: &FaultHits) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// (class, hits) for every class, in reporting order.
    pub fn iter(&self) -> impl Iterator<Item = (FaultClass, u64)> + '_ {
        FaultClass::ALL.iter().map(|&c| (c, self.get(c)))
    }

    /// Classes hit at least once.
    pub fn classes_hit(&self) -> usize {
        self.0.iter().filter(|&&n| n > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_class() {
        let mut hits = FaultHits::default();
        hits.hit(FaultClass::BitFlip);
        hits.hit(FaultClass::BitFlip);
        let mut total = FaultHits::default();
        total.add(&hits);
        assert_eq!(total.get(FaultClass::BitFlip), 2);
        assert_eq!(total.classes_hit(), 1);
        assert_eq!(FaultClass::ALL.len(), 34);
        for (i, class) in FaultClass::ALL.iter().enumerate() {
            assert_eq!(class.index(), i);
        }
    }
}
