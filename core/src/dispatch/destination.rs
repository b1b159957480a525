//! Per-destination dispatch state: the queue of records waiting for one partition, the single
//! commit in flight to it, its failure streak and backoff, and its recent commit latency (which
//! bounds how long a small batch may linger for company).

use std::collections::{BTreeMap, VecDeque};

use crate::constants::{BATCH_TARGET_RECORDS, LINGER_CAP_MS, REROUTE_AFTER_FAILED_PASSES};
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

    fn linger_until(&self) -> Option<Instant> {
        let latency_us = self.latency_us?;
        if self.queue.len() >= BATCH_TARGET_RECORDS {
            return None;
        }
        let linger_us = (2 * latency_us).min(LINGER_CAP_MS * 1_000);
        Some(Instant(self.queued_since?.0 + linger_us))
    }

    /// Whether a batch should be sent now: nothing in flight, records queued, no backoff, and not
    /// lingering (a small batch waits for company only while other commits run).
    pub fn ready_to_send(&self, now: Instant, others_running: bool) -> bool {
        if self.in_flight.is_some() || self.queue.is_empty() {
            return false;
        }
        if self.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        let lingering = others_running && self.linger_until().is_some_and(|until| now < until);
        !lingering
    }

    /// When this destination next becomes sendable by time alone.
    pub fn deadline(&self) -> Option<Instant> {
        if self.in_flight.is_some() || self.queue.is_empty() {
            return None;
        }
        [self.retry_at, self.linger_until()].into_iter().flatten().max()
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
