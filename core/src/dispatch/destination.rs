//! Per-destination dispatch state: the queue of records waiting for one partition, the single
//! commit in flight to it, its failure streak and backoff, and its recent commit latency (which
//! bounds how long a small batch may linger for company).

use std::collections::{BTreeMap, VecDeque};

use crate::constants::{
    BATCH_TARGET_RECORDS, LINGER_CAP_MS, LINGER_FLOOR_MS, REROUTE_AFTER_FAILED_PASSES,
};
use crate::ids::Instant;
use crate::partition::CommitId;
use crate::wal::WalRecord;

/// Dispatch state of one destination.
#[derive(Debug, Default)]
pub struct Destination {
    queue: VecDeque<u64>,
    /// The commit in flight to this destination, if any (at most one).
    pub in_flight: Option<CommitId>,
    /// Consecutive failed passes; 3 or more means failing (rerouted, probe only).
    pub failed_passes: u32,
    retry_at: Option<Instant>,
    queued_since: Option<Instant>,
    latency_us: Option<u64>,
}

impl Destination {
    /// Queues a record.
    pub fn enqueue(&mut self, seq: u64, now: Instant) {
        if self.queue.is_empty() {
            self.queued_since = Some(now);
        }
        self.queue.push_back(seq);
    }

    /// Records queued.
    #[cfg(test)]
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Records are queued.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Nothing queued and nothing in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_none()
    }

    /// Counts towards the window (it has work).
    pub fn is_active(&self) -> bool {
        !self.is_empty()
    }

    /// Can be forgotten: no work and no failure history worth keeping.
    pub fn is_forgettable(&self) -> bool {
        self.is_empty() && self.failed_passes == 0
    }

    fn is_failing(&self) -> bool {
        self.failed_passes >= REROUTE_AFTER_FAILED_PASSES
    }

    /// Failing, with nothing queued or in flight: no probe tests it.
    pub fn is_idle_failing(&self) -> bool {
        self.is_failing() && self.is_empty()
    }

    /// While a batch below its target lingers: until max(2 × recent commit latency, 2 ms) after
    /// its first record queued, never past 50 ms. A failing destination's probe never lingers.
    fn linger_until(&self) -> Option<Instant> {
        if self.queue.len() >= BATCH_TARGET_RECORDS || self.is_failing() {
            return None;
        }
        let recent_us = 2 * self.latency_us.unwrap_or(0);
        let linger_us = recent_us.clamp(LINGER_FLOOR_MS * 1_000, LINGER_CAP_MS * 1_000);
        Some(self.queued_since?.plus_micros(linger_us))
    }

    /// Whether a batch should be sent now: nothing in flight, records queued, no backoff, and
    /// (when `linger` is on) not lingering for company.
    pub fn ready_to_send(&self, now: Instant, linger: bool) -> bool {
        if self.in_flight.is_some() || self.queue.is_empty() {
            return false;
        }
        if self.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        let lingering = linger && self.linger_until().is_some_and(|until| now < until);
        !lingering
    }

    /// When this destination next becomes sendable by time alone.
    pub fn deadline(&self, linger: bool) -> Option<Instant> {
        if self.in_flight.is_some() || self.queue.is_empty() {
            return None;
        }
        let linger_until = if linger { self.linger_until() } else { None };
        [self.retry_at, linger_until].into_iter().flatten().max()
    }

    /// Takes the next batch: queued records in order up to `byte_budget` (at least one); a
    /// failing destination sends a one-record probe.
    pub fn take_batch(&mut self, held: &BTreeMap<u64, WalRecord>, byte_budget: usize) -> Vec<u64> {
        let limit = if self.is_failing() { 1 } else { usize::MAX };
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(&seq) = self.queue.front() {
            let weight = held.get(&seq).expect("invariant: queued records are held").weight();
            if batch.len() >= limit || (!batch.is_empty() && bytes + weight > byte_budget) {
                break;
            }
            bytes += weight;
            batch.push(seq);
            self.queue.pop_front();
        }
        self.queued_since = self.queue.front().and(self.queued_since);
        batch
    }

    /// The commit succeeded after `latency_us`.
    pub fn on_success(&mut self, latency_us: u64) {
        self.failed_passes = 0;
        self.retry_at = None;
        self.latency_us =
            Some(self.latency_us.map_or(latency_us, |old| (old * 7 + latency_us) / 8));
    }

    /// The commit failed: its records go back to the front, retried at `retry_at`.
    pub fn on_failure(&mut self, seqs: Vec<u64>, retry_at: Instant) {
        for seq in seqs.into_iter().rev() {
            self.queue.push_front(seq);
        }
        self.failed_passes += 1;
        self.retry_at = Some(retry_at);
        self.queued_since.get_or_insert(retry_at);
    }

    /// Removes every queued record but the first (the probe).
    pub fn drain_all_but_probe(&mut self) -> Vec<u64> {
        if self.queue.len() <= 1 {
            return Vec::new();
        }
        self.queue.drain(1..).collect()
    }

    /// Removes the first queued record.
    pub fn take_front(&mut self) -> Option<u64> {
        let seq = self.queue.pop_front();
        if self.queue.is_empty() {
            self.queued_since = None;
        }
        seq
    }

    /// Removes every queued record.
    pub fn drain_all(&mut self) -> Vec<u64> {
        self.queued_since = None;
        self.queue.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: Instant = Instant(1_000_000);

    fn queued(records: u64, latency_us: Option<u64>) -> Destination {
        let mut dest = Destination { latency_us, ..Destination::default() };
        for seq in 0..records {
            dest.enqueue(seq, START);
        }
        dest
    }

    /// How long a batch queued at `START` waits before it may go, with the linger on.
    fn lingers_for(dest: &Destination) -> u64 {
        dest.deadline(true).map_or(0, |at| at.micros_since(START))
    }

    #[test]
    fn with_no_latency_sample_a_small_batch_lingers_for_the_floor() {
        let dest = queued(3, None);
        assert_eq!(lingers_for(&dest), LINGER_FLOOR_MS * 1_000);
        assert!(!dest.ready_to_send(START.plus_micros(1_999), true));
        assert!(dest.ready_to_send(START.plus_micros(2_000), true));
    }

    #[test]
    fn a_small_batch_lingers_for_twice_the_recent_latency_never_past_the_cap() {
        assert_eq!(lingers_for(&queued(3, Some(500))), 2_000, "the floor wins below 1 ms");
        assert_eq!(lingers_for(&queued(3, Some(10_000))), 20_000);
        assert_eq!(lingers_for(&queued(3, Some(40_000))), LINGER_CAP_MS * 1_000);
    }

    #[test]
    fn a_full_batch_goes_at_once() {
        let dest = queued(BATCH_TARGET_RECORDS as u64, Some(10_000));
        assert_eq!(dest.deadline(true), None);
        assert!(dest.ready_to_send(START, true));
    }

    #[test]
    fn with_the_linger_off_a_small_batch_goes_at_once() {
        let dest = queued(1, Some(10_000));
        assert_eq!(dest.deadline(false), None);
        assert!(dest.ready_to_send(START, false));
    }

    #[test]
    fn a_failing_destinations_probe_waits_for_its_backoff_not_a_linger() {
        let mut dest = queued(1, Some(10_000));
        let retry_at = START.plus_millis(1_000);
        for _ in 0..REROUTE_AFTER_FAILED_PASSES {
            let batch = dest.take_batch(&held(1), usize::MAX);
            dest.on_failure(batch, retry_at);
        }
        assert!(dest.is_failing());
        assert_eq!(dest.deadline(true), Some(retry_at));
        assert!(dest.ready_to_send(retry_at, true));
    }

    #[test]
    fn records_queued_behind_a_commit_linger_from_when_they_queued() {
        let mut dest = queued(3, Some(1_000));
        let batch = dest.take_batch(&held(3), usize::MAX);
        assert_eq!(batch, vec![0, 1, 2]);
        assert_eq!(dest.deadline(true), None, "nothing queued");
        let later = START.plus_micros(700);
        dest.enqueue(3, later);
        assert_eq!(dest.linger_until(), Some(later.plus_micros(2_000)));
    }

    fn held(records: u64) -> BTreeMap<u64, WalRecord> {
        (0..records)
            .map(|seq| {
                let record = WalRecord {
                    seq,
                    timestamp_ms: 0,
                    topic: "t".into(),
                    topic_id: crate::ids::TopicId(1),
                    partition: 0,
                    key: None,
                    payload: bytes::Bytes::from_static(b"p"),
                    chunk: None,
                };
                (seq, record)
            })
            .collect()
    }
}
