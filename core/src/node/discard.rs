//! Discarding, the one way a 202'd record dies unfinished, and the removal of a deleted topic's
//! files. Both are destructive decisions taken from metastore state, so both need three things:
//! the incarnation is absent from the local replica, the replica has caught up, and the leader
//! confirms it is gone (a follower asks the leader; the leader first passes a read barrier and
//! then re-reads its own state). Anything less keeps the records for a later pass.

use super::cluster::Forwarded;
use super::{ClusterPlacement, MetaWaiter, Node};
use crate::ids::{PartitionKey, TopicId};
use crate::io::NodeEvent;
use crate::peer::PeerMessage;

impl Node {
    /// Asks, once per topic per pass, whether the incarnations of orphaned records are gone.
    pub(super) fn confirm_discards(&mut self) {
        let mut topics = self.dispatcher.poll_confirmations(self.now);
        topics.extend(self.orphan_partition_topics());
        topics.sort_unstable();
        topics.dedup();
        for topic in topics {
            self.ask_if_gone(topic);
        }
    }

    /// Topics of partition logs on our disk that the local replica does not know (left over
    /// from a deletion we did not see applied, e.g. while down). Scanned at most once per pass,
    /// not on every input: the scan visits every partition log.
    fn orphan_partition_topics(&mut self) -> Vec<TopicId> {
        if self.now < self.next_orphan_scan {
            return Vec::new();
        }
        self.next_orphan_scan = self.now.plus_millis(crate::constants::FAILURE_BACKOFF_MS);
        let unknown: Vec<TopicId> = self
            .partitions
            .keys()
            .map(|key| key.topic)
            .filter(|topic| self.meta.topic_by_id(*topic).is_none())
            .collect();
        unknown
            .into_iter()
            .filter(|topic| {
                let due = self.orphan_files_asked.get(topic).is_none_or(|at| {
                    self.now >= at.plus_millis(crate::constants::FAILURE_BACKOFF_MS)
                });
                if due {
                    self.orphan_files_asked.insert(*topic, self.now);
                }
                due
            })
            .collect()
    }

    fn ask_if_gone(&mut self, topic: TopicId) {
        if self.meta.topic_by_id(topic).is_some() {
            let placement = ClusterPlacement(&self.meta);
            self.dispatcher.requeue_orphans(topic, self.now, &placement);
            return;
        }
        if !self.meta.caught_up() {
            return; // we cannot tell yet: keep everything for a later pass
        }
        if self.meta.is_leader() {
            self.meta.read_barrier(self.now, MetaWaiter::Confirm { topic, asker: None });
        } else if let Some(leader) = self.meta.leader() {
            self.forward(leader, Forwarded::Confirm, |id| PeerMessage::ConfirmGone { id, topic });
        }
    }

    /// A read barrier finished (we lead): answer the follower that asked, or ourselves.
    pub(super) fn on_barrier(&mut self, waiter: MetaWaiter, ok: bool) {
        let MetaWaiter::Confirm { topic, asker } = waiter else {
            return;
        };
        let gone = ok && self.meta.confirm_gone_locally(topic);
        match asker {
            Some((from, id)) => self.send(from, &PeerMessage::ConfirmGoneReply { id, topic, gone }),
            None => self.on_leader_confirmation(topic, gone),
        }
    }

    /// The leader's word on `topic`. Discard only if our own replica still agrees.
    pub(super) fn on_leader_confirmation(&mut self, topic: TopicId, gone: bool) {
        let agree = gone && self.meta.topic_by_id(topic).is_none() && self.meta.caught_up();
        if !agree {
            return;
        }
        for seq in self.dispatcher.on_confirmation(topic, true) {
            tracing::debug!(seq, topic = topic.0, "discarded record of a deleted topic");
            self.push_event(NodeEvent::Discarded { seq, topic });
        }
        let orphaned: Vec<PartitionKey> =
            self.partitions.keys().copied().filter(|key| key.topic == topic).collect();
        if !orphaned.is_empty() {
            tracing::info!(
                topic = topic.0,
                partitions = orphaned.len(),
                "removing files of a deleted topic"
            );
        }
        for key in orphaned {
            self.delete_log_files(key);
        }
        self.orphan_files_asked.remove(&topic);
    }

    /// A topic deletion was applied (committed in the metastore): forget its partitions and
    /// delete their files. Commits in flight to them end as `TopicGone`, long-polls on them
    /// answer 404.
    pub(super) fn drop_partitions(&mut self, topic: TopicId, partitions: u32) {
        self.abandon_jobs_of(topic);
        self.release_parked_topic(topic);
        for partition in 0..partitions {
            self.delete_log_files(PartitionKey { topic, partition });
        }
    }
}
