//! `SimDisk`: one node's simulated disk. Operations are scheduled with a simulated latency and
//! complete in emission order per file (the core's disk contract), in any order across files.
//! Each operation takes effect when it completes, through the fault knobs of [`DiskFaults`].
//! Volatile and durable bytes are kept apart ([`file::SimFile`]); a process crash keeps the
//! page cache, a power loss drops (or tears) what was not synced. What a start-up reads, and
//! what a dying process had already handed over, is in [`process`].

mod crash;
pub mod faults;
pub mod file;
pub mod process;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use narad_core::{DiskDone, DiskError, DiskOp, FileId, Instant};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

pub use crate::disk::faults::{DiskFaults, FileClass, FileMatch};
pub use crate::disk::file::{SECTOR_BYTES, SimFile};
use crate::fault::{FaultClass, FaultHits};

/// Damage that may have destroyed the only copy of some records: `bytes` holds the records'
/// bytes as they were (or as they were meant to be written), for the checker to attribute.
#[derive(Clone, Debug)]
pub struct Damage {
    /// The damaged file.
    pub file: FileId,
    /// The fault that did it.
    pub class: FaultClass,
    /// Bytes of the frames that were damaged or lost.
    pub bytes: Vec<u8>,
}

/// One node's disk.
pub struct SimDisk {
    files: BTreeMap<FileId, SimFile>,
    busy_until: BTreeMap<FileId, Instant>,
    rng: ChaCha8Rng,
    /// Fault knobs; the fault schedule changes them during a run.
    pub faults: DiskFaults,
    /// Hits per fault class on this disk.
    pub hits: FaultHits,
    damage: Vec<Damage>,
    /// Partition logs whose last commit failed (observed: the next write is a commit after a
    /// failure, `PartitionCommitAfterFailure`).
    partition_failed: BTreeSet<FileId>,
    /// The current write struck silently (landed torn or misdirected).
    silent_fault: bool,
}

impl SimDisk {
    /// An empty, healthy disk drawing latencies and faults from `rng`.
    pub fn new(rng: ChaCha8Rng) -> SimDisk {
        SimDisk {
            files: BTreeMap::new(),
            busy_until: BTreeMap::new(),
            rng,
            faults: DiskFaults::default(),
            hits: FaultHits::default(),
            damage: Vec::new(),
            partition_failed: BTreeSet::new(),
            silent_fault: false,
        }
    }

    /// When an operation emitted at `now` completes: after its latency, and never before an
    /// earlier operation on the same file.
    pub fn schedule(&mut self, now: Instant, op: &DiskOp) -> Instant {
        let latency = self.latency_micros(op) * self.faults.slow_factor.max(1);
        if self.faults.slow_factor > 1 {
            self.hits.hit(FaultClass::SlowDisk);
        }
        let file = op.file();
        let earliest = self.busy_until.get(&file).copied().unwrap_or(now);
        let at = Instant(now.0 + latency).max(earliest);
        self.busy_until.insert(file, at);
        at
    }

    fn latency_micros(&mut self, op: &DiskOp) -> u64 {
        let tail = if self.rng.random_bool(0.01) { 8 } else { 1 };
        let base = match op {
            DiskOp::Create { .. } | DiskOp::Delete { .. } => self.rng.random_range(50..300),
            DiskOp::Write { data, .. } => self.rng.random_range(5..50) + data.len() as u64 / 1024,
            DiskOp::Sync { .. } => self.rng.random_range(100..1_500),
            DiskOp::Read { len, .. } | DiskOp::ReadUpTo { len, .. } => {
                self.rng.random_range(5..40) + len / 2048
            }
            DiskOp::Truncate { .. } => self.rng.random_range(5..30),
        };
        base * tail
    }

    /// Performs `op` (at its completion time) and returns what the node is told.
    pub fn complete(&mut self, op: &DiskOp) -> Result<DiskDone, DiskError> {
        let file = op.file();
        let partition = FileClass::of(&file) == FileClass::Partition;
        let after_failure = partition && self.partition_failed.contains(&file);
        self.silent_fault = false;
        let result = self.perform(op);
        if partition {
            self.observe_partition(op, after_failure, result.is_ok());
        }
        result
    }

    fn perform(&mut self, op: &DiskOp) -> Result<DiskDone, DiskError> {
        match op {
            DiskOp::Create { file } => self.create(*file),
            DiskOp::Write { file, offset, data } => self.write(*file, *offset, data),
            DiskOp::Sync { file } => self.sync(*file),
            DiskOp::Read { file, offset, len } => self.read(*file, *offset, *len, Exact::Yes),
            DiskOp::ReadUpTo { file, offset, len } => self.read(*file, *offset, *len, Exact::No),
            DiskOp::Truncate { file, len } => self.truncate(*file, *len),
            DiskOp::Delete { file } => {
                self.observe_wal_delete(file);
                self.files.remove(file);
                Ok(DiskDone::Done)
            }
        }
    }

    /// Counts a write to a partition log after a failed commit on it, and remembers a failure
    /// (a failed create, write or sync, or a write that landed torn or misdirected). Read errors
    /// are not counted: a read may be a consumer's as well as a commit's read-back.
    fn observe_partition(&mut self, op: &DiskOp, after_failure: bool, ok: bool) {
        let file = op.file();
        let is_write = matches!(op, DiskOp::Write { .. });
        if is_write && ok && after_failure {
            self.hits.hit(FaultClass::PartitionCommitAfterFailure);
            self.partition_failed.remove(&file);
        }
        let commit_op = is_write || matches!(op, DiskOp::Sync { .. } | DiskOp::Create { .. });
        if commit_op && (!ok || self.silent_fault) {
            self.partition_failed.insert(file);
        }
    }

    /// Counts a WAL segment deleted while the durable checkpoint (what the checkpoint file holds)
    /// is below the newest segment's first sequence: a sealed segment still holds undispatched
    /// records while compaction runs.
    fn observe_wal_delete(&mut self, file: &FileId) {
        if !matches!(file, FileId::WalSegment { .. }) {
            return;
        }
        let newest = self
            .files
            .keys()
            .filter_map(|f| match f {
                FileId::WalSegment { first_seq } => Some(*first_seq),
                _ => None,
            })
            .max();
        let checkpoint = self
            .files
            .get(&FileId::WalCheckpoint)
            .and_then(|f| narad_core::wal::checkpoint::decode_file(f.data()));
        if let (Some(newest), Some(checkpoint)) = (newest, checkpoint)
            && checkpoint < newest
        {
            self.hits.hit(FaultClass::WalSealedWithBacklog);
        }
    }

    fn create(&mut self, file: FileId) -> Result<DiskDone, DiskError> {
        if self.faults.disk_full {
            self.hits.hit(FaultClass::DiskFull);
            return Err(DiskError::NoSpace);
        }
        if matches!(file, FileId::PartitionSegment { base: 1.., .. }) {
            self.hits.hit(FaultClass::PartitionSegmentRoll);
        }
        self.files.insert(file, SimFile::new(!self.faults.missing_dir_fsync));
        Ok(DiskDone::Done)
    }

    fn write(&mut self, file: FileId, offset: u64, data: &[u8]) -> Result<DiskDone, DiskError> {
        let Some(len) = self.files.get(&file).map(SimFile::len) else {
            return Err(missing(&file));
        };
        if self.faults.failing.is_some_and(|m| m.matches(&file)) {
            return Err(DiskError::Io("write failed (stuck device)".into()));
        }
        let meta = FileClass::of(&file) == FileClass::Meta;
        if self.write_fails(&file) {
            self.hits.hit(FaultClass::WriteError);
            if meta {
                self.hits.hit(FaultClass::WriteErrorMeta);
            }
            return Err(DiskError::Io("write failed (EIO)".into()));
        }
        if self.faults.disk_full && offset + data.len() as u64 > len {
            self.hits.hit(FaultClass::DiskFull);
            return Err(DiskError::NoSpace);
        }
        if file == FileId::MetaSnapshot {
            self.hits.hit(FaultClass::MetaSnapshotWrite);
        }
        if self.torn_live(&file) {
            self.write_torn(file, offset, data);
        } else if let Some(sectors) = self.misdirect(&file) {
            self.silent_fault = true;
            self.write_misdirected(file, offset, data, sectors);
        } else {
            self.file_mut(file).write(offset, data);
        }
        Ok(DiskDone::Done)
    }

    /// A transient write error: this one write fails, the file's next operations behave.
    fn write_fails(&mut self, file: &FileId) -> bool {
        let rate = self.faults.write_error_rate;
        DiskFaults::take_if_matches(&mut self.faults.fail_next_write, file)
            || (rate > 0.0 && self.rng.random_bool(rate))
    }

    fn torn_live(&mut self, file: &FileId) -> bool {
        DiskFaults::take_if_matches(&mut self.faults.torn_next_write, file)
            || (matches!(FileClass::of(file), FileClass::Partition | FileClass::Seal)
                && self.faults.torn_live_rate > 0.0
                && self.rng.random_bool(self.faults.torn_live_rate))
    }

    fn misdirect(&mut self, file: &FileId) -> Option<i64> {
        if let Some((m, sectors)) = self.faults.misdirect_next_write
            && m.matches(file)
        {
            self.faults.misdirect_next_write = None;
            return Some(sectors);
        }
        let rate = self.faults.misdirect_rate;
        if FileClass::of(file).corruptible() && rate > 0.0 && self.rng.random_bool(rate) {
            let sectors: i64 = self.rng.random_range(1..=8);
            return Some(if self.rng.random_bool(0.5) { sectors } else { -sectors });
        }
        None
    }

    /// A write that reports success although only a sector-aligned prefix landed (zeros after).
    fn write_torn(&mut self, file: FileId, offset: u64, data: &[u8]) {
        self.hits.hit(FaultClass::TornWriteLive);
        self.silent_fault = true;
        let end = offset + data.len() as u64;
        let first = (offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
        let cut = if first < end {
            let sectors = (end - first).div_ceil(SECTOR_BYTES);
            first + self.rng.random_range(0..sectors) * SECTOR_BYTES
        } else {
            offset + data.len() as u64 / 2
        };
        let keep = (cut - offset) as usize;
        let mut landed = data[..keep].to_vec();
        landed.resize(data.len(), 0);
        self.file_mut(file).write(offset, &landed);
    }

    fn sync(&mut self, file: FileId) -> Result<DiskDone, DiskError> {
        if !self.files.contains_key(&file) {
            return Err(missing(&file));
        }
        let stuck = self.faults.failing.is_some_and(|m| m.matches(&file));
        let rate = self.faults.fsync_error_rate;
        if stuck
            || DiskFaults::take_if_matches(&mut self.faults.fail_next_sync, &file)
            || (rate > 0.0 && self.rng.random_bool(rate))
        {
            self.hits.hit(FaultClass::FsyncError);
            if self.files[&file].lied {
                // Bytes an earlier lying sync claimed durable are dropped with the dirty pages.
                let bytes = self.files[&file].unsynced_write_bytes();
                self.damage.push(Damage { file, class: FaultClass::LyingFsync, bytes });
            }
            self.file_mut(file).revert_unsynced();
            return Err(DiskError::Io("fsync failed: dirty pages dropped".into()));
        }
        if self.file_mut(file).is_dirty() && self.lies(&file) {
            self.hits.hit(FaultClass::LyingFsync);
            self.file_mut(file).lied = true;
            return Ok(DiskDone::Done);
        }
        self.file_mut(file).sync();
        Ok(DiskDone::Done)
    }

    fn lies(&mut self, file: &FileId) -> bool {
        let rate = self.faults.lying_fsync_rate;
        self.faults.lie_on.is_some_and(|m| m.matches(file))
            || (FileClass::of(file).corruptible() && rate > 0.0 && self.rng.random_bool(rate))
    }

    fn read(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        exact: Exact,
    ) -> Result<DiskDone, DiskError> {
        let Some(f) = self.files.get(&file) else {
            return Err(missing(&file));
        };
        let rate = self.faults.read_error_rate;
        if rate > 0.0 && self.rng.random_bool(rate) {
            self.hits.hit(FaultClass::ReadError);
            return Err(DiskError::Io("read failed".into()));
        }
        let (start, end) = match exact {
            Exact::Yes => (offset, offset.saturating_add(len)),
            Exact::No => (offset.min(f.len()), offset.saturating_add(len).min(f.len())),
        };
        let Some(bytes) = f.data().get(start as usize..end as usize) else {
            return Err(DiskError::Io(format!(
                "short read: {len} bytes at {offset} of {}",
                f.len()
            )));
        };
        let mut bytes = bytes.to_vec();
        let rate = self.faults.read_corruption_rate;
        if !bytes.is_empty() && rate > 0.0 && self.rng.random_bool(rate) {
            self.hits.hit(FaultClass::ReadCorruption);
            let at = self.rng.random_range(0..bytes.len());
            bytes[at] ^= 1 << self.rng.random_range(0..8u32);
        }
        Ok(DiskDone::Data(Bytes::from(bytes)))
    }

    fn truncate(&mut self, file: FileId, len: u64) -> Result<DiskDone, DiskError> {
        let Some(f) = self.files.get_mut(&file) else {
            return Err(missing(&file));
        };
        if self.faults.disk_full && len > f.len() {
            self.hits.hit(FaultClass::DiskFull);
            return Err(DiskError::NoSpace);
        }
        f.truncate(len);
        Ok(DiskDone::Done)
    }

    fn file_mut(&mut self, file: FileId) -> &mut SimFile {
        self.files.get_mut(&file).expect("invariant: caller checked the file exists")
    }

    /// The file, if it exists.
    pub fn file(&self, file: &FileId) -> Option<&SimFile> {
        self.files.get(file)
    }

    /// Every file, in `FileId` order.
    pub fn files(&self) -> impl Iterator<Item = (&FileId, &SimFile)> {
        self.files.iter()
    }

    /// What a restarting process finds: the current content of every file.
    pub fn snapshot(&self) -> BTreeMap<FileId, Bytes> {
        self.files.iter().map(|(id, f)| (*id, Bytes::copy_from_slice(f.data()))).collect()
    }

    /// Damage reports since the last call.
    pub fn take_damage(&mut self) -> Vec<Damage> {
        std::mem::take(&mut self.damage)
    }

    /// Turns every fault off (the heal phase); hit counters are kept.
    pub fn heal(&mut self) {
        self.faults = DiskFaults::default();
    }
}

/// Whether a read must return every byte it asked for (`DiskOp::Read`) or may stop at the
/// file's end (`DiskOp::ReadUpTo`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exact {
    Yes,
    No,
}

fn missing(file: &FileId) -> DiskError {
    DiskError::Io(format!("{}: no such file", file.relative_path()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Component, component_rng};

    fn disk() -> SimDisk {
        SimDisk::new(component_rng(9, Component::Disk(1)))
    }

    fn write(file: FileId, offset: u64, data: &'static [u8]) -> DiskOp {
        DiskOp::Write { file, offset, data: Bytes::from_static(data) }
    }

    #[test]
    fn operations_on_one_file_complete_in_emission_order() {
        let mut d = disk();
        d.faults.slow_factor = 3;
        let mut last = Instant(0);
        for i in 0..200u64 {
            let op = if i % 2 == 0 {
                write(FileId::MetaRaftLog, i, b"x")
            } else {
                DiskOp::Sync { file: FileId::MetaRaftLog }
            };
            let at = d.schedule(Instant(1_000 + i), &op);
            assert!(at >= last, "op {i} completes before an earlier one on the same file");
            last = at;
        }
        assert!(d.hits.get(FaultClass::SlowDisk) > 0);
    }

    #[test]
    fn failed_fsync_drops_dirty_data_and_lying_fsync_is_reported_at_power_loss() {
        let mut d = disk();
        let wal = FileId::WalSegment { first_seq: 0 };
        d.complete(&DiskOp::Create { file: wal }).expect("create");
        d.complete(&write(wal, 0, b"durable")).expect("write");
        d.complete(&DiskOp::Sync { file: wal }).expect("sync");
        d.complete(&write(wal, 7, b"dirty")).expect("write");
        d.faults.fail_next_sync = Some(FileMatch::class(FileClass::Wal));
        assert!(d.complete(&DiskOp::Sync { file: wal }).is_err());
        assert_eq!(d.file(&wal).map(SimFile::data), Some(&b"durable"[..]));
        d.faults.lie_on = Some(FileMatch::class(FileClass::Wal));
        d.complete(&write(wal, 7, b"lied")).expect("write");
        assert_eq!(d.complete(&DiskOp::Sync { file: wal }), Ok(DiskDone::Done));
        d.power_loss();
        assert_eq!(d.file(&wal).map(SimFile::data), Some(&b"durable"[..]));
        let damage = d.take_damage();
        assert_eq!(damage.len(), 1);
        assert_eq!(damage[0].bytes, b"lied");
        assert_eq!(d.hits.get(FaultClass::FsyncError), 1);
        assert_eq!(d.hits.get(FaultClass::LyingFsync), 1);
    }

    #[test]
    fn a_transient_write_error_fails_exactly_one_write_and_is_counted() {
        let mut d = disk();
        let wal = FileId::WalSegment { first_seq: 0 };
        d.complete(&DiskOp::Create { file: wal }).expect("create");
        d.complete(&write(wal, 0, b"abc")).expect("write");
        d.faults.fail_next_write = Some(FileMatch::class(FileClass::Meta));
        assert_eq!(d.complete(&write(wal, 3, b"d")), Ok(DiskDone::Done), "another class");
        d.faults.fail_next_write = Some(FileMatch::class(FileClass::Wal));
        assert!(matches!(d.complete(&write(wal, 4, b"lost")), Err(DiskError::Io(_))));
        assert_eq!(d.file(&wal).map(SimFile::data), Some(&b"abcd"[..]), "nothing of it landed");
        assert_eq!(d.complete(&write(wal, 4, b"ef")), Ok(DiskDone::Done));
        assert_eq!(d.complete(&DiskOp::Sync { file: wal }), Ok(DiskDone::Done));
        assert_eq!(d.file(&wal).map(SimFile::data), Some(&b"abcdef"[..]));
        assert_eq!(d.hits.get(FaultClass::WriteError), 1);
        d.faults.write_error_rate = 0.2;
        d.complete(&DiskOp::Create { file: FileId::MetaRaftLog }).expect("create");
        let failed = (0..500u64)
            .filter(|i| d.complete(&write(FileId::MetaRaftLog, *i, b"x")).is_err())
            .count() as u64;
        assert!((50..150).contains(&failed), "{failed} of 500 writes failed at rate 0.2");
        assert_eq!(d.hits.get(FaultClass::WriteError), 1 + failed);
    }

    #[test]
    fn a_write_after_a_failed_partition_commit_is_counted_once() {
        let mut d = disk();
        let key = narad_core::PartitionKey { topic: narad_core::TopicId(1), partition: 0 };
        let log = FileId::PartitionSegment { key, base: 0 };
        d.complete(&DiskOp::Create { file: log }).expect("create");
        d.complete(&write(log, 0, b"a")).expect("write");
        assert_eq!(d.hits.get(FaultClass::PartitionCommitAfterFailure), 0, "no failure yet");
        d.faults.fail_next_sync = Some(FileMatch::class(FileClass::Partition));
        assert!(d.complete(&DiskOp::Sync { file: log }).is_err());
        d.complete(&DiskOp::Truncate { file: log, len: 0 }).expect("repair");
        d.complete(&write(log, 0, b"a")).expect("retry");
        d.complete(&write(log, 1, b"b")).expect("next");
        assert_eq!(d.hits.get(FaultClass::PartitionCommitAfterFailure), 1);
        let wal = FileId::WalSegment { first_seq: 0 };
        d.complete(&DiskOp::Create { file: wal }).expect("create");
        d.faults.fail_next_write = Some(FileMatch::class(FileClass::Wal));
        assert!(d.complete(&write(wal, 0, b"x")).is_err());
        d.complete(&write(wal, 0, b"x")).expect("write");
        assert_eq!(d.hits.get(FaultClass::PartitionCommitAfterFailure), 1, "only partitions");
    }

    /// Seal files take the random corruption-class faults like the files they describe, never
    /// the targeted partition ones, and never count as partition commits.
    #[test]
    fn seal_files_take_the_random_faults() {
        let key = narad_core::PartitionKey { topic: narad_core::TopicId(1), partition: 0 };
        let seal = FileId::PartitionSeal { key, base: 0 };
        let data = vec![7u8; 3 * SECTOR_BYTES as usize];
        let sealed = |d: &mut SimDisk| {
            d.complete(&DiskOp::Create { file: seal }).expect("create");
            let op = DiskOp::Write { file: seal, offset: 0, data: Bytes::from(data.clone()) };
            d.complete(&op).expect("write reports success");
            d.complete(&DiskOp::Sync { file: seal }).expect("sync reports success");
        };
        let mut d = disk();
        d.faults.torn_live_rate = 1.0;
        sealed(&mut d);
        assert_eq!(d.hits.get(FaultClass::TornWriteLive), 1);
        assert_ne!(d.file(&seal).unwrap().data(), &data[..], "torn");
        let mut d = disk();
        d.faults.misdirect_rate = 1.0;
        sealed(&mut d);
        assert_eq!(d.hits.get(FaultClass::MisdirectedWrite), 1);
        let mut d = disk();
        d.faults.lying_fsync_rate = 1.0;
        sealed(&mut d);
        assert_eq!(d.hits.get(FaultClass::LyingFsync), 1);
        d.power_loss();
        assert!(d.file(&seal).is_none_or(|f| f.data() != &data[..]), "a lie loses the seal");
        let mut d = disk();
        sealed(&mut d);
        assert!(d.bit_flip_at_rest(), "the only non-empty file is a candidate");
        assert_ne!(d.file(&seal).unwrap().data(), &data[..]);
        d.faults.fail_next_sync = Some(FileMatch::partition(0));
        d.complete(&DiskOp::Sync { file: seal }).expect("aimed at the segments only");
        assert_eq!(d.hits.get(FaultClass::PartitionCommitAfterFailure), 0);
    }

    #[test]
    fn compaction_with_a_sealed_backlog_is_observed() {
        let mut d = disk();
        for first_seq in [0, 5, 9] {
            d.complete(&DiskOp::Create { file: FileId::WalSegment { first_seq } }).expect("create");
        }
        let ckpt = FileId::WalCheckpoint;
        d.complete(&DiskOp::Create { file: ckpt }).expect("create");
        let slot = Bytes::from(narad_core::wal::checkpoint::encode_slot(7));
        d.complete(&DiskOp::Write { file: ckpt, offset: 0, data: slot }).expect("write");
        d.complete(&DiskOp::Delete { file: FileId::WalSegment { first_seq: 0 } }).expect("del");
        assert_eq!(d.hits.get(FaultClass::WalSealedWithBacklog), 1, "segment 5 holds 7 and 8");
        let slot = Bytes::from(narad_core::wal::checkpoint::encode_slot(9));
        d.complete(&DiskOp::Write { file: ckpt, offset: 512, data: slot }).expect("write");
        d.complete(&DiskOp::Delete { file: FileId::WalSegment { first_seq: 5 } }).expect("del");
        assert_eq!(d.hits.get(FaultClass::WalSealedWithBacklog), 1, "no backlog in a sealed one");
    }

    #[test]
    fn disk_full_rejects_growth_only() {
        let mut d = disk();
        let f = FileId::MetaRaftLog;
        d.complete(&DiskOp::Create { file: f }).expect("create");
        d.complete(&write(f, 0, b"abcd")).expect("write");
        d.faults.disk_full = true;
        assert_eq!(d.complete(&write(f, 0, b"xy")), Ok(DiskDone::Done));
        assert_eq!(d.complete(&write(f, 4, b"z")), Err(DiskError::NoSpace));
        assert_eq!(
            d.complete(&DiskOp::Create { file: FileId::WalCheckpoint }),
            Err(DiskError::NoSpace)
        );
        assert!(d.complete(&DiskOp::Read { file: f, offset: 2, len: 10 }).is_err());
    }

    #[test]
    fn a_read_up_to_stops_at_the_files_end_where_an_exact_read_fails() {
        let mut d = disk();
        let f = FileId::WalSegment { first_seq: 0 };
        d.complete(&DiskOp::Create { file: f }).expect("create");
        d.complete(&write(f, 0, b"abcd")).expect("write");
        let data = |bytes: &[u8]| Ok(DiskDone::Data(Bytes::copy_from_slice(bytes)));
        assert!(d.complete(&DiskOp::Read { file: f, offset: 2, len: 10 }).is_err());
        assert_eq!(d.complete(&DiskOp::ReadUpTo { file: f, offset: 2, len: 10 }), data(b"cd"));
        assert_eq!(d.complete(&DiskOp::ReadUpTo { file: f, offset: 1, len: 2 }), data(b"bc"));
        assert_eq!(d.complete(&DiskOp::ReadUpTo { file: f, offset: 9, len: 2 }), data(b""));
    }
}
