//! The retention pass: every `retention_check_ms` the node hands each partition log it holds
//! its topic's policy, as this node's metastore replica knows it, and the node's own clock
//! (retention is judged on the owner's clock). A log deletes whole sealed segments, one at a
//! time, off the produce path (see `partition/retention.rs`); completed deletions become events
//! and counters here. A policy changed by `PATCH /v1/topics/{t}` applies at the next pass.

use crate::ids::PartitionKey;
use crate::io::NodeEvent;
use crate::partition::{RetentionPolicy, Trimmed};

use super::Node;

impl Node {
    /// Runs the pass if it is due (and the node serves: nothing is deleted during start-up).
    pub(super) fn run_retention_if_due(&mut self) {
        if !self.is_serving() || self.now < self.next_retention_at {
            return;
        }
        self.next_retention_at = self.now.plus_millis(self.config.retention_check_ms);
        self.revalidate_parked();
        let now_ms = self.now.as_millis();
        let divisor = self.config.retention_bytes_divisor.max(1);
        for (key, log) in &mut self.partitions {
            // A topic this replica does not know (deleted, or not yet applied here) keeps its
            // log as it is: discarding deleted topics is the discard path's job.
            let Some(topic) = self.meta.topic_by_id(key.topic) else { continue };
            let policy = RetentionPolicy {
                retention_ms: topic.retention_ms_in_force(),
                retention_bytes: topic.retention_bytes.map(|bytes| bytes / divisor),
            };
            log.start_retention(now_ms, policy);
        }
        self.probe_oldest_unsettled();
    }

    /// Turns the deletions the log of `key` completed into events and counters (a deletion
    /// completes only in that log's own disk completion, so no other log needs a look).
    pub(super) fn collect_trimmed(&mut self, key: PartitionKey) {
        let now_ms = self.now.as_millis();
        let Some(log) = self.partitions.get_mut(&key) else { return };
        let trimmed: Vec<Trimmed> = std::iter::from_fn(|| log.poll_trimmed()).collect();
        for trimmed in trimmed {
            self.counters.retention_segments_deleted += 1;
            self.counters.retention_records_deleted += trimmed.records;
            self.counters.retention_bytes_deleted += trimmed.bytes;
            tracing::info!(
                partition = %key,
                log_start_offset = trimmed.log_start_offset,
                records = trimmed.records,
                bytes = trimmed.bytes,
                newest_ms = trimmed.newest_ms,
                "retention: deleted a sealed segment"
            );
            self.push_event(NodeEvent::SegmentDeleted { key, trimmed, now_ms });
            self.probe_oldest(key);
        }
    }
}
