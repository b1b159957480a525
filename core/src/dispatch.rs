//! The dispatcher: moves durable WAL records to their partitions and decides how far the WAL
//! checkpoint may advance.
//!
//! - **Window.** It holds at most `64 × active destinations` records (clamped to
//!   [4,096, 65,536]) and never reads further than 16 windows past the checkpoint.
//! - **One commit in flight per destination**, at most 16 in all; whatever queues meanwhile goes
//!   in the next batch (≤ 8 MiB). A batch below its 64-record target may linger for company up
//!   to max(2 × the destination's recent commit latency, 2 ms), never past 50 ms, so batches
//!   stay fat and a lone producer's records share partition fsyncs (`with_linger`; off, every
//!   batch goes as soon as its destination is free).
//! - **Skip-set, not head-of-line blocking.** A failing destination keeps its records; everything
//!   else commits and is remembered in `done_ahead`, so nothing is committed twice while the
//!   checkpoint waits at the first record not done.
//! - **Reroute.** A destination whose commits failed 3 passes in a row sends its records to the
//!   next live, healthy partition of the topic, keeping one record as a probe so it gets its
//!   records back once it recovers. One whose owner membership says is dead sends them all at
//!   once and keeps no probe; with no healthy sibling they wait there, and every failed pass
//!   (and every membership change) looks again, so they move as soon as a sibling is healthy.
//! - **Discard** only for incarnations the authority confirms gone (asked once per topic per pass).
//! - **Abandoned requests.** The records of a chunked bulk request whose final record never
//!   reached the WAL (recovery names them) are done without a commit: a request applies whole
//!   or not at all. (The WAL's cursor never hands over a chunked request before its final record
//!   is durable, so a running node has none to drop.) A request the WAL latched in the middle
//!   of is **frozen**: its records are set aside, neither dispatched nor done, so the checkpoint
//!   stays below them and the next start-up decides it; the records around it still commit.

mod destination;
mod invariants;

use std::collections::{BTreeMap, BTreeSet};

use crate::constants::{
    COMMIT_BATCH_BYTES, COMMIT_FANOUT, FAILURE_BACKOFF_MS, LOOKAHEAD_WINDOWS,
    REROUTE_AFTER_FAILED_PASSES, WINDOW_BASE_RECORDS, WINDOW_MAX_RECORDS,
};
use crate::ids::{Instant, PartitionKey, TopicId};
use crate::partition::CommitId;
use crate::wal::WalRecord;
use destination::Destination;

/// What the dispatcher needs to know about the cluster to place records.
pub trait Placement {
    /// Partition count of a live topic incarnation; `None` once it is gone from the local view.
    fn partitions(&self, topic: TopicId) -> Option<u32>;
    /// Whether the owner of `key` is alive according to membership.
    fn owner_alive(&self, key: PartitionKey) -> bool;
}

/// A batch to commit on `target`'s owner.
#[derive(Clone, Debug)]
pub struct CommitRequest {
    pub id: CommitId,
    pub target: PartitionKey,
    pub records: Vec<WalRecord>,
}

/// How a commit ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitResult {
    /// The owner made the records visible from this offset on.
    Committed { first_offset: u64 },
    /// Nothing became visible; retry later.
    Failed(String),
    /// The target's topic incarnation no longer exists there.
    TopicGone,
}

/// Counters the node exports.
#[derive(Clone, Copy, Debug, Default)]
pub struct DispatchCounters {
    pub commits_ok: u64,
    pub commits_failed: u64,
    pub records_committed: u64,
    pub records_rerouted: u64,
    pub records_discarded: u64,
    /// Records found damaged at rest in the WAL and skipped (lost).
    pub records_lost: u64,
    /// Records of abandoned chunked requests, dropped (never acknowledged).
    pub records_abandoned: u64,
}

/// What a rerouted destination keeps.
#[derive(Clone, Copy)]
enum Keep {
    /// One record, the probe (the owner is alive but its commits keep failing).
    Probe,
    /// Nothing (membership says the owner is dead).
    Nothing,
}

struct InFlight {
    target: PartitionKey,
    seqs: Vec<u64>,
    started: Instant,
}

/// The dispatcher of one node.
pub struct Dispatcher {
    checkpoint: u64,
    read_upto: u64,
    held: BTreeMap<u64, WalRecord>,
    done_ahead: BTreeSet<u64>,
    destinations: BTreeMap<PartitionKey, Destination>,
    in_flight: BTreeMap<CommitId, InFlight>,
    orphans: BTreeMap<TopicId, Vec<u64>>,
    confirm_asked_at: BTreeMap<TopicId, Instant>,
    next_commit: u64,
    next_start: Option<PartitionKey>,
    counters: DispatchCounters,
    linger: bool,
    /// Chunked requests recovery found without their final record.
    abandoned: BTreeSet<u64>,
    /// Sequences of theirs dropped since `take_dropped` last ran.
    dropped: Vec<u64>,
    /// The chunked request the WAL latched in the middle of (`Wal::frozen_request`), and its
    /// records read so far: neither dispatched nor done, so the checkpoint stays below them
    /// and the next start-up decides the request.
    frozen_request: Option<u64>,
    frozen: BTreeSet<u64>,
}

impl Dispatcher {
    /// A dispatcher resuming at the durable checkpoint.
    pub fn new(checkpoint: u64) -> Dispatcher {
        Dispatcher::with_first_commit_id(checkpoint, 1)
    }

    /// A dispatcher whose commit ids start at `first_commit_id`. A node picks a fresh range at
    /// every start, so a late answer to a commit of an earlier incarnation can never be taken for
    /// the answer to a new commit that happens to reuse its id.
    pub fn with_first_commit_id(checkpoint: u64, first_commit_id: u64) -> Dispatcher {
        Dispatcher {
            checkpoint,
            read_upto: checkpoint,
            held: BTreeMap::new(),
            done_ahead: BTreeSet::new(),
            destinations: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            orphans: BTreeMap::new(),
            confirm_asked_at: BTreeMap::new(),
            next_commit: first_commit_id,
            next_start: None,
            counters: DispatchCounters::default(),
            linger: false,
            abandoned: BTreeSet::new(),
            dropped: Vec::new(),
            frozen_request: None,
            frozen: BTreeSet::new(),
        }
    }

    /// Drops the records of these chunked requests as they arrive (`RecoveredWal::abandoned`).
    pub fn with_abandoned(mut self, requests: impl IntoIterator<Item = u64>) -> Dispatcher {
        self.abandoned = requests.into_iter().collect();
        self
    }

    /// Turns the linger rule on or off (`Config::dispatch_linger`; off until asked).
    pub fn with_linger(mut self, linger: bool) -> Dispatcher {
        self.linger = linger;
        self
    }

    /// A draining node sends every batch as soon as its destination is free: nothing more is
    /// coming for a small batch to wait for.
    pub fn stop_lingering(&mut self) {
        self.linger = false;
    }

    /// First sequence not yet done: the WAL may be checkpointed here.
    pub fn checkpoint(&self) -> u64 {
        self.checkpoint
    }

    /// Next sequence the dispatcher expects to be handed.
    pub fn read_upto(&self) -> u64 {
        self.read_upto
    }

    /// Counters for metrics.
    pub fn counters(&self) -> DispatchCounters {
        self.counters
    }

    /// Records held (read, not yet done).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Commits in flight.
    pub fn commits_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Current window: records held at once.
    pub fn window(&self) -> usize {
        let active = self.destinations.values().filter(|d| d.is_active()).count();
        (active * crate::constants::BATCH_TARGET_RECORDS)
            .clamp(WINDOW_BASE_RECORDS, WINDOW_MAX_RECORDS)
    }

    /// How many more records the dispatcher takes now.
    pub fn room(&self) -> usize {
        let window = self.window();
        let lookahead_end = self.checkpoint + (LOOKAHEAD_WINDOWS * window) as u64;
        let by_window = window.saturating_sub(self.held.len());
        let by_lookahead = lookahead_end.saturating_sub(self.read_upto) as usize;
        by_window.min(by_lookahead)
    }

    /// Reading must not go past this sequence (the lookahead bound).
    pub fn read_limit(&self) -> u64 {
        self.checkpoint + (LOOKAHEAD_WINDOWS * self.window()) as u64
    }

    /// Takes durable records, in sequence order, starting exactly at `read_upto`.
    pub fn accept(&mut self, records: Vec<WalRecord>, now: Instant, placement: &dyn Placement) {
        for record in records {
            assert_eq!(record.seq, self.read_upto, "invariant: records arrive dense and in order");
            self.read_upto += 1;
            let seq = record.seq;
            if record.chunk.is_some_and(|chunk| Some(chunk.request) == self.frozen_request) {
                self.frozen.insert(seq);
                continue;
            }
            if record.chunk.is_some_and(|chunk| self.abandoned.contains(&chunk.request)) {
                self.counters.records_abandoned += 1;
                self.dropped.push(seq);
                self.pass(seq);
                continue;
            }
            let destination = record.destination();
            self.held.insert(seq, record);
            if placement.partitions(destination.topic).is_none() {
                self.orphans.entry(destination.topic).or_default().push(seq);
                continue;
            }
            let target = self.place(destination, placement);
            if target != destination {
                self.counters.records_rerouted += 1;
            }
            self.destinations.entry(target).or_default().enqueue(seq, now);
        }
        assert!(self.held.len() <= WINDOW_MAX_RECORDS * LOOKAHEAD_WINDOWS);
    }

    /// Sets the records of chunked request `request` aside from now on (the WAL latched while it
    /// was open: `Wal::frozen_request`).
    pub fn freeze(&mut self, request: u64) {
        self.frozen_request = Some(request);
    }

    /// The records of abandoned requests dropped since the last call (for events).
    pub fn take_dropped(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.dropped)
    }

    /// Takes the next sequences as lost (damaged at rest in the WAL): they count as done, so the
    /// checkpoint can pass them.
    pub fn skip_lost(&mut self, seqs: std::ops::Range<u64>) {
        assert_eq!(seqs.start, self.read_upto, "invariant: lost records arrive in order");
        self.counters.records_lost += seqs.end - seqs.start;
        for seq in seqs {
            self.read_upto += 1;
            self.pass(seq);
        }
    }

    /// `seq` is done: the checkpoint moves past every done sequence in front of it.
    fn pass(&mut self, seq: u64) {
        self.done_ahead.insert(seq);
        while self.done_ahead.remove(&self.checkpoint) {
            self.checkpoint += 1;
        }
    }

    /// Where a record for `destination` goes now: itself, unless it is rerouted.
    fn place(&mut self, destination: PartitionKey, placement: &dyn Placement) -> PartitionKey {
        let dest = self.destinations.entry(destination).or_default();
        let dead = !placement.owner_alive(destination);
        let failing = dest.failed_passes >= REROUTE_AFTER_FAILED_PASSES;
        if !dead && !failing {
            return destination;
        }
        if !dead && dest.is_empty() {
            return destination; // keep a one-record probe on a failing destination
        }
        self.sibling(destination, placement).unwrap_or(destination)
    }

    /// The next partition of the same topic (wrapping) whose owner is alive and not failing.
    fn sibling(&self, of: PartitionKey, placement: &dyn Placement) -> Option<PartitionKey> {
        let partitions = placement.partitions(of.topic)?;
        siblings(of, partitions).find(|candidate| {
            let healthy = self
                .destinations
                .get(candidate)
                .is_none_or(|d| d.failed_passes < REROUTE_AFTER_FAILED_PASSES);
            healthy && placement.owner_alive(*candidate)
        })
    }

    /// Commits to start now (round-robin over destinations, at most 16 in flight).
    pub fn poll_commits(&mut self, now: Instant) -> Vec<CommitRequest> {
        let mut out = Vec::new();
        let keys = self.rotation();
        for key in keys {
            if self.in_flight.len() >= COMMIT_FANOUT {
                break;
            }
            let dest = self.destinations.get_mut(&key).expect("rotation lists existing keys");
            if !dest.ready_to_send(now, self.linger) {
                continue;
            }
            let seqs = dest.take_batch(&self.held, COMMIT_BATCH_BYTES);
            let records = seqs.iter().map(|seq| self.held[seq].clone()).collect();
            let id = CommitId(self.next_commit);
            self.next_commit += 1;
            dest.in_flight = Some(id);
            self.in_flight.insert(id, InFlight { target: key, seqs, started: now });
            self.next_start = Some(key);
            out.push(CommitRequest { id, target: key, records });
        }
        out
    }

    /// Destination keys starting after the last one served, so no destination starves.
    fn rotation(&self) -> Vec<PartitionKey> {
        let after = |k: &PartitionKey| self.next_start.is_some_and(|start| *k > start);
        let (mut later, earlier): (Vec<_>, Vec<_>) = self
            .destinations
            .iter()
            .filter(|(_, d)| d.has_queued() && d.in_flight.is_none())
            .map(|(k, _)| *k)
            .partition(after);
        later.extend(earlier);
        later
    }

    /// Records the outcome of a commit.
    pub fn on_commit(
        &mut self,
        id: CommitId,
        result: CommitResult,
        now: Instant,
        placement: &dyn Placement,
    ) {
        let flight = self.in_flight.remove(&id).expect("invariant: outcomes match started commits");
        let dest = self.destinations.get_mut(&flight.target).expect("in-flight destination exists");
        dest.in_flight = None;
        match result {
            CommitResult::Committed { .. } => {
                dest.on_success(now.micros_since(flight.started));
                self.counters.commits_ok += 1;
                self.counters.records_committed += flight.seqs.len() as u64;
                for seq in flight.seqs {
                    self.mark_done(seq);
                }
            }
            CommitResult::Failed(_) => {
                self.counters.commits_failed += 1;
                dest.on_failure(flight.seqs, now.plus_millis(FAILURE_BACKOFF_MS));
                if !placement.owner_alive(flight.target) {
                    // Records wait on a dead owner's destination only while no sibling is
                    // healthy: each of its failed passes looks again, and moves everything.
                    self.reroute_queued(flight.target, Keep::Nothing, now, placement);
                } else if dest.failed_passes >= REROUTE_AFTER_FAILED_PASSES {
                    self.reroute_queued(flight.target, Keep::Probe, now, placement);
                }
            }
            CommitResult::TopicGone => {
                for seq in flight.seqs {
                    self.orphans.entry(flight.target.topic).or_default().push(seq);
                }
            }
        }
        self.garbage_collect(flight.target);
    }

    /// Moves the queued records of `from` to a healthy sibling, if there is one. A failing
    /// destination whose owner is alive keeps one record as a probe (it gets its records back
    /// once a commit succeeds); a dead owner's destination keeps nothing.
    fn reroute_queued(
        &mut self,
        from: PartitionKey,
        keep: Keep,
        now: Instant,
        placement: &dyn Placement,
    ) {
        let Some(to) = self.sibling(from, placement) else {
            if let Keep::Nothing = keep {
                self.lend_probe(from, now, placement);
            }
            return; // they wait here; the next failed pass (or membership change) looks again
        };
        let dest = self.destinations.get_mut(&from).expect("invariant: rerouting a known key");
        let moved = match keep {
            Keep::Probe => dest.drain_all_but_probe(),
            Keep::Nothing => dest.drain_all(),
        };
        self.counters.records_rerouted += moved.len() as u64;
        let target = self.destinations.entry(to).or_default();
        for seq in moved {
            target.enqueue(seq, now);
        }
    }

    /// A dead owner's destination found no healthy sibling. A live sibling that is failing but
    /// idle (its records moved away while its owner was down) has no probe, so nothing would
    /// ever show it healthy again: one of our records becomes its probe. Once that commits, the
    /// next failed pass here moves everything there.
    fn lend_probe(&mut self, from: PartitionKey, now: Instant, placement: &dyn Placement) {
        let Some(partitions) = placement.partitions(from.topic) else { return };
        let idle = siblings(from, partitions).find(|candidate| {
            placement.owner_alive(*candidate)
                && self.destinations.get(candidate).is_some_and(Destination::is_idle_failing)
        });
        let Some(to) = idle else { return };
        let dest = self.destinations.get_mut(&from).expect("invariant: rerouting a known key");
        let Some(seq) = dest.take_front() else { return };
        self.counters.records_rerouted += 1;
        self.destinations.get_mut(&to).expect("found above").enqueue(seq, now);
    }

    /// Re-examines destinations whose owner died: their queued records move to a live sibling.
    pub fn reroute_dead_owners(&mut self, now: Instant, placement: &dyn Placement) {
        let dead: Vec<PartitionKey> = self
            .destinations
            .iter()
            .filter(|(k, d)| d.has_queued() && !placement.owner_alive(**k))
            .map(|(k, _)| *k)
            .collect();
        for key in dead {
            self.reroute_queued(key, Keep::Nothing, now, placement);
        }
    }

    fn garbage_collect(&mut self, key: PartitionKey) {
        if self.destinations.get(&key).is_some_and(Destination::is_forgettable) {
            self.destinations.remove(&key);
        }
    }

    fn mark_done(&mut self, seq: u64) {
        let removed = self.held.remove(&seq);
        assert!(removed.is_some(), "invariant: only held records complete");
        self.pass(seq);
        assert!(self.checkpoint <= self.read_upto);
    }

    /// Topics whose orphaned records need the authority's confirmation now (once per topic per
    /// pass: a pass is one backoff period).
    pub fn poll_confirmations(&mut self, now: Instant) -> Vec<TopicId> {
        let mut out = Vec::new();
        for topic in self.orphans.keys() {
            let due = self
                .confirm_asked_at
                .get(topic)
                .is_none_or(|at| now >= at.plus_millis(FAILURE_BACKOFF_MS));
            if due {
                out.push(*topic);
            }
        }
        for topic in &out {
            self.confirm_asked_at.insert(*topic, now);
        }
        out
    }

    /// The authority answered: if `gone`, every orphan of `topic` is discarded (returned, for
    /// events); otherwise they wait for the next pass.
    pub fn on_confirmation(&mut self, topic: TopicId, gone: bool) -> Vec<u64> {
        if !gone {
            return Vec::new();
        }
        self.confirm_asked_at.remove(&topic);
        let seqs = self.orphans.remove(&topic).unwrap_or_default();
        self.counters.records_discarded += seqs.len() as u64;
        for &seq in &seqs {
            self.mark_done(seq);
        }
        seqs
    }

    /// The orphans of `topic` go back to their destinations: the topic turned out to be live
    /// (our replica knows it; the owner that answered "gone" was behind). Called once per pass,
    /// so a lagging owner is retried at the pass rate, not in a tight loop.
    pub fn requeue_orphans(&mut self, topic: TopicId, now: Instant, placement: &dyn Placement) {
        for seq in self.orphans.remove(&topic).unwrap_or_default() {
            let destination = self.held[&seq].destination();
            let target = self.place(destination, placement);
            self.destinations.entry(target).or_default().enqueue(seq, now);
        }
    }

    /// The earliest time something becomes due (a backoff ends, a linger expires, a confirmation
    /// is to be asked again).
    pub fn next_deadline(&self) -> Option<Instant> {
        let destinations = self.destinations.values().filter_map(|d| d.deadline(self.linger));
        let confirmations = self.orphans.keys().filter_map(|t| {
            self.confirm_asked_at.get(t).map(|at| at.plus_millis(FAILURE_BACKOFF_MS))
        });
        destinations.chain(confirmations).min()
    }
}

/// The other partitions of `of`'s topic, starting after it and wrapping around.
fn siblings(of: PartitionKey, partitions: u32) -> impl Iterator<Item = PartitionKey> {
    (1..partitions).map(move |step| PartitionKey {
        topic: of.topic,
        partition: (of.partition + step) % partitions,
    })
}

#[cfg(test)]
mod tests;
