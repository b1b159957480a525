//! The dispatcher's side of the node: turning the dispatcher's commit requests into commit jobs
//! on the partition's owner (here, or a peer over node RPC), feeding outcomes back, and handing
//! durable WAL records to the dispatcher (from memory after a group commit, or from a WAL read
//! when it fell behind).

use super::owner::ReplyTo;
use super::{ClusterPlacement, Node};
use crate::constants::{DAMAGED_REREAD_MS, FAILURE_BACKOFF_MS};
use crate::dispatch::CommitResult;
use crate::io::NodeEvent;
use crate::io::{DiskDone, DiskError};
use crate::partition::{CommitId, PartitionRecord};
use crate::wal::{CursorRead, WalRecord};

impl Node {
    /// Starts every commit the dispatcher wants now.
    pub(super) fn start_commits(&mut self) {
        let origin = self.config.node_id;
        let checkpoint = self.wal.durable_checkpoint();
        for request in self.dispatcher.poll_commits(self.now) {
            match self.meta.owner(request.target) {
                None => {
                    self.finish_commit(request.id, CommitResult::TopicGone);
                    continue;
                }
                Some(owner) if owner != origin => {
                    self.send_commit(request.id, owner, request.target, request.records);
                    continue;
                }
                Some(_) => {}
            }
            let records = request
                .records
                .into_iter()
                .map(|r| PartitionRecord {
                    offset: 0,
                    timestamp_ms: r.timestamp_ms,
                    origin_node: origin,
                    origin_seq: r.seq,
                    key: r.key,
                    payload: r.payload,
                })
                .collect();
            let reply_to = ReplyTo::Dispatcher(request.id);
            self.enqueue_commit(request.target, origin, checkpoint, records, reply_to);
        }
        self.start_queued_commits();
    }

    /// Reports a commit's outcome to the dispatcher.
    pub(super) fn finish_commit(&mut self, id: CommitId, result: CommitResult) {
        let placement = ClusterPlacement(&self.meta);
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
        if let Some(request) = self.wal.frozen_request() {
            self.dispatcher.freeze(request);
        }
        let placement = ClusterPlacement(&self.meta);
        let records = records.into_iter().map(|(record, _)| record).collect();
        self.dispatcher.accept(records, self.now, &placement);
        let dropped = self.dispatcher.take_dropped();
        if !dropped.is_empty() {
            self.push_event(NodeEvent::RecordsAbandoned { seqs: dropped });
        }
    }

    /// A dispatcher read of the WAL completed.
    pub(super) fn on_wal_read(
        &mut self,
        segment: u64,
        offset: u64,
        result: Result<DiskDone, DiskError>,
    ) {
        match self.wal.on_cursor_read(segment, offset, result) {
            Ok(CursorRead::Records(records)) => self.feed_dispatcher(records),
            Ok(CursorRead::Lost(lost)) => {
                tracing::error!(
                    first_seq = lost.start,
                    count = lost.end - lost.start,
                    "WAL records damaged at rest are LOST (their only copy); dispatching what follows"
                );
                self.dispatcher.skip_lost(lost.clone());
                self.push_event(NodeEvent::RecordsLost { seqs: lost });
            }
            Ok(CursorRead::Damaged(reason)) => {
                tracing::warn!(%reason, "WAL bytes read for dispatch are damaged; reading them again");
                self.wal_read_retry_at = Some(self.now.plus_millis(DAMAGED_REREAD_MS));
            }
            Err(reason) => {
                tracing::error!(%reason, "reading the WAL for dispatch failed; retrying in 1 s");
                self.wal_read_retry_at = Some(self.now.plus_millis(FAILURE_BACKOFF_MS));
            }
        }
    }
}
