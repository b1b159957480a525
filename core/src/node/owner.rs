//! The owner's side of commits: every request to commit records on a partition this node owns
//! becomes a *job* in that partition's queue. When the partition log is idle, all queued jobs go
//! out together as one `commit_durable` (one write, one fsync, one read-back), whoever sent
//! them, so concurrent commits to one partition share their fsync.

use super::Node;
use crate::dispatch::CommitResult;
use crate::ids::{NodeId, PartitionKey, TopicId};
use crate::io::NodeEvent;
use crate::partition::{CommitId, CommitOutcome, CommitPart, PartitionLog, PartitionRecord};
use crate::peer::{PeerMessage, WireCommitResult};

/// Who waits for a commit job's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReplyTo {
    /// This node's dispatcher, under its commit id.
    Dispatcher(CommitId),
    /// Another node's dispatcher, answered with a `CommitReply`.
    Peer { from: NodeId, id: u64 },
}

/// A commit job in flight or queued on one of our partitions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Job {
    key: PartitionKey,
    origin: NodeId,
    reply_to: ReplyTo,
}

impl Job {
    /// A job (tests build broken node states with it).
    #[cfg(test)]
    pub(super) fn new(key: PartitionKey, origin: NodeId, reply_to: ReplyTo) -> Job {
        Job { key, origin, reply_to }
    }

    /// Who waits for this job's outcome.
    pub(super) fn reply_to(&self) -> ReplyTo {
        self.reply_to
    }
}

impl Node {
    /// Queues records for `key` (started by `start_queued_commits`).
    pub(super) fn enqueue_commit(
        &mut self,
        key: PartitionKey,
        origin: NodeId,
        origin_checkpoint: u64,
        records: Vec<PartitionRecord>,
        reply_to: ReplyTo,
    ) {
        let live = self.meta.topic_by_id(key.topic).is_some_and(|t| key.partition < t.partitions);
        if !live {
            self.answer_job(reply_to, CommitResult::TopicGone);
            return;
        }
        let id = CommitId(self.next_job);
        self.next_job += 1;
        self.jobs.insert(id, Job { key, origin, reply_to });
        let part = CommitPart { id, origin, origin_checkpoint, records };
        self.commit_queue.entry(key).or_default().push(part);
    }

    /// Starts one combined commit on every partition that is free and has queued jobs.
    pub(super) fn start_queued_commits(&mut self) {
        let ready: Vec<PartitionKey> = self
            .commit_queue
            .keys()
            .copied()
            .filter(|key| self.partitions.get(key).is_none_or(PartitionLog::can_start_commit))
            .collect();
        for key in ready {
            let parts = self.commit_queue.remove(&key).unwrap_or_default();
            let ids: Vec<CommitId> = parts.iter().map(|part| part.id).collect();
            let interval = self.config.partition_index_interval_bytes;
            let segment_bytes = self.config.partition_segment_bytes;
            let log = self.partitions.entry(key).or_insert_with(|| {
                PartitionLog::with_index_interval(key, interval).with_segment_bytes(segment_bytes)
            });
            log.idempotent = self.config.idempotent_commits;
            match log.begin_commit(parts) {
                Ok(decided) => {
                    for outcome in decided {
                        self.on_commit_outcome(outcome);
                    }
                }
                Err(reason) => {
                    tracing::warn!(partition = %key, %reason, "commit refused");
                    for id in ids {
                        self.on_commit_outcome(CommitOutcome { id, result: Err(reason.clone()) });
                    }
                }
            }
        }
    }

    /// A job's commit was decided by the partition log.
    pub(super) fn on_commit_outcome(&mut self, outcome: CommitOutcome) {
        let job = self.jobs.remove(&outcome.id).expect("invariant: outcomes belong to known jobs");
        let result = match outcome.result {
            Ok(landed) => {
                if let Some(timestamp_ms) = landed.first_timestamp_ms {
                    self.learn_oldest(job.key, landed.first_offset, timestamp_ms);
                }
                if !landed.origin_seqs.is_empty() {
                    let (first_offset, origins) = (landed.first_offset, landed.origin_seqs);
                    let origin = job.origin;
                    let key = job.key;
                    self.push_event(NodeEvent::Committed { key, first_offset, origin, origins });
                }
                CommitResult::Committed { first_offset: landed.first_offset }
            }
            Err(reason) => {
                tracing::warn!(partition = %job.key, %reason, "commit failed; nothing became visible");
                self.push_event(NodeEvent::CommitFailed { key: job.key, reason: reason.clone() });
                CommitResult::Failed(reason)
            }
        };
        self.answer_job(job.reply_to, result);
    }

    /// Every job on a deleted topic incarnation ends as `TopicGone` (its records are discarded
    /// only after the authority confirms).
    pub(super) fn abandon_jobs_of(&mut self, topic: TopicId) {
        self.commit_queue.retain(|key, _| key.topic != topic);
        let doomed: Vec<CommitId> =
            self.jobs.iter().filter(|(_, job)| job.key.topic == topic).map(|(id, _)| *id).collect();
        for id in doomed {
            let job = self.jobs.remove(&id).expect("listed above");
            self.answer_job(job.reply_to, CommitResult::TopicGone);
        }
    }

    fn answer_job(&mut self, reply_to: ReplyTo, result: CommitResult) {
        match reply_to {
            ReplyTo::Dispatcher(id) => self.finish_commit(id, result),
            ReplyTo::Peer { from, id } => {
                let result = match result {
                    CommitResult::Committed { first_offset } => {
                        WireCommitResult::Committed { first_offset }
                    }
                    CommitResult::Failed(reason) => WireCommitResult::Failed(reason),
                    CommitResult::TopicGone => WireCommitResult::TopicGone,
                };
                self.send(from, &PeerMessage::CommitReply { id, result });
            }
        }
    }
}
