//! Dead letters (docs/design.md §4.8): a message of a topic with `max_deliveries` that was
//! delivered that many times without an ack is not offered again; its owner produces a copy to
//! the topic's dead-letter topic through its own ingress WAL, and only once that copy is
//! durable (the group commit that would have answered a client's produce 202) journals an ack
//! of the original. A crash in between offers the message again, and the move runs again: a
//! message can reach the dead-letter topic twice, never zero times.

use super::queue::JournalWaiter;
use super::{Node, ProduceWaiter};
use crate::api::{DeadLetter, ProduceMessage};
use crate::ids::PartitionKey;
use crate::io::NodeEvent;
use crate::peer::WireConsumed;
use crate::queue::JournalEntry;

impl Node {
    /// Where messages of `key`'s topic go after too many deliveries, if the topic has a
    /// dead-letter topic that exists now (one deleted since the create leaves its messages
    /// offered as usual: they have nowhere to go).
    pub(super) fn dead_letter_of(&self, key: PartitionKey) -> Option<DeadLetter> {
        let dead = self.meta.topic_by_id(key.topic)?.queue.dead_letter.clone()?;
        if self.meta.topic(&dead.topic).is_none() {
            tracing::debug!(
                partition = %key, dead_letter_topic = %dead.topic,
                "the dead-letter topic does not exist; messages past max_deliveries are \
                 offered again"
            );
            return None;
        }
        Some(dead)
    }

    /// Starts the moves of `records`, offsets of our partition `key` reserved by a receive and
    /// delivered `max_deliveries` times already; an offset whose copy cannot be staged now (the
    /// WAL is full, latched or shutting down) is released, and waits for a later receive. True
    /// if some move started.
    pub(super) fn move_to_dead_letter(
        &mut self,
        key: PartitionKey,
        records: &[WireConsumed],
        dead: &DeadLetter,
    ) -> bool {
        let mut started = false;
        for record in records {
            let staged = self.begin_dead_letter(key, record, dead);
            let Some(queue) = self.consumers.queues.get_mut(&key) else { return started };
            if staged {
                queue.begin_move(record.offset);
                started = true;
            } else {
                // Nothing changed for anyone else (no wake: a parked receive would spin on it).
                queue.release(record.offset);
            }
        }
        started
    }

    /// Stages the dead-letter copy of `record`, an offset of our partition `key` reserved by a
    /// receive. False if it cannot be staged now (the WAL is full, latched or shutting down):
    /// the caller releases the offset, and a later receive tries again.
    fn begin_dead_letter(
        &mut self,
        key: PartitionKey,
        record: &WireConsumed,
        dead: &DeadLetter,
    ) -> bool {
        let message = ProduceMessage {
            key: record.key.clone(),
            partition: None,
            payload: record.payload.clone(),
        };
        let waiter = ProduceWaiter::DeadLetter { key, offset: record.offset };
        match self.stage_messages(&dead.topic, vec![message], false, waiter, None) {
            Ok(()) => true,
            Err(error) => {
                tracing::debug!(
                    partition = %key, offset = record.offset, %error,
                    "the dead-letter copy could not be staged; the message waits for the next \
                     receive"
                );
                false
            }
        }
    }

    /// The group commit of a dead-letter copy of `key`@`offset` ended: durable (`ok`), so the
    /// original's ack goes to the consumer journal; or failed, so the message is available
    /// again.
    pub(super) fn on_dead_letter_staged(&mut self, key: PartitionKey, offset: u64, ok: bool) {
        let Some(queue) = self.consumers.queues.get_mut(&key) else { return };
        if !ok {
            queue.move_failed(offset);
            self.consumers.available_again.insert(key);
            return;
        }
        if !queue.moved(offset) {
            return; // retention removed the offset meanwhile
        }
        let waiter = JournalWaiter::DeadLettered { key, offset };
        if let Err(waiter) =
            self.consumers.journal.stage(&[JournalEntry::Acked { key, offset }], waiter, self.now)
        {
            self.on_journal_waiter(waiter, false);
        }
        self.pump_journal();
    }

    /// The original's ack is durable (`ok`): the move is complete. Or it is not: the message is
    /// available again (and will be moved again: the dead-letter topic may get it twice).
    pub(super) fn on_dead_letter_settled(&mut self, key: PartitionKey, offset: u64, ok: bool) {
        let Some(queue) = self.consumers.queues.get_mut(&key) else { return };
        if !ok {
            queue.on_ack_failed(offset);
            self.consumers.available_again.insert(key);
            return;
        }
        queue.on_acked(offset);
        self.consumers.drop_read_ahead(key, offset);
        self.consumers.counters.dead_lettered += 1;
        tracing::info!(partition = %key, offset, "moved to the dead-letter topic");
        self.push_event(NodeEvent::DeadLettered { key, offset });
    }
}
