//! Idempotent commits: which (origin node, WAL sequence) pairs a partition already holds, so a
//! retried or replayed commit does not land a second copy on the same partition.
//!
//! Each entry keeps a fingerprint of the record's content. A replay carries the same content; a
//! *different* record under a reused sequence number (possible only after a disk lost WAL data it
//! claimed durable) does not match and is committed, so a lying disk can lose what it damaged but
//! never cascade into dropping a healthy record.
//!
//! Bounded: an origin re-sends only records at or above its durable WAL checkpoint, which it
//! reports with every commit, so everything below it is forgotten. After a restart we do not know
//! the origins' checkpoints yet; we keep the last `DEDUP_HORIZON` sequences per origin (the most
//! a dispatcher can read past its checkpoint) until the first report prunes further.

use std::collections::BTreeMap;

use crate::constants::{LOOKAHEAD_WINDOWS, WINDOW_MAX_RECORDS};
use crate::ids::NodeId;

/// How far below an origin's newest sequence a replay can reach.
const DEDUP_HORIZON: u64 = (LOOKAHEAD_WINDOWS * WINDOW_MAX_RECORDS) as u64;

/// The committed origins of one partition: origin → sequence → content fingerprint.
#[derive(Clone, Debug, Default)]
pub struct OriginIndex {
    by_origin: BTreeMap<NodeId, BTreeMap<u64, u32>>,
    /// Insertions by recovery since it last pruned (see `insert_recovered`).
    recovered_since_prune: u64,
}

impl OriginIndex {
    /// Whether this record (origin, WAL sequence and content fingerprint) is already here.
    pub fn contains(&self, origin: NodeId, seq: u64, fingerprint: u32) -> bool {
        self.by_origin.get(&origin).and_then(|seqs| seqs.get(&seq)) == Some(&fingerprint)
    }

    /// Remembers a committed record.
    pub fn insert(&mut self, origin: NodeId, seq: u64, fingerprint: u32) {
        self.by_origin.entry(origin).or_default().insert(seq, fingerprint);
    }

    /// Remembers a record found by recovery, pruning to the horizon as it goes (every
    /// `DEDUP_HORIZON` insertions) so that recovering a long log holds no more than about twice
    /// what the final `prune_to_horizon` keeps. Pruning early drops nothing the final pruning
    /// would keep: an origin's newest sequence only grows.
    pub fn insert_recovered(&mut self, origin: NodeId, seq: u64, fingerprint: u32) {
        self.insert(origin, seq, fingerprint);
        self.recovered_since_prune += 1;
        if self.recovered_since_prune >= DEDUP_HORIZON {
            self.prune_to_horizon();
        }
    }

    /// Forgets sequences of `origin` below its durable checkpoint: it never re-sends them.
    pub fn prune_below(&mut self, origin: NodeId, checkpoint: u64) {
        if let Some(seqs) = self.by_origin.get_mut(&origin) {
            *seqs = seqs.split_off(&checkpoint);
        }
    }

    /// After recovery: keep only what a replay could still reach.
    pub fn prune_to_horizon(&mut self) {
        self.recovered_since_prune = 0;
        for seqs in self.by_origin.values_mut() {
            if let Some((&newest, _)) = seqs.last_key_value() {
                *seqs = seqs.split_off(&newest.saturating_sub(DEDUP_HORIZON));
            }
        }
    }

    /// Forgets, for every origin in `checkpoints`, the sequences below its checkpoint.
    pub fn prune_below_all(&mut self, checkpoints: &BTreeMap<NodeId, u64>) {
        for (&origin, &checkpoint) in checkpoints {
            self.prune_below(origin, checkpoint);
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_origin.values().map(BTreeMap::len).sum()
    }
}

/// The dedup entries of the active segment's records, what its seal file's tail records
/// (`replayable`): a plain list, one push per committed record (no tree insertion on the commit
/// path), pruned below the origins' checkpoints only once it has doubled since the last
/// pruning, so it stays within about twice what an `OriginIndex` of the same records would keep.
#[derive(Clone, Debug, Default)]
pub struct SegmentTail {
    entries: Vec<(NodeId, u64, u32)>,
    /// Length after the last pruning.
    kept: usize,
    /// Insertions by recovery since it last pruned to the horizon.
    recovered_since_prune: u64,
}

/// Entries a tail holds before it first prunes.
const TAIL_PRUNE_FLOOR: usize = 1_024;

impl SegmentTail {
    /// Remembers a committed record; prunes below `checkpoints` once the list has doubled.
    pub fn insert(&mut self, origin: NodeId, seq: u64, fingerprint: u32) {
        self.entries.push((origin, seq, fingerprint));
    }

    /// Prunes below `checkpoints` if the list doubled since the last pruning.
    pub fn maybe_prune(&mut self, checkpoints: &BTreeMap<NodeId, u64>) {
        if self.entries.len() >= 2 * self.kept.max(TAIL_PRUNE_FLOOR) {
            self.prune_below_all(checkpoints);
        }
    }

    /// A record found by recovery (pruned to the horizon every `DEDUP_HORIZON` insertions).
    pub fn insert_recovered(&mut self, origin: NodeId, seq: u64, fingerprint: u32) {
        self.insert(origin, seq, fingerprint);
        self.recovered_since_prune += 1;
        if self.recovered_since_prune >= DEDUP_HORIZON {
            self.prune_to_horizon();
        }
    }

    /// Keeps only what a replay could still reach: the last `DEDUP_HORIZON` sequences of each
    /// origin.
    pub fn prune_to_horizon(&mut self) {
        self.recovered_since_prune = 0;
        let mut newest: BTreeMap<NodeId, u64> = BTreeMap::new();
        for &(origin, seq, _) in &self.entries {
            let known = newest.entry(origin).or_insert(seq);
            *known = (*known).max(seq);
        }
        self.entries
            .retain(|(origin, seq, _)| *seq >= newest[origin].saturating_sub(DEDUP_HORIZON));
        self.kept = self.entries.len();
    }

    /// Forgets, for every origin in `checkpoints`, the sequences below its checkpoint.
    pub fn prune_below_all(&mut self, checkpoints: &BTreeMap<NodeId, u64>) {
        self.entries.retain(|(origin, seq, _)| checkpoints.get(origin).is_none_or(|c| seq >= c));
        self.kept = self.entries.len();
    }

    /// The entries an origin may still replay (at or above its checkpoint in `checkpoints`;
    /// every entry of an origin not listed): what a seal file records.
    pub fn replayable(
        &self,
        checkpoints: &BTreeMap<NodeId, u64>,
    ) -> BTreeMap<NodeId, BTreeMap<u64, u32>> {
        let mut tail: BTreeMap<NodeId, BTreeMap<u64, u32>> = BTreeMap::new();
        for &(origin, seq, fingerprint) in &self.entries {
            if checkpoints.get(&origin).is_none_or(|&c| seq >= c) {
                tail.entry(origin).or_default().insert(seq, fingerprint);
            }
        }
        tail
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_forgets_only_what_cannot_come_back() {
        let mut index = OriginIndex::default();
        for seq in 0..10 {
            index.insert(NodeId(1), seq, 7);
        }
        index.insert(NodeId(2), 3, 7);
        index.prune_below(NodeId(1), 6);
        assert!(!index.contains(NodeId(1), 5, 7));
        assert!(index.contains(NodeId(1), 6, 7));
        assert!(!index.contains(NodeId(1), 6, 8), "same sequence, other content: not a replay");
        assert!(index.contains(NodeId(2), 3, 7), "other origins are untouched");
        assert_eq!(index.len(), 5);
        index.insert(NodeId(1), DEDUP_HORIZON + 20, 7);
        index.prune_to_horizon();
        assert!(!index.contains(NodeId(1), 9, 7));
        assert!(index.contains(NodeId(1), DEDUP_HORIZON + 20, 7));
    }

    #[test]
    fn recovery_prunes_as_it_goes_and_keeps_what_the_final_pruning_keeps() {
        let total = 2 * DEDUP_HORIZON + 123;
        let (mut streamed, mut at_end) = (OriginIndex::default(), OriginIndex::default());
        let mut peak = 0;
        for seq in 0..total {
            // Two origins interleaved, one of them with an old sequence replayed late.
            let (origin, seq) = if seq % 5 == 0 { (NodeId(2), seq / 5) } else { (NodeId(1), seq) };
            streamed.insert_recovered(origin, seq, 1);
            at_end.insert(origin, seq, 1);
            peak = peak.max(streamed.len());
        }
        streamed.insert_recovered(NodeId(1), 3, 9); // far below the horizon: pruned at the end
        at_end.insert(NodeId(1), 3, 9);
        streamed.prune_to_horizon();
        at_end.prune_to_horizon();
        assert_eq!(streamed.by_origin, at_end.by_origin);
        assert!(peak <= 3 * DEDUP_HORIZON as usize, "peak {peak}");
    }

    #[test]
    fn a_segment_tail_keeps_what_an_origin_index_would() {
        let (a, b) = (NodeId(1), NodeId(2));
        let mut tail = SegmentTail::default();
        let mut index = OriginIndex::default();
        let mut checkpoints = BTreeMap::new();
        for seq in 0..10_000u64 {
            let origin = if seq % 3 == 0 { b } else { a };
            tail.insert(origin, seq, seq as u32);
            index.insert(origin, seq, seq as u32);
            if seq % 100 == 99 {
                checkpoints.insert(a, seq - 50);
                checkpoints.insert(b, seq - 20);
                index.prune_below_all(&checkpoints);
            }
            tail.maybe_prune(&checkpoints);
            assert!(tail.len() <= 2 * index.len().max(TAIL_PRUNE_FLOOR), "bounded at {seq}");
        }
        let expected: BTreeMap<NodeId, BTreeMap<u64, u32>> = index
            .by_origin
            .iter()
            .map(|(o, seqs)| (*o, seqs.clone()))
            .filter(|(_, seqs)| !seqs.is_empty())
            .collect();
        assert_eq!(tail.replayable(&checkpoints), expected);
    }
}
