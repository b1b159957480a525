//! The disk at the two ends of a process's life. At start-up the process reads every file
//! (`read_at_start`); reading a metastore file may fail, and then the process exits (the
//! production runtime exits 1, a supervisor restarts it). When a process exits because its node
//! reported a fatal error, the operations it had already handed to the disk do not all vanish:
//! the production runtime's disk threads work through a file's queue while the driver notices
//! the error, so a prefix of each file's operations in flight still lands
//! (`complete_handed_over`); nobody hears of them.

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::{DiskDone, DiskError, DiskOp, FileId};
use rand::RngExt;

use crate::disk::{FileClass, SimDisk};
use crate::fault::FaultClass;

/// What an operation returned.
pub type DiskResult = Result<DiskDone, DiskError>;

impl SimDisk {
    /// What a starting process reads: every file's current content, or the I/O error of a
    /// metastore file whose read failed (the process cannot start).
    pub fn read_at_start(&mut self) -> Result<BTreeMap<FileId, Bytes>, DiskError> {
        let rate = self.faults.start_read_error_rate;
        if rate > 0.0 {
            let meta: Vec<FileId> = self
                .files
                .keys()
                .filter(|id| FileClass::of(id) == FileClass::Meta)
                .copied()
                .collect();
            for id in meta {
                if self.rng.random_bool(rate) {
                    self.hits.hit(FaultClass::StartReadError);
                    let path = id.relative_path();
                    return Err(DiskError::Io(format!("{path}: read failed at start-up (EIO)")));
                }
            }
        }
        Ok(self.snapshot())
    }

    /// A process exits with `ops` in flight (in completion order, so in emission order per
    /// file): a random prefix of each file's operations still takes effect. Returns the index
    /// in `ops` and the result of each that did (nobody hears of them: the process is gone).
    pub fn complete_handed_over(&mut self, ops: &[DiskOp]) -> Vec<(usize, DiskResult)> {
        let mut per_file: BTreeMap<FileId, Vec<usize>> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            per_file.entry(op.file()).or_default().push(i);
        }
        let mut landed = Vec::new();
        for queue in per_file.into_values() {
            let keep = self.rng.random_range(0..=queue.len());
            for &i in &queue[..keep] {
                landed.push((i, self.complete(&ops[i])));
            }
        }
        landed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Component, component_rng};

    fn disk(seed: u64) -> SimDisk {
        SimDisk::new(component_rng(seed, Component::Disk(1)))
    }

    fn write(file: FileId, offset: u64, data: &'static [u8]) -> DiskOp {
        DiskOp::Write { file, offset, data: Bytes::from_static(data) }
    }

    #[test]
    fn a_start_up_read_of_a_metastore_file_fails_only_while_the_fault_is_on() {
        let mut d = disk(3);
        d.complete(&DiskOp::Create { file: FileId::WalCheckpoint }).expect("create");
        d.faults.start_read_error_rate = 1.0;
        assert!(d.read_at_start().is_ok(), "no metastore file: nothing to fail");
        d.complete(&DiskOp::Create { file: FileId::MetaRaftLog }).expect("create");
        let error = d.read_at_start().expect_err("the raft log's read fails");
        assert!(error.to_string().contains("meta/raft.log"), "{error}");
        assert_eq!(d.hits.get(FaultClass::StartReadError), 1);
        d.heal();
        assert_eq!(d.read_at_start().map(|files| files.len()), Ok(2));
    }

    #[test]
    fn a_prefix_of_each_files_handed_over_operations_lands() {
        let log = FileId::MetaRaftLog;
        let ops = [write(log, 0, b"head"), DiskOp::Sync { file: log }, write(log, 4, b"tail")];
        let mut lengths = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let mut d = disk(seed);
            d.complete(&DiskOp::Create { file: log }).expect("create");
            let landed = d.complete_handed_over(&ops).len();
            let data = d.file(&log).expect("exists").data().to_vec();
            let expected: &[u8] = [&b""[..], b"head", b"head", b"headtail"][landed];
            assert_eq!(data, expected, "seed {seed}: {landed} landed");
            lengths.insert(landed);
        }
        assert_eq!(lengths.len(), 4, "every prefix length occurs");
    }
}
