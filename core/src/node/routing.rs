//! Routing of disk completions back to the component whose operation it was.

use super::{Deferred, IoPurpose, Node};
use crate::ids::{IoToken, PartitionKey};
use crate::io::{DiskDone, DiskError, DiskOp, FileId, NodeEvent};
use crate::partition::PartIo;
use crate::wal::{PrewriteDone, WalIo};

impl Node {
    pub(super) fn handle_disk(&mut self, token: IoToken, result: Result<DiskDone, DiskError>) {
        let purpose = self.io.remove(&token).expect("invariant: completions echo tokens we issued");
        match purpose {
            IoPurpose::Wal(io) => self.on_wal_io(io, result),
            IoPurpose::Meta(io) => {
                if let Err(error) = &result {
                    tracing::error!(%error, "metastore disk operation failed");
                }
                self.meta.on_disk(io, result);
                if let Some(error) = self.meta.failed() {
                    // Raft state whose fsync failed cannot be trusted (nor the fsync retried):
                    // the process must restart and recover from what is really on disk.
                    let reason = format!("metastore disk failed: {error}");
                    self.fatal.get_or_insert(reason);
                }
            }
            IoPurpose::Partition(key, io) => self.on_partition_io(key, io, result),
            IoPurpose::Consume { key, plan, asker } => {
                self.answer_consume(key, plan, asker, result)
            }
            IoPurpose::StartupSync(file) => self.on_startup_sync(file, result),
            IoPurpose::StartupDelete(file) => {
                if let Err(error) = &result {
                    let path = file.relative_path();
                    tracing::warn!(%error, file = %path, "deleting a stale file failed; it stays, and the next start-up checks it again");
                }
                self.on_startup_sync(file, Ok(DiskDone::Done));
            }
            IoPurpose::Journal(io) => self.on_journal_io(io, result),
            IoPurpose::QueueRead { id, plan } => self.on_queue_read(id, plan, result),
            IoPurpose::OldestProbe { key, plan } => self.on_oldest_probe(key, plan, result),
            IoPurpose::FileDelete(key) => self.on_file_delete(key, result),
        }
    }

    fn on_wal_io(&mut self, io: WalIo, result: Result<DiskDone, DiskError>) {
        match io {
            WalIo::Batch => {
                let Some(outcome) = self.wal.on_batch_io(result) else {
                    return;
                };
                if let Some(error) = &outcome.error {
                    tracing::error!(%error, "ingress WAL failed: latched until restart");
                    self.push_event(NodeEvent::WalLatched);
                }
                if outcome.error.is_none() {
                    self.on_group_commit_done(outcome.acked.len());
                }
                self.answer_produces(outcome.acked, outcome.failed, outcome.error.as_ref());
                self.feed_dispatcher(outcome.durable);
            }
            WalIo::Checkpoint | WalIo::CheckpointCreate => {
                if let Err(error) = &result {
                    tracing::warn!(%error, "checkpoint write failed; will retry");
                }
                if let Some(checkpoint) = self.wal.on_checkpoint_io(io, result, self.now) {
                    self.push_event(NodeEvent::CheckpointDurable { checkpoint });
                }
            }
            WalIo::Delete => {
                if let Err(error) = result {
                    tracing::warn!(%error, "deleting a compacted WAL segment failed");
                }
            }
            WalIo::CursorRead { segment, offset } => self.on_wal_read(segment, offset, result),
            WalIo::Prewrite => match self.wal.on_prewrite_io(result) {
                PrewriteDone::Quiet => {}
                PrewriteDone::Stopped(error) => {
                    tracing::debug!(%error, "pre-writing the WAL segment failed; stopped for it");
                }
                PrewriteDone::Latched(error) => {
                    tracing::error!(%error, "fsync of a WAL pre-write failed: latched until restart");
                    self.push_event(NodeEvent::WalLatched);
                }
            },
            WalIo::Repair => {
                if let Err(error) = self.wal.on_repair_io(result) {
                    tracing::error!(%error, "truncating the WAL's torn tail failed: latching");
                    // Appending after an untruncated torn tail would hide acknowledged records
                    // behind garbage; refuse to append until restart.
                    self.wal.latch(error);
                }
            }
        }
    }

    fn on_partition_io(
        &mut self,
        key: PartitionKey,
        io: PartIo,
        result: Result<DiskDone, DiskError>,
    ) {
        let Some(log) = self.partitions.get_mut(&key) else {
            return; // the topic was deleted meanwhile; its commit already ended as TopicGone
        };
        let high_watermark = log.high_watermark();
        for outcome in log.on_io(io, result) {
            self.on_commit_outcome(outcome);
        }
        // The only place visibility moves (docs/design.md §4.4): wake what it passed.
        if self.partitions.get(&key).is_some_and(|log| log.high_watermark() > high_watermark) {
            self.wake_parked(key);
        }
        if io == PartIo::Trim {
            self.collect_trimmed(key);
        }
        self.start_queued_commits();
    }

    /// Deletes the stale files start-up found (after its syncs: see `Node::startup_deletes`).
    pub(super) fn begin_startup_deletes(&mut self) {
        for file in std::mem::take(&mut self.startup_deletes) {
            self.startup_syncs_left += 1;
            self.emit(IoPurpose::StartupDelete(file), DiskOp::Delete { file });
        }
    }

    fn on_startup_sync(&mut self, file: FileId, result: Result<DiskDone, DiskError>) {
        self.startup_syncs_left -= 1;
        if let Err(error) = result {
            let path = file.relative_path();
            tracing::error!(%error, file = %path, "start-up sync failed: what was read may not be durable");
            self.fatal.get_or_insert(format!("start-up sync of {path} failed: {error}"));
        }
        if self.startup_syncs_left > 0 || self.fatal.is_some() {
            return;
        }
        if !self.startup_deletes.is_empty() {
            return self.begin_startup_deletes();
        }
        tracing::info!(deferred = self.deferred.len(), "start-up syncs done; serving");
        self.wal.compact_recovered();
        for log in self.partitions.values_mut() {
            log.release_held_seals();
        }
        while let Some(deferred) = self.deferred.pop_front() {
            match deferred {
                Deferred::Client(request, op, who) => self.handle_client(request, op, &who),
                Deferred::Peer(from, bytes) => self.handle_peer(from, &bytes),
            }
        }
    }
}
