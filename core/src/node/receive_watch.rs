//! Topic-wide waiting receives in a cluster (docs/design.md §4.8, long-poll receives). A
//! receive that names no partition and finds nothing parks on the node it reached, watching the
//! partitions that node owns; the partitions other nodes own are watched for it by their
//! owners: it sends each a `ReceiveWatch` (one per owner and receive at a time), which the owner
//! parks on its partitions of the topic (`Waiter::PeerWatch`) and answers with a
//! `ReceiveWatchReply` once a message may be available there (or at once if one is), or when the
//! wait ends. Nothing is leased by a watch: the reply wakes the receive, which runs its round
//! again, asking every partition. A reply that finds the receive mid-round marks it woken, so
//! that the round runs once more instead of parking. A watch whose owner never answers (dead,
//! or its parked requests full) costs the receive nothing but its wake: it ends at its deadline
//! as before.

use std::collections::{BTreeMap, BTreeSet};

use super::Node;
use super::parked::Waiter;
use crate::constants::MAX_CONSUME_WAIT_MS;
use crate::ids::{Instant, NodeId, PartitionKey, TopicId};
use crate::peer::PeerMessage;

/// The watches of a node's parked topic-wide receives.
#[derive(Debug, Default)]
pub(super) struct ReceiveWatches {
    next_id: u64,
    /// Watch id → (client receive, owner watching for it).
    sent: BTreeMap<u64, (u64, NodeId)>,
    /// (client receive, owner) → watch id: one at a time per owner.
    by_receive: BTreeMap<(u64, NodeId), u64>,
    /// Client receive → its entry in `Node::parked`, while parked.
    parked: BTreeMap<u64, u64>,
    /// Client receives a watch reply found mid-round: they run their round again.
    woken: BTreeSet<u64>,
}

impl ReceiveWatches {
    /// Client receive `receive` parked as entry `entry` of `Node::parked`.
    pub(super) fn parked(&mut self, receive: u64, entry: u64) {
        self.parked.insert(receive, entry);
    }

    /// Client receive `receive` woke (from its parked entry) or ended.
    pub(super) fn unparked(&mut self, receive: u64) {
        self.parked.remove(&receive);
    }

    /// True (once) if a watch reply came while `receive` was not parked.
    pub(super) fn take_woken(&mut self, receive: u64) -> bool {
        self.woken.remove(&receive)
    }

    /// Client receive `receive` was answered: its watches are forgotten (late replies are
    /// ignored).
    pub(super) fn forget(&mut self, receive: u64) {
        self.parked.remove(&receive);
        self.woken.remove(&receive);
        let owners: Vec<(u64, NodeId)> = self
            .by_receive
            .range((receive, NodeId(0))..=(receive, NodeId(u32::MAX)))
            .map(|(k, _)| *k)
            .collect();
        for key in owners {
            if let Some(id) = self.by_receive.remove(&key) {
                self.sent.remove(&id);
            }
        }
    }

    /// Internal consistency (`Node::check_invariants`): the two watch indexes agree.
    pub(super) fn check(&self) -> Result<(), String> {
        let agree = self.sent.len() == self.by_receive.len()
            && self.sent.iter().all(|(id, key)| self.by_receive.get(key) == Some(id));
        if agree { Ok(()) } else { Err("receive watches: the two indexes disagree".into()) }
    }
}

impl Node {
    /// Asks each of `owners` (alive, not us) to watch its partitions of `topic` for the parked
    /// client receive `receive` until `until`, unless it already does.
    pub(super) fn watch_remote_owners(
        &mut self,
        receive: u64,
        topic: TopicId,
        owners: &BTreeSet<NodeId>,
        until: Instant,
    ) {
        let wait_ms = until.micros_since(self.now) / 1_000;
        for &owner in owners {
            let watches = &mut self.consumers.watches;
            if watches.by_receive.contains_key(&(receive, owner)) {
                continue;
            }
            watches.next_id += 1;
            let id = watches.next_id;
            watches.sent.insert(id, (receive, owner));
            watches.by_receive.insert((receive, owner), id);
            self.send(owner, &PeerMessage::ReceiveWatch { id, topic, wait_ms });
        }
    }

    /// An owner answered a watch: the receive it was for runs its round again (now if parked,
    /// else once its round ends).
    pub(super) fn on_receive_watch_reply(&mut self, id: u64) {
        let watches = &mut self.consumers.watches;
        let Some((receive, owner)) = watches.sent.remove(&id) else { return };
        watches.by_receive.remove(&(receive, owner));
        match watches.parked.remove(&receive) {
            Some(entry) => {
                if self.parked.take(entry).is_some() {
                    self.resume_receive(receive);
                }
            }
            None => {
                watches.woken.insert(receive);
            }
        }
    }

    /// A peer's topic-wide receive waits: watch our partitions of `topic` for it.
    pub(super) fn on_receive_watch(&mut self, from: NodeId, id: u64, topic: TopicId, wait_ms: u64) {
        let me = self.config.node_id;
        let partitions = self.meta.topic_by_id(topic).map_or(0, |t| t.partitions);
        let keys: Vec<PartitionKey> = (0..partitions)
            .map(|partition| PartitionKey { topic, partition })
            .filter(|&key| self.meta.owner(key) == Some(me))
            .collect();
        let waiter = Waiter::PeerWatch { from, id };
        if wait_ms == 0 || keys.is_empty() || self.shutting_down || self.any_available(&keys) {
            return self.answer_waiter(waiter, Ok(()));
        }
        let until = self.now.plus_millis(wait_ms.min(MAX_CONSUME_WAIT_MS));
        let (watches, deadline) = self.receive_watches(&keys, until);
        // Past the bound the watch is dropped unanswered: an answer now would only bring the
        // receive back at once, and its own deadline ends it anyway.
        let _ = self.parked.park(waiter, watches, deadline);
    }

    /// True if a receive would find a message on one of our partitions `keys` now.
    fn any_available(&self, keys: &[PartitionKey]) -> bool {
        keys.iter().any(|key| {
            let Some(log) = self.partitions.get(key) else { return false };
            let (start, end) = (log.log_start_offset(), log.high_watermark());
            match self.consumers.queues.get(key) {
                Some(queue) => queue.has_available(self.now, start, end),
                None => start < end,
            }
        })
    }
}
