//! The node's side of dispatch: turning the dispatcher's commit requests into `commit_durable`
//! on the local partition log, feeding outcomes back, and handing durable WAL records to the
//! dispatcher (from memory after a group commit, or from a WAL read when it fell behind).

use super::{LocalPlacement, Node};
use crate::constants::FAILURE_BACKOFF_MS;
use crate::dispatch::{CommitRequest, CommitResult};
use crate::io::{DiskDone, DiskError, NodeEvent};
use crate::partition::{CommitId, CommitOutcome, PartitionLog, PartitionRecord};
use crate::wal::WalRecord;

impl Node {
    /// Starts every commit the dispatcher wants now.
    pub(super) fn start_commits(&mut self) {
        for request in self.dispatcher.poll_commits(self.now) {
            let (id, key) = (request.id, request.target);
            match self.begin_local_commit(request) {
                Ok(None) => {}
                Ok(Some(outcome)) => self.on_partition_outcome(key, outcome),
                Err(result) => self.finish_commit(id, result),
            }
        }
    }

    fn begin_local_commit(
        &mut self,
        request: CommitRequest,
    ) -> Result<Option<CommitOutcome>, CommitResult> {
        let key = request.target;
        let Some(topic) = self.catalog.topic_by_id(key.topic) else {
            return Err(CommitResult::TopicGone);
        };
        assert!(
            key.partition < topic.partitions,
            "invariant: targets are partitions of the topic"
        );
        let origin_node = self.config.node_id;
        let records = request
            .records
            .into_iter()
            .map(|r| PartitionRecord {
                offset: 0,
                timestamp_ms: r.timestamp_ms,
                origin_node,
                origin_seq: r.seq,
                key: r.key,
                payload: r.payload,
            })
            .collect();
        let log = self
            .partitions
            .entry(key)
            .or_insert_with(|| PartitionLog::new(key));
        let checkpoint = self.wal.durable_checkpoint();
        let started = log.begin_commit(request.id, origin_node, checkpoint, records);
        let immediate = started.map_err(CommitResult::Failed)?;
        if immediate.is_none() {
            self.local_commits.insert(key, request.id);
        }
        Ok(immediate)
    }

    /// Handles a partition log's decided commit.
    pub(super) fn on_partition_outcome(
        &mut self,
        key: crate::ids::PartitionKey,
        outcome: CommitOutcome,
    ) {
        self.local_commits.remove(&key);
        let result = match outcome.result {
            Ok(landed) => {
                if !landed.origin_seqs.is_empty() {
                    let (first_offset, origins) = (landed.first_offset, landed.origin_seqs);
                    self.push_event(NodeEvent::Committed {
                        key,
                        first_offset,
                        origins,
                    });
                }
                CommitResult::Committed {
                    first_offset: landed.first_offset,
                }
            }
            Err(reason) => {
                tracing::warn!(partition = %key, %reason, "commit failed; nothing became visible");
                self.push_event(NodeEvent::CommitFailed {
                    key,
                    reason: reason.clone(),
                });
                CommitResult::Failed(reason)
            }
        };
        self.finish_commit(outcome.id, result);
    }

    /// Reports a commit's outcome to the dispatcher.
    pub(super) fn finish_commit(&mut self, id: CommitId, result: CommitResult) {
        let placement = LocalPlacement(&self.catalog);
        self.dispatcher.on_commit(id, result, self.now, &placement);
    }

    /// Hands durable records to the dispatcher, as many as it has room for, and moves the WAL's
    /// read cursor past them. The rest stay on disk and are read back later.
    pub(super) fn feed_dispatcher(&mut self, mut records: Vec<(WalRecord, u64)>) {
        records.truncate(self.dispatcher.room());
        if records.is_empty() {
            return;
        }
        self.wal.advance_cursor(&records);
        let placement = LocalPlacement(&self.catalog);
        let records = records.into_iter().map(|(record, _)| record).collect();
        self.dispatcher.accept(records, self.now, &placement);
    }

    /// A dispatcher read of the WAL completed.
    pub(super) fn on_wal_read(
        &mut self,
        segment: u64,
        offset: u64,
        result: Result<DiskDone, DiskError>,
    ) {
        match self.wal.on_cursor_read(segment, offset, result) {
            Ok(records) => self.feed_dispatcher(records),
            Err(reason) => {
                tracing::error!(%reason, "reading the WAL for dispatch failed; retrying in 1 s");
                self.wal_read_retry_at = Some(self.now.plus_millis(FAILURE_BACKOFF_MS));
            }
        }
    }
}
