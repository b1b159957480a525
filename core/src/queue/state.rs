//! One partition's queue on its owner (docs/design.md §4.8): which offsets are settled, how
//! often each unsettled one was delivered, and who holds a lease on what now.
//!
//! Durable (rebuilt from the consumer journal at start-up): the *frontier*, below which every
//! offset is settled; the settled offsets above it (`acked`); the delivery count of every
//! unsettled offset delivered at least once. These change only once the journal says the entry
//! is durable. In memory only: the leases. A lease goes `Reading` (reserved while the records
//! are read, so that concurrent receives take different offsets) → `Granting` (its delivery
//! entry is in the journal's group commit) → `Held` (the client has its receipt handle, until
//! `expires`) → `Settling` (its ack entry is in the group commit) → gone. A delivery whose
//! message's previous count is durable is granted *ahead* of its entry: `Reading` → `Held` at
//! once, its count kept in memory (`undurable`) until the entry is durable. So a receive costs
//! no journal sync of its own, and a count, though it may repeat after an owner restart (the
//! entry was lost), never decreases: a message whose last count is not durable yet is granted
//! again only once its entry is. Only a held lease
//! expires; an expired one may be leased again at once, with a new nonce. A message delivered
//! `max_deliveries` times goes `Reading` → `Moving` (its copy is being produced to the
//! dead-letter topic) → `Settling` (the copy is durable; the ack entry is in the group commit)
//! → gone; a move that fails drops the lease, and the message is available again.
//!
//! Bounded: only offsets below `frontier + QUEUE_WINDOW_RECORDS` are leased, so `acked`,
//! `deliveries` and `leases` never hold more than that many offsets each; past it, receives wait
//! for the frontier to move.

use std::collections::{BTreeMap, BTreeSet};

use crate::constants::QUEUE_WINDOW_RECORDS;
use crate::ids::Instant;

/// A lease's stage (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    Reading,
    Granting,
    Held,
    Settling,
    /// Being moved to the dead-letter topic; never expires (the move ends or fails).
    Moving,
}

/// A lease on one offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub state: LeaseState,
    /// What the receipt handle carries (0 until granted).
    pub nonce: u64,
    /// The delivery count this lease is (0 until granted).
    pub count: u32,
    /// A held lease expires then (owner's clock).
    pub expires: Instant,
    /// The message's timestamp, once its record was read (what the age of the oldest unsettled
    /// message is told from without a read: see `node/oldest.rs`).
    pub timestamp_ms: Option<u64>,
}

/// Why a settle was refused: the handle names no held, unexpired lease with that nonce (it
/// expired, was settled, was redelivered, or was never ours). The client must not retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleHandle;

/// The durable state of a partition's queue, as the journal records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableQueue {
    pub frontier: u64,
    pub acked: BTreeSet<u64>,
    pub deliveries: BTreeMap<u64, u32>,
}

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub struct PartitionQueue {
    durable: DurableQueue,
    leases: BTreeMap<u64, Lease>,
    /// Counts granted ahead of their journal entry, until it is durable (see the module docs).
    undurable: BTreeMap<u64, u32>,
}

impl PartitionQueue {
    /// A queue with the durable state the journal recorded (no leases: a restarted owner's
    /// leases are void, and their messages available at once).
    pub fn from_durable(durable: DurableQueue) -> PartitionQueue {
        PartitionQueue { durable, leases: BTreeMap::new(), undurable: BTreeMap::new() }
    }

    pub fn durable(&self) -> &DurableQueue {
        &self.durable
    }

    pub fn frontier(&self) -> u64 {
        self.durable.frontier
    }

    pub fn lease(&self, offset: u64) -> Option<&Lease> {
        self.leases.get(&offset)
    }

    /// Leases held now (granted and not yet expired, or settling).
    pub fn leased(&self, now: Instant) -> usize {
        self.leases
            .values()
            .filter(|l| match l.state {
                LeaseState::Held => now < l.expires,
                LeaseState::Settling | LeaseState::Granting | LeaseState::Moving => true,
                LeaseState::Reading => false,
            })
            .count()
    }

    /// When the next held lease expires after `now` (its message is available again then).
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.leases
            .values()
            .filter(|l| l.state == LeaseState::Held && l.expires > now)
            .map(|l| l.expires)
            .min()
    }

    /// True if `offset` (at or above the frontier) is settled.
    pub fn is_acked(&self, offset: u64) -> bool {
        self.durable.acked.contains(&offset)
    }

    /// Settled offsets at or above the frontier, ascending.
    pub fn acked_offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.durable.acked.iter().copied()
    }

    /// Settled offsets at or above the frontier.
    pub fn acked_ahead(&self) -> usize {
        self.durable.acked.len()
    }

    /// Retention deleted everything below `start`: nothing there can be delivered or settled.
    pub fn clamp_to_start(&mut self, start: u64) {
        if start <= self.durable.frontier {
            return;
        }
        self.durable.frontier = start;
        self.durable.acked = self.durable.acked.split_off(&start);
        self.durable.deliveries = self.durable.deliveries.split_off(&start);
        self.undurable = self.undurable.split_off(&start);
        // Leases in flight below `start` finish on their own (their disk operations complete);
        // held ones are dropped: their records are gone.
        self.leases.retain(|&offset, lease| offset >= start || lease.state != LeaseState::Held);
        self.advance_frontier();
    }

    /// True if `offset` may be leased now.
    fn available(&self, offset: u64, now: Instant) -> bool {
        if self.durable.acked.contains(&offset) {
            return false;
        }
        match self.leases.get(&offset) {
            None => true,
            Some(lease) => lease.state == LeaseState::Held && now >= lease.expires,
        }
    }

    /// Reserves up to `max` offsets that may be leased now, from the frontier (or `start`, the
    /// log's start offset) up to the high watermark `end`, within the window: ascending, as
    /// `Reading` leases. Empty if none.
    pub fn reserve(&mut self, now: Instant, start: u64, end: u64, max: usize) -> Vec<u64> {
        let lower = self.durable.frontier.max(start);
        let upper = end.min(self.durable.frontier.saturating_add(QUEUE_WINDOW_RECORDS));
        let mut chosen = Vec::new();
        let mut offset = lower;
        while offset < upper && chosen.len() < max {
            if self.available(offset, now) {
                chosen.push(offset);
            }
            offset += 1;
        }
        for &offset in &chosen {
            // An expired lease leased again keeps what is known of its record.
            let timestamp_ms = self.leases.get(&offset).and_then(|l| l.timestamp_ms);
            let reading = Lease {
                state: LeaseState::Reading,
                nonce: 0,
                count: 0,
                expires: now,
                timestamp_ms,
            };
            self.leases.insert(offset, reading);
        }
        chosen
    }

    /// The record of the reserved (or leased) `offset` was read: its timestamp is `timestamp_ms`.
    pub fn note_timestamp(&mut self, offset: u64, timestamp_ms: u64) {
        if let Some(lease) = self.leases.get_mut(&offset) {
            lease.timestamp_ms = Some(timestamp_ms);
        }
    }

    /// The first offset at or above `start` (the log's start) that is not settled: the oldest
    /// message a consumer still owes an ack, if it is below the high watermark.
    pub fn first_unsettled(&self, start: u64) -> u64 {
        let mut offset = self.durable.frontier.max(start);
        let mut acked = self.durable.acked.range(offset..);
        while acked.next() == Some(&offset) {
            offset += 1;
        }
        offset
    }

    /// True if `reserve` would find an offset now (between `start` and `end`, in the window).
    pub fn has_available(&self, now: Instant, start: u64, end: u64) -> bool {
        let lower = self.durable.frontier.max(start);
        let upper = end.min(self.durable.frontier.saturating_add(QUEUE_WINDOW_RECORDS));
        (lower..upper).any(|offset| self.available(offset, now))
    }

    /// A reserved offset is not delivered after all (its read did not return it).
    pub fn release(&mut self, offset: u64) {
        if self.leases.get(&offset).is_some_and(|l| l.state == LeaseState::Reading) {
            self.leases.remove(&offset);
        }
    }

    /// The count a delivery of `offset` now would be.
    pub fn next_count(&self, offset: u64) -> u32 {
        self.deliveries(offset).saturating_add(1)
    }

    /// Deliveries of `offset` so far (0 if never delivered): the durable count, or a count
    /// granted ahead of its entry.
    pub fn deliveries(&self, offset: u64) -> u32 {
        let durable = self.durable.deliveries.get(&offset).copied().unwrap_or(0);
        durable.max(self.undurable.get(&offset).copied().unwrap_or(0))
    }

    /// True if a delivery of `offset` may be granted ahead of its journal entry: its previous
    /// count (if any) is durable, so a restart that loses the new entry repeats that count at
    /// worst, never goes below it.
    pub fn may_grant_ahead(&self, offset: u64) -> bool {
        !self.undurable.contains_key(&offset)
    }

    /// A reserved offset is delivered as `count` (`next_count`) with `nonce` ahead of its
    /// journal entry: held from now until `expires`; `on_delivered` follows once the entry is
    /// durable.
    pub fn grant_ahead(&mut self, offset: u64, nonce: u64, count: u32, expires: Instant) {
        let lease = self.leases.get_mut(&offset).expect("invariant: granted offsets are reserved");
        debug_assert_eq!(lease.state, LeaseState::Reading);
        debug_assert!(!self.undurable.contains_key(&offset), "one count ahead at a time");
        *lease = Lease { state: LeaseState::Held, nonce, count, expires, ..*lease };
        self.undurable.insert(offset, count);
    }

    /// A reserved offset is being delivered as `count` (`next_count`) with `nonce`: its
    /// delivery entry goes to the journal; the lease is held once that is durable.
    pub fn grant(&mut self, offset: u64, nonce: u64, count: u32, expires: Instant) {
        let lease = self.leases.get_mut(&offset).expect("invariant: granted offsets are reserved");
        debug_assert_eq!(lease.state, LeaseState::Reading);
        *lease = Lease { state: LeaseState::Granting, nonce, count, expires, ..*lease };
    }

    /// The delivery entry of `offset` (count `count`) is durable: the count stands, and the
    /// lease (if it is still the one granted) is held from `now` until `expires`.
    pub fn on_delivered(&mut self, offset: u64, count: u32, expires: Instant) {
        if !self.on_count_durable(offset, count) {
            return;
        }
        if let Some(lease) = self.leases.get_mut(&offset)
            && lease.state == LeaseState::Granting
            && lease.count == count
        {
            lease.state = LeaseState::Held;
            lease.expires = expires;
        }
    }

    /// The delivery entry of `offset` (count `count`) is durable (one granted ahead, or one
    /// start-up read): the count stands. False if `offset` is settled (or retention removed it).
    pub fn on_count_durable(&mut self, offset: u64, count: u32) -> bool {
        if offset < self.durable.frontier || self.durable.acked.contains(&offset) {
            return false;
        }
        let known = self.durable.deliveries.entry(offset).or_insert(0);
        *known = (*known).max(count);
        if self.undurable.get(&offset).is_some_and(|&ahead| ahead <= count) {
            self.undurable.remove(&offset);
        }
        true
    }

    /// A delivery entry could not be made durable: the lease is dropped (never answered).
    pub fn on_delivery_failed(&mut self, offset: u64, count: u32) {
        if self
            .leases
            .get(&offset)
            .is_some_and(|l| l.state == LeaseState::Granting && l.count == count)
        {
            self.leases.remove(&offset);
        }
    }

    /// A reserved offset is to be moved to the dead-letter topic instead of delivered again.
    pub fn begin_move(&mut self, offset: u64) {
        let lease = self.leases.get_mut(&offset).expect("invariant: moved offsets are reserved");
        debug_assert_eq!(lease.state, LeaseState::Reading);
        lease.state = LeaseState::Moving;
    }

    /// The dead-letter copy of `offset` is durable: its ack entry goes to the journal (then
    /// `on_acked`, or `on_ack_failed`, which leaves it available again). False if the move was
    /// voided meanwhile (retention removed the offset).
    pub fn moved(&mut self, offset: u64) -> bool {
        match self.leases.get_mut(&offset) {
            Some(lease) if lease.state == LeaseState::Moving => {
                lease.state = LeaseState::Settling;
                true
            }
            _ => false,
        }
    }

    /// The dead-letter copy of `offset` could not be made: the message is available again.
    pub fn move_failed(&mut self, offset: u64) {
        if self.leases.get(&offset).is_some_and(|l| l.state == LeaseState::Moving) {
            self.leases.remove(&offset);
        }
    }

    /// The held, unexpired lease of `offset` whose nonce is `nonce`.
    fn held(&mut self, now: Instant, offset: u64, nonce: u64) -> Result<&mut Lease, StaleHandle> {
        match self.leases.get_mut(&offset) {
            Some(lease)
                if lease.state == LeaseState::Held
                    && lease.nonce == nonce
                    && now < lease.expires =>
            {
                Ok(lease)
            }
            _ => Err(StaleHandle),
        }
    }

    /// An ack of the lease `(offset, nonce)` begins: its entry goes to the journal.
    pub fn begin_ack(&mut self, now: Instant, offset: u64, nonce: u64) -> Result<(), StaleHandle> {
        self.held(now, offset, nonce)?.state = LeaseState::Settling;
        Ok(())
    }

    /// The ack entry of `offset` is durable: it is settled for good.
    pub fn on_acked(&mut self, offset: u64) {
        if self.leases.get(&offset).is_some_and(|l| l.state == LeaseState::Settling) {
            self.leases.remove(&offset);
        }
        if offset < self.durable.frontier {
            return;
        }
        self.durable.deliveries.remove(&offset);
        self.undurable.remove(&offset);
        self.durable.acked.insert(offset);
        self.advance_frontier();
    }

    /// An ack entry could not be made durable: the lease is held again (until it expires).
    pub fn on_ack_failed(&mut self, offset: u64) {
        if let Some(lease) = self.leases.get_mut(&offset)
            && lease.state == LeaseState::Settling
        {
            lease.state = LeaseState::Held;
        }
    }

    /// Renews the lease `(offset, nonce)` until `expires`.
    pub fn extend(
        &mut self,
        now: Instant,
        offset: u64,
        nonce: u64,
        expires: Instant,
    ) -> Result<(), StaleHandle> {
        self.held(now, offset, nonce)?.expires = expires;
        Ok(())
    }

    /// Gives the lease `(offset, nonce)` back: the message is available again now.
    pub fn nack(&mut self, now: Instant, offset: u64, nonce: u64) -> Result<(), StaleHandle> {
        self.held(now, offset, nonce)?;
        self.leases.remove(&offset);
        Ok(())
    }

    fn advance_frontier(&mut self) {
        while self.durable.acked.remove(&self.durable.frontier) {
            self.durable.deliveries.remove(&self.durable.frontier);
            self.undurable.remove(&self.durable.frontier);
            self.durable.frontier += 1;
        }
    }

    /// Internal consistency (`Node::check_invariants`).
    pub fn check(&self) -> Result<(), String> {
        let DurableQueue { frontier, acked, deliveries } = &self.durable;
        let window_end = frontier.saturating_add(QUEUE_WINDOW_RECORDS);
        if acked.first().is_some_and(|&a| a <= *frontier) {
            return Err(format!("acked {acked:?} not above the frontier {frontier}"));
        }
        if let Some((&offset, &count)) =
            deliveries.iter().find(|(o, c)| **o < *frontier || **c == 0 || acked.contains(o))
        {
            return Err(format!("delivery count {count} of {offset} (frontier {frontier})"));
        }
        if acked.last().is_some_and(|&a| a >= window_end)
            || self.leases.keys().next_back().is_some_and(|&o| o >= window_end && o >= *frontier)
        {
            return Err(format!("queue state past the window (frontier {frontier})"));
        }
        if let Some(offset) = self.leases.keys().find(|o| acked.contains(o)) {
            return Err(format!("offset {offset} is both leased and acked"));
        }
        if let Some((&offset, &count)) = self
            .undurable
            .iter()
            .find(|(o, c)| **o < *frontier || **o >= window_end || acked.contains(o) || **c == 0)
        {
            return Err(format!(
                "count {count} of {offset} ahead of the journal (frontier {frontier})"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant(1_000_000);

    fn at(ms: u64) -> Instant {
        T0.plus_millis(ms)
    }

    /// Reserves, grants and makes durable one delivery of the first available offset.
    fn deliver(q: &mut PartitionQueue, now: Instant, end: u64, nonce: u64) -> (u64, u32) {
        let offset = q.reserve(now, 0, end, 1)[0];
        let count = q.next_count(offset);
        q.grant(offset, nonce, count, at(30_000));
        q.on_delivered(offset, count, now.plus_millis(30_000));
        (offset, count)
    }

    #[test]
    fn concurrent_receives_take_different_offsets() {
        let mut q = PartitionQueue::default();
        assert_eq!(q.reserve(T0, 0, 5, 2), vec![0, 1]);
        assert_eq!(q.reserve(T0, 0, 5, 2), vec![2, 3]);
        assert_eq!(q.reserve(T0, 0, 5, 2), vec![4]);
        assert!(q.reserve(T0, 0, 5, 2).is_empty(), "nothing past the high watermark");
        q.release(1);
        assert_eq!(q.reserve(T0, 0, 5, 9), vec![1], "a released offset is available again");
    }

    #[test]
    fn acks_move_the_frontier_and_are_never_delivered_again() {
        let mut q = PartitionQueue::default();
        let (a, _) = deliver(&mut q, T0, 3, 11);
        let (b, _) = deliver(&mut q, T0, 3, 12);
        q.begin_ack(T0, b, 12).expect("held");
        q.on_acked(b);
        assert_eq!((q.frontier(), q.acked_ahead()), (0, 1), "1 acked ahead of 0");
        q.begin_ack(T0, a, 11).expect("held");
        q.on_acked(a);
        assert_eq!((q.frontier(), q.acked_ahead()), (2, 0));
        // Even once every lease expired, only 2 is offered.
        assert_eq!(q.reserve(at(60_000), 0, 3, 9), vec![2]);
        assert_eq!(q.begin_ack(T0, a, 11), Err(StaleHandle), "settled: stale");
    }

    #[test]
    fn a_stale_handle_never_settles_a_redelivery() {
        let mut q = PartitionQueue::default();
        let (offset, first) = deliver(&mut q, T0, 1, 100);
        assert_eq!(q.begin_ack(at(30_001), offset, 100), Err(StaleHandle), "expired");
        let later = at(30_001);
        let again = q.reserve(later, 0, 1, 1);
        assert_eq!(again, vec![offset], "an expired lease is available again");
        let count = q.next_count(offset);
        assert_eq!(count, first + 1, "delivery counts only grow");
        q.grant(offset, 200, count, at(60_000));
        q.on_delivered(offset, count, at(60_001));
        assert_eq!(q.begin_ack(later, offset, 100), Err(StaleHandle), "the old nonce");
        assert_eq!(q.extend(later, offset, 100, at(90_000)), Err(StaleHandle));
        assert_eq!(q.nack(later, offset, 100), Err(StaleHandle));
        q.begin_ack(later, offset, 200).expect("the new handle settles");
    }

    #[test]
    fn the_first_unsettled_offset_skips_what_is_acked_and_leases_keep_timestamps() {
        let mut q = PartitionQueue::default();
        let (a, _) = deliver(&mut q, T0, 3, 1);
        let (b, _) = deliver(&mut q, T0, 3, 2);
        q.note_timestamp(a, 70);
        q.note_timestamp(2, 99); // not reserved: nothing to keep it in
        assert_eq!(q.lease(a).and_then(|l| l.timestamp_ms), Some(70));
        assert!(q.lease(2).is_none());
        q.begin_ack(T0, a, 1).expect("held");
        q.on_acked(a);
        assert_eq!(q.first_unsettled(0), b);
        assert_eq!(q.first_unsettled(5), 5, "never below the log start");
        // An expired lease leased again keeps its record's timestamp.
        q.note_timestamp(b, 80);
        assert_eq!(q.reserve(at(30_001), 0, 3, 1), vec![b]);
        assert_eq!(q.lease(b).and_then(|l| l.timestamp_ms), Some(80));
        q.grant(b, 3, 2, at(60_000));
        assert_eq!(q.lease(b).and_then(|l| l.timestamp_ms), Some(80), "granting keeps it");
    }

    #[test]
    fn nack_frees_at_once_and_extend_renews() {
        let mut q = PartitionQueue::default();
        let (offset, _) = deliver(&mut q, T0, 1, 5);
        q.extend(at(29_000), offset, 5, at(59_000)).expect("held");
        assert!(q.reserve(at(40_000), 0, 1, 1).is_empty(), "extended past 30 s");
        q.nack(at(40_000), offset, 5).expect("held");
        assert_eq!(q.reserve(at(40_000), 0, 1, 1), vec![offset], "available at once");
    }

    #[test]
    fn the_window_bounds_what_is_kept() {
        let mut q = PartitionQueue::default();
        let end = QUEUE_WINDOW_RECORDS + 10;
        // Deliver and ack everything but offset 0: the set acked ahead fills the window.
        let first = q.reserve(T0, 0, end, usize::MAX);
        assert_eq!(first.len() as u64, QUEUE_WINDOW_RECORDS, "leases stop at the window");
        for &offset in &first[1..] {
            q.grant(offset, offset, 1, at(1));
            q.on_delivered(offset, 1, at(30_000));
            q.begin_ack(T0, offset, offset).expect("held");
            q.on_acked(offset);
        }
        q.check().expect("consistent");
        assert_eq!(q.acked_ahead() as u64, QUEUE_WINDOW_RECORDS - 1);
        q.release(0);
        assert_eq!(q.reserve(T0, 0, end, 9), vec![0], "only the frontier's offset");
        q.grant(0, 1, 1, at(1));
        q.on_delivered(0, 1, at(30_000));
        q.begin_ack(T0, 0, 1).expect("held");
        q.on_acked(0);
        assert_eq!((q.frontier(), q.acked_ahead()), (QUEUE_WINDOW_RECORDS, 0));
        assert_eq!(q.reserve(T0, 0, end, 99).len(), 10, "the window moved on");
    }

    #[test]
    fn retention_clamps_the_state() {
        let mut q = PartitionQueue::default();
        deliver(&mut q, T0, 10, 1);
        let (b, _) = deliver(&mut q, T0, 10, 2);
        q.begin_ack(T0, b, 2).expect("held");
        q.on_acked(b);
        q.clamp_to_start(5);
        assert_eq!((q.frontier(), q.acked_ahead(), q.deliveries(0)), (5, 0, 0));
        assert_eq!(q.reserve(T0, 5, 10, 1), vec![5]);
        q.check().expect("consistent");
    }

    #[test]
    fn a_move_holds_the_offset_until_it_settles_or_fails() {
        let mut q = PartitionQueue::default();
        assert_eq!(q.reserve(T0, 0, 3, 1), vec![0]);
        q.begin_move(0);
        assert_eq!(q.reserve(at(60_000), 0, 3, 3), vec![1, 2], "a move never expires");
        q.release(1);
        q.release(2);
        assert_eq!(q.leased(at(60_000)), 1, "a move counts as leased");
        assert!(q.moved(0), "the copy is durable: its ack goes to the journal");
        assert!(!q.moved(0), "once");
        q.on_ack_failed(0);
        assert_eq!(q.reserve(T0, 0, 3, 1), vec![0], "a failed ack leaves it available");
        q.begin_move(0);
        q.move_failed(0);
        assert_eq!(q.reserve(T0, 0, 3, 1), vec![0], "so does a failed copy");
        q.begin_move(0);
        assert!(q.moved(0));
        q.on_acked(0);
        assert_eq!(q.frontier(), 1, "a completed move settles it");
        q.check().expect("consistent");
    }

    #[test]
    fn a_count_granted_ahead_is_held_at_once_and_never_followed_by_another_before_it_is_durable() {
        let mut q = PartitionQueue::default();
        let offset = q.reserve(T0, 0, 1, 1)[0];
        assert!(q.may_grant_ahead(offset), "never delivered: nothing to lose");
        q.grant_ahead(offset, 7, 1, at(30_000));
        assert_eq!(q.lease(offset).map(|l| l.state), Some(LeaseState::Held));
        assert_eq!(q.leased(T0), 1);
        q.nack(T0, offset, 7).expect("held before its entry is durable");
        assert_eq!(q.reserve(T0, 0, 1, 1), vec![offset], "available again");
        assert_eq!(q.next_count(offset), 2, "the count granted ahead counts");
        assert!(!q.may_grant_ahead(offset), "count 1 is not durable: count 2 must wait");
        q.on_delivered(offset, 1, T0);
        assert!(q.may_grant_ahead(offset), "now it may");
        assert_eq!(q.durable().deliveries.get(&offset), Some(&1));
        q.grant_ahead(offset, 8, 2, at(30_000));
        q.begin_ack(T0, offset, 8).expect("held");
        q.on_acked(offset);
        assert_eq!(q.frontier(), 1);
        q.on_delivered(offset, 2, T0); // the entry lands after the ack's: nothing to do
        q.check().expect("consistent");
        assert!(q.may_grant_ahead(offset));
    }
}
