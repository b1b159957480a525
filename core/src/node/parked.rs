//! Parked requests: long-poll consumes that found nothing to read and wait, without polling,
//! for a partition's high watermark to pass the offset they want, or for their deadline
//! (docs/design.md §4.9). An entry watches one or more partitions (`(key, offset)`: woken once
//! the key's high watermark is above the offset) and has one deadline; the node wakes it from
//! the place visibility moves (a partition log's commit completion), answers it empty at the
//! deadline from its timer, and releases it when the topic goes, the node stops owning the
//! partition, or the node shuts down.
//!
//! This file only keeps the books (three indexes that must agree, checked by `check`); what a
//! woken or released waiter is answered is the node's business (`node/long_poll.rs`). Every
//! structure is a `BTreeMap`/`BTreeSet` and time comes from the caller: the order in which
//! entries wake is a function of the inputs only.

use std::collections::{BTreeMap, BTreeSet};

use crate::constants::PARKED_MAX;
use crate::ids::{Instant, NodeId, PartitionKey, RequestId, TopicId};

/// Who waits, and what they asked: what the node needs to serve them once woken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Waiter {
    /// A client's replay consume on a partition this node owns.
    Client { request: RequestId, topic: String, key: PartitionKey, offset: u64, max: u32 },
    /// A replay consume another node forwarded to us (the owner) for its client.
    Peer { from: NodeId, id: u64, key: PartitionKey, offset: u64, max: u32 },
    /// A client's queue receive (`Consumers::client_receives`), watching the partitions of it
    /// this node owns, until `until`.
    Receive { id: u64, until: Instant },
    /// A queue receive another node forwarded to us (the owner of `key`) for its client.
    PeerReceive { from: NodeId, id: u64, key: PartitionKey, max: u32, until: Instant },
    /// Another node's topic-wide receive, watching our partitions of its topic: answered (look
    /// again) at any wake or deadline (`node/receive_watch.rs`).
    PeerWatch { from: NodeId, id: u64 },
}

impl Waiter {
    /// True for a queue receive (woken by a message becoming available, not only by the high
    /// watermark).
    pub fn is_receive(&self) -> bool {
        matches!(
            self,
            Waiter::Receive { .. } | Waiter::PeerReceive { .. } | Waiter::PeerWatch { .. }
        )
    }
}

/// One parked request.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub waiter: Waiter,
    pub deadline: Instant,
    /// The partitions it watches and the offset each must pass (at least one).
    pub watches: Vec<(PartitionKey, u64)>,
}

/// Every parked request of a node, indexed three ways.
#[derive(Debug, Default)]
pub(super) struct Parked {
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
    /// Per partition: `(offset, entry id)`, so the entries a new high watermark wakes are a
    /// prefix of the set.
    by_key: BTreeMap<PartitionKey, BTreeSet<(u64, u64)>>,
    /// `(deadline, entry id)`: the entries the timer ends, in order.
    by_deadline: BTreeSet<(Instant, u64)>,
}

impl Parked {
    /// Parks `waiter` until one of `watches` is passed or `deadline`; past `PARKED_MAX` entries
    /// the waiter is handed back (the caller answers it at once). Only a client's queue receive
    /// may watch nothing here (other owners watch its partitions: `node/receive_watch.rs`).
    pub fn park(
        &mut self,
        waiter: Waiter,
        watches: Vec<(PartitionKey, u64)>,
        deadline: Instant,
    ) -> Result<u64, Waiter> {
        let may_watch_nothing = matches!(waiter, Waiter::Receive { .. });
        if self.entries.len() >= PARKED_MAX || (watches.is_empty() && !may_watch_nothing) {
            return Err(waiter);
        }
        self.next_id += 1;
        let id = self.next_id;
        for &(key, offset) in &watches {
            self.by_key.entry(key).or_default().insert((offset, id));
        }
        self.by_deadline.insert((deadline, id));
        self.entries.insert(id, Entry { waiter, deadline, watches });
        Ok(id)
    }

    /// Removes and returns the entries watching `key` whose offset is below `high_watermark`
    /// (a record at or past what they want is visible), in offset order.
    pub fn take_passed(&mut self, key: PartitionKey, high_watermark: u64) -> Vec<Entry> {
        let Some(set) = self.by_key.get(&key) else { return Vec::new() };
        let ids: Vec<u64> = set.range(..(high_watermark, 0)).map(|&(_, id)| id).collect();
        self.take_ids(ids)
    }

    /// Removes and returns every entry watching `key` (whatever its offset): for a trigger that
    /// is not the high watermark (a queue message becoming available again, an ownership move).
    pub fn take_key(&mut self, key: PartitionKey) -> Vec<Entry> {
        let Some(set) = self.by_key.get(&key) else { return Vec::new() };
        let ids: Vec<u64> = set.iter().map(|&(_, id)| id).collect();
        self.take_ids(ids)
    }

    /// Removes and returns the queue receives watching `key`: a message there became available
    /// again (a nack, a failed ack or move), which the high watermark does not show.
    pub fn take_receives(&mut self, key: PartitionKey) -> Vec<Entry> {
        let Some(set) = self.by_key.get(&key) else { return Vec::new() };
        let ids: Vec<u64> = set
            .iter()
            .map(|&(_, id)| id)
            .filter(|id| self.entries.get(id).is_some_and(|e| e.waiter.is_receive()))
            .collect();
        self.take_ids(ids)
    }

    /// Removes and returns every entry watching a partition of `topic`.
    pub fn take_topic(&mut self, topic: TopicId) -> Vec<Entry> {
        let keys: Vec<PartitionKey> =
            self.by_key.keys().copied().filter(|key| key.topic == topic).collect();
        keys.into_iter().flat_map(|key| self.take_key(key)).collect()
    }

    /// Removes and returns the entries whose deadline is at or before `now`, earliest first.
    pub fn take_expired(&mut self, now: Instant) -> Vec<Entry> {
        let ids: Vec<u64> = self
            .by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .map(|&(_, id)| id)
            .collect();
        self.take_ids(ids)
    }

    /// Removes and returns entry `id` (a topic-wide receive a peer's watch woke).
    pub fn take(&mut self, id: u64) -> Option<Entry> {
        self.remove(id)
    }

    /// Removes and returns every entry (at shutdown), in the order they were parked.
    pub fn take_all(&mut self) -> Vec<Entry> {
        let ids: Vec<u64> = self.entries.keys().copied().collect();
        self.take_ids(ids)
    }

    /// The partitions some entry watches.
    pub fn watched_keys(&self) -> Vec<PartitionKey> {
        self.by_key.keys().copied().collect()
    }

    /// The earliest deadline of a parked entry.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first().map(|&(deadline, _)| deadline)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn take_ids(&mut self, ids: Vec<u64>) -> Vec<Entry> {
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        self.by_deadline.remove(&(entry.deadline, id));
        for &(key, offset) in &entry.watches {
            if let Some(set) = self.by_key.get_mut(&key) {
                set.remove(&(offset, id));
                if set.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
        Some(entry)
    }

    /// The three indexes agree: every entry is in the deadline index under its deadline and in
    /// the partition index under each of its watches, nothing else is in either, no partition
    /// keeps an empty set, and there are at most `PARKED_MAX` entries.
    pub fn check(&self) -> Result<(), String> {
        if self.entries.len() > PARKED_MAX {
            return Err(format!("parked: {} entries, bound {PARKED_MAX}", self.entries.len()));
        }
        if self.by_deadline.len() != self.entries.len() {
            let (deadlines, entries) = (self.by_deadline.len(), self.entries.len());
            return Err(format!("parked: {deadlines} deadlines for {entries} entries"));
        }
        for &(deadline, id) in &self.by_deadline {
            if self.entries.get(&id).is_none_or(|e| e.deadline != deadline) {
                return Err(format!("parked: deadline of entry {id} unknown or stale"));
            }
        }
        let mut watches = 0;
        for (key, set) in &self.by_key {
            if set.is_empty() {
                return Err(format!("parked: empty watch set for {key}"));
            }
            for &(offset, id) in set {
                let listed =
                    self.entries.get(&id).is_some_and(|e| e.watches.contains(&(*key, offset)));
                if !listed {
                    return Err(format!("parked: watch ({key}, {offset}) of entry {id} unknown"));
                }
            }
            watches += set.len();
        }
        let expected: usize = self.entries.values().map(|e| e.watches.len()).sum();
        let unwatched = self
            .entries
            .values()
            .any(|e| e.watches.is_empty() && !matches!(e.waiter, Waiter::Receive { .. }));
        if watches != expected || unwatched {
            return Err(format!("parked: {watches} watches indexed, entries list {expected}"));
        }
        if self.entries.keys().next_back().is_some_and(|&id| id > self.next_id) {
            return Err(format!("parked: entry id past {}", self.next_id));
        }
        Ok(())
    }

    /// Breaks the indexes on purpose (tests of `check` and of `Node::check_invariants`).
    #[cfg(test)]
    pub fn corrupt_for_test(&mut self) {
        if let Some((_, id)) = self.by_deadline.pop_first() {
            self.by_deadline.insert((Instant(u64::MAX), id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(partition: u32) -> PartitionKey {
        PartitionKey { topic: TopicId(7), partition }
    }

    fn client(request: u64, offset: u64) -> Waiter {
        let topic = "t".to_string();
        Waiter::Client { request: RequestId(request), topic, key: key(0), offset, max: 1 }
    }

    fn requests(entries: &[Entry]) -> Vec<u64> {
        entries
            .iter()
            .map(|e| match &e.waiter {
                Waiter::Client { request, .. } => request.0,
                Waiter::Peer { id, .. }
                | Waiter::Receive { id, .. }
                | Waiter::PeerReceive { id, .. }
                | Waiter::PeerWatch { id, .. } => *id,
            })
            .collect()
    }

    #[test]
    fn a_queue_wake_takes_only_the_receives() {
        let mut parked = Parked::default();
        parked.park(client(1, 4), vec![(key(0), 4)], Instant(100)).expect("room");
        let receive = Waiter::Receive { id: 2, until: Instant(100) };
        parked.park(receive, vec![(key(0), 4), (key(1), 0)], Instant(50)).expect("room");
        assert_eq!(requests(&parked.take_receives(key(0))), vec![2], "the replay stays parked");
        assert_eq!(parked.len(), 1);
        parked.check().expect("consistent");
        assert_eq!(requests(&parked.take_passed(key(0), 5)), vec![1]);
    }

    #[test]
    fn a_watermark_wakes_exactly_the_entries_it_passes() {
        let mut parked = Parked::default();
        for (request, offset) in [(1, 5), (2, 3), (3, 9), (4, 5)] {
            parked
                .park(client(request, offset), vec![(key(0), offset)], Instant(100))
                .expect("room");
        }
        parked.park(client(5, 0), vec![(key(1), 0)], Instant(100)).expect("room");
        assert!(parked.take_passed(key(0), 3).is_empty(), "offset 3 is not visible below hw 3");
        assert_eq!(requests(&parked.take_passed(key(0), 6)), vec![2, 1, 4]);
        assert_eq!(parked.len(), 2);
        assert!(parked.take_passed(key(0), 6).is_empty(), "an entry wakes once");
        parked.check().expect("consistent");
        assert_eq!(requests(&parked.take_passed(key(0), 10)), vec![3]);
        assert_eq!(requests(&parked.take_passed(key(1), 1)), vec![5]);
        assert_eq!(parked.len(), 0);
        parked.check().expect("consistent when empty");
    }

    #[test]
    fn deadlines_end_entries_in_order_and_only_when_due() {
        let mut parked = Parked::default();
        parked.park(client(1, 0), vec![(key(0), 0)], Instant(300)).expect("room");
        parked.park(client(2, 0), vec![(key(0), 0)], Instant(100)).expect("room");
        parked.park(client(3, 0), vec![(key(0), 0)], Instant(200)).expect("room");
        assert_eq!(parked.next_deadline(), Some(Instant(100)));
        assert!(parked.take_expired(Instant(99)).is_empty());
        assert_eq!(requests(&parked.take_expired(Instant(200))), vec![2, 3]);
        assert_eq!(parked.next_deadline(), Some(Instant(300)));
        assert_eq!(requests(&parked.take_passed(key(0), 1)), vec![1]);
        assert_eq!(parked.next_deadline(), None);
        parked.check().expect("consistent");
    }

    #[test]
    fn a_deleted_topic_releases_its_entries_only() {
        let mut parked = Parked::default();
        parked.park(client(1, 0), vec![(key(0), 0)], Instant(100)).expect("room");
        let other = PartitionKey { topic: TopicId(8), partition: 0 };
        parked.park(client(2, 0), vec![(other, 0)], Instant(100)).expect("room");
        assert_eq!(requests(&parked.take_topic(TopicId(7))), vec![1]);
        assert_eq!(parked.watched_keys(), vec![other]);
        assert_eq!(requests(&parked.take_all()), vec![2]);
        parked.check().expect("consistent");
    }

    #[test]
    fn an_entry_watching_several_partitions_wakes_once_from_any() {
        let mut parked = Parked::default();
        parked.park(client(1, 0), vec![(key(0), 4), (key(1), 0)], Instant(100)).expect("room");
        parked.check().expect("consistent");
        assert_eq!(requests(&parked.take_passed(key(1), 1)), vec![1]);
        assert!(parked.take_passed(key(0), 10).is_empty(), "its other watch went with it");
        assert!(parked.watched_keys().is_empty());
        parked.check().expect("consistent");
    }

    #[test]
    fn the_bound_hands_the_waiter_back() {
        let mut parked = Parked::default();
        for request in 0..PARKED_MAX as u64 {
            parked.park(client(request, 0), vec![(key(0), 0)], Instant(100)).expect("room");
        }
        let refused = parked.park(client(u64::MAX, 0), vec![(key(0), 0)], Instant(100));
        assert_eq!(refused, Err(client(u64::MAX, 0)));
        assert_eq!(parked.len(), PARKED_MAX);
        parked.check().expect("full but consistent");
        assert!(parked.park(client(1, 0), Vec::new(), Instant(1)).is_err(), "no watch, no park");
    }

    #[test]
    fn check_names_a_broken_index() {
        let mut parked = Parked::default();
        parked.park(client(1, 0), vec![(key(0), 0)], Instant(100)).expect("room");
        parked.corrupt_for_test();
        let error = parked.check().expect_err("the deadline index disagrees");
        assert!(error.contains("deadline"), "{error}");
    }
}
