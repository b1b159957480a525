//! Dead-letter checks (docs/design.md §4.8). The workload's queue topics may send a message to
//! one dead-letter topic after `max_deliveries` deliveries; the owner reports each completed
//! move (`NodeEvent::DeadLettered`, once the original's ack is durable), and the world says
//! whether the copy was durable in that node's WAL at that moment. Checked:
//!
//! 6. a message leaves its topic only once its copy is durable (when the move completes the
//!    copy is in the WAL's durable bytes, or committed in the dead-letter topic);
//! 7. a moved message is never delivered again from its topic (no delivery asked for after the
//!    move completed), and no message is delivered more than `max_deliveries` times;
//! 8. after the final read every moved message is in the dead-letter topic (and the final
//!    drain's invariant 4 counts a message as settled without an ack only if a copy is).
//!
//! Copies are WAL records of the dead-letter topic carrying the original's payload; they are
//! kept apart from the message's own stagings, placements and visible copies, so the produce
//! checks and the duplicate counts see only what clients produced.

use std::collections::{BTreeMap, BTreeSet};

use narad_core::{Instant, PartitionKey, TopicId};

use super::{Checker, inv};

/// What the checker knows about the dead-letter topic.
#[derive(Clone, Debug, Default)]
pub(super) struct DeadLetterHistory {
    /// Its name, when the workload's topics have one, and their `max_deliveries`.
    pub(super) name: Option<String>,
    max_deliveries: u32,
    /// Its incarnations.
    pub(super) ids: BTreeSet<TopicId>,
    /// Messages moved to it: when their first move completed.
    moved: BTreeMap<u64, Instant>,
}

impl Checker {
    /// The workload's queue topics send their dead letters to the topic `name` after
    /// `max_deliveries` deliveries.
    pub fn dead_letter_topic(&mut self, name: &str, max_deliveries: u32) {
        self.dead_letter.name = Some(name.to_string());
        self.dead_letter.max_deliveries = max_deliveries;
    }

    /// Invariant 7: a delivery beyond the topics' `max_deliveries` (they are moved instead).
    pub(super) fn check_delivery_count(&mut self, at: (PartitionKey, u64), count: u32) {
        let max = self.dead_letter.max_deliveries;
        if self.dead_letter.name.is_some() && count > max {
            let detail =
                format!("{}@{}: delivered as count {count}, past max_deliveries {max}", at.0, at.1);
            self.queue_violation(inv::QUEUE_DEAD_LETTER, detail);
        }
    }

    /// True for an incarnation of the dead-letter topic.
    pub fn is_dead_letter_topic(&self, id: TopicId) -> bool {
        self.dead_letter.ids.contains(&id)
    }

    /// The message at `key`@`offset`, as deliveries, reads or commits placed it.
    pub fn message_at(&self, key: PartitionKey, offset: u64) -> Option<u64> {
        let at = (key, offset);
        let delivered = self.queue_message(at);
        let read = self.seen.get(&at).copied();
        delivered.or(read).or_else(|| {
            let placed = self.msgs.iter().position(|m| m.placed.contains(&at));
            placed.map(|id| id as u64)
        })
    }

    /// Node `node` staged a dead-letter copy of message `id` as WAL sequence `seq`.
    pub(super) fn dead_letter_staged(&mut self, node: u32, seq: u64, id: u64, topic: TopicId) {
        let Some(msg) = self.msgs.get_mut(id as usize) else { return };
        if !msg.dead_letter_stagings.contains(&(node, topic)) {
            msg.dead_letter_stagings.push((node, topic));
        }
        self.by_origin.insert((node, seq), id);
    }

    /// Node `node` completed the move of `key`@`offset`; `durable`: whether its copy was durable
    /// in that node's WAL then (`None`: the message is unknown here).
    pub fn dead_lettered(
        &mut self,
        node: u32,
        key: PartitionKey,
        offset: u64,
        durable: Option<bool>,
    ) {
        if self.is_deleted(key.topic) {
            return;
        }
        self.queue.verdict.dead_lettered += 1;
        let Some(id) = self.message_at(key, offset) else { return };
        // Durable in the WAL, or already committed in the dead-letter topic (its WAL record
        // may be gone by now: dispatched, checkpointed and compacted).
        let committed = !self.msgs[id as usize].dead_letter_placed.is_empty();
        if durable == Some(false) && !committed {
            let detail = format!(
                "{key}@{offset}: message {id} left its topic (n{node}) before its dead-letter \
                 copy was durable"
            );
            self.queue_violation(inv::QUEUE_DEAD_LETTER, detail);
        }
        let now = self.now;
        self.dead_letter.moved.entry(id).or_insert(now);
        self.queue_moved((key, offset), now);
    }

    /// True when a copy of message `id` is in the dead-letter topic (or was, until retention
    /// deleted it there): the drain may find it settled without an ack. Not only after a
    /// reported move: a crash right after the original's ack became durable loses the report,
    /// never the ack.
    pub(super) fn dead_letter_settled(&self, id: u64) -> bool {
        let msg = &self.msgs[id as usize];
        msg.dead_letter_visible > 0 || self.deleted_by_retention(&msg.dead_letter_placed)
    }

    /// Invariant 8: every moved message is in the dead-letter topic after the final read.
    pub(super) fn check_dead_letters(&mut self) {
        let missing: Vec<u64> = self
            .dead_letter
            .moved
            .keys()
            .copied()
            .filter(|&id| {
                let msg = &self.msgs[id as usize];
                msg.dead_letter_visible == 0 && !self.deleted_by_retention(&msg.dead_letter_placed)
            })
            .collect();
        for id in missing.iter().take(5) {
            let detail = format!("message {id} was moved, and is not in the dead-letter topic");
            self.queue_violation(inv::QUEUE_DEAD_LETTER, detail);
        }
    }
}
