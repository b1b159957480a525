//! Deleting the files of a partition log this node no longer holds (its topic was deleted, or
//! start-up found it orphaned). The files go one at a time, oldest segment first and each
//! segment's seal before the segment itself, so that a crash part-way leaves what retention
//! leaves: a suffix of the log, which recovery reads and the next orphan check deletes again.
//! Deleting them all at once could leave any subset, and a log with a hole in the middle is
//! one recovery must refuse (docs/design.md §4.4).

use std::collections::{BTreeMap, VecDeque};

use super::{IoPurpose, Node};
use crate::ids::PartitionKey;
use crate::io::{DiskDone, DiskError, DiskOp, FileId};

/// The files still to delete, per dropped log; a log is present while one of its deletes is
/// in flight.
#[derive(Default)]
pub(super) struct LogDeletes {
    left: BTreeMap<PartitionKey, VecDeque<FileId>>,
}

impl LogDeletes {
    /// Internal consistency (`Node::check_invariants`): exactly one delete in flight for each
    /// log being deleted, and none for any other.
    pub(super) fn check(&self, in_flight: &[PartitionKey]) -> Result<(), String> {
        let mut counted: BTreeMap<PartitionKey, usize> = BTreeMap::new();
        for &key in in_flight {
            *counted.entry(key).or_default() += 1;
        }
        let expected: BTreeMap<PartitionKey, usize> =
            self.left.keys().map(|&key| (key, 1)).collect();
        if counted != expected {
            return Err(format!("log deletes: {counted:?} in flight, {expected:?} expected"));
        }
        Ok(())
    }
}

impl Node {
    /// Forgets the log of `key`, if this node holds one, and deletes its files in order.
    pub(super) fn delete_log_files(&mut self, key: PartitionKey) {
        self.consumers.forget(key);
        let Some(log) = self.partitions.remove(&key) else { return };
        let files: VecDeque<FileId> = log.files_oldest_first().into();
        tracing::info!(partition = %key, files = files.len(), "deleting the files of a dropped partition");
        self.log_deletes.left.insert(key, files);
        self.delete_next_file(key);
    }

    fn delete_next_file(&mut self, key: PartitionKey) {
        let Some(left) = self.log_deletes.left.get_mut(&key) else { return };
        let Some(file) = left.pop_front() else {
            self.log_deletes.left.remove(&key);
            return;
        };
        self.emit(IoPurpose::FileDelete(key), DiskOp::Delete { file });
    }

    /// A delete of `key`'s files completed. After a failure the rest stay, in order: the next
    /// start-up finds them orphaned and deletes them again.
    pub(super) fn on_file_delete(
        &mut self,
        key: PartitionKey,
        result: Result<DiskDone, DiskError>,
    ) {
        if let Err(error) = result {
            tracing::warn!(partition = %key, %error, "deleting a dropped partition's file failed; the rest stays until the next start-up");
            self.log_deletes.left.remove(&key);
            return;
        }
        self.delete_next_file(key);
    }
}
