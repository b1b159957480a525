//! The age of each partition's oldest unsettled message: how far behind a queue's consumers
//! are in time (docs/design.md §4.8, lag). The oldest unsettled message is the first offset
//! at or above the log start that no ack settled (`PartitionQueue::first_unsettled`; the log
//! start itself for a partition no consumer touched). Its timestamp is known without a read
//! when its record was read for a lease (the lease keeps it) or read ahead, which is the case
//! whenever consumers keep up, or when a commit made it visible after every earlier message
//! was settled. Otherwise the retention pass (every `retention_check_ms`) reads
//! that one record, at most one such read per partition at a time and never on the produce or
//! receive path. Until the next pass a partition whose frontier moved past the record read
//! reports that record's timestamp: the age is then overstated by at most about a pass, and
//! it is never that of a message a consumer has not reached.

use std::collections::{BTreeMap, BTreeSet};

use super::{IoPurpose, Node};
use crate::ids::PartitionKey;
use crate::io::{DiskDone, DiskError, DiskOp};
use crate::partition::ReadPlan;

/// Payload bytes a probe asks for (it always gets its one record, whatever its size).
const PROBE_BYTES: u64 = 1;

/// What the probes found, per partition.
#[derive(Default)]
pub(super) struct OldestProbes {
    /// The offset a probe read last, and its record's timestamp.
    seen: BTreeMap<PartitionKey, (u64, u64)>,
    /// Partitions with a probe read in flight.
    reading: BTreeSet<PartitionKey>,
}

impl OldestProbes {
    pub(super) fn forget(&mut self, key: PartitionKey) {
        self.seen.remove(&key);
    }

    /// Internal consistency (`Node::check_invariants`): the probes awaited are those in
    /// flight (`in_flight`, one per partition at most), and a probe's offset is never past the
    /// message it stands for.
    pub(super) fn check(
        &self,
        in_flight: &[PartitionKey],
        first_unsettled: impl Fn(PartitionKey) -> Option<u64>,
    ) -> Result<(), String> {
        let distinct: BTreeSet<PartitionKey> = in_flight.iter().copied().collect();
        if distinct.len() != in_flight.len() || distinct != self.reading {
            let awaited = &self.reading;
            return Err(format!("oldest probes: {in_flight:?} in flight, {awaited:?} awaited"));
        }
        for (&key, &(offset, _)) in &self.seen {
            if let Some(first) = first_unsettled(key)
                && offset > first
            {
                return Err(format!(
                    "{key}: probed offset {offset} is past the oldest unsettled {first}"
                ));
            }
        }
        Ok(())
    }
}

/// The oldest unsettled message of a partition, as far as its owner knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Oldest {
    /// Every message is settled (or the partition holds none).
    Nothing,
    /// The message at `offset` is the oldest unsettled one; its record's timestamp.
    Known { offset: u64, timestamp_ms: u64 },
    /// The message at `offset` is; a probe last found an older one's timestamp (or none).
    Unread { offset: u64, stale_ms: Option<u64> },
}

impl Node {
    /// The timestamp of the oldest unsettled message of our partition `key` (see the module
    /// docs); `None` if every message is settled or no probe has read it yet.
    pub(super) fn oldest_unsettled_ms(&self, key: PartitionKey) -> Option<u64> {
        match self.oldest_of(key) {
            Oldest::Known { timestamp_ms, .. } => Some(timestamp_ms),
            Oldest::Unread { stale_ms, .. } => stale_ms,
            Oldest::Nothing => None,
        }
    }

    /// The first unsettled offset of our partition `key` (the high watermark if none).
    pub(super) fn first_unsettled(&self, key: PartitionKey) -> Option<u64> {
        let log = self.partitions.get(&key)?;
        let start = log.log_start_offset();
        Some(self.consumers.queues.get(&key).map_or(start, |q| q.first_unsettled(start)))
    }

    fn oldest_of(&self, key: PartitionKey) -> Oldest {
        let (Some(log), Some(offset)) = (self.partitions.get(&key), self.first_unsettled(key))
        else {
            return Oldest::Nothing;
        };
        if offset >= log.high_watermark() {
            return Oldest::Nothing;
        }
        let leased = self.consumers.queues.get(&key).and_then(|q| q.lease(offset));
        let known = leased
            .and_then(|lease| lease.timestamp_ms)
            .or_else(|| self.consumers.read_ahead_timestamp(key, offset));
        let probed = self.consumers.oldest.seen.get(&key).copied();
        match (known, probed) {
            (Some(timestamp_ms), _) => Oldest::Known { offset, timestamp_ms },
            (None, Some((seen, timestamp_ms))) if seen == offset => {
                Oldest::Known { offset, timestamp_ms }
            }
            // Not a message retention deleted: it is no longer owed an ack.
            (None, Some((seen, stale_ms))) if seen < offset && seen >= log.log_start_offset() => {
                Oldest::Unread { offset, stale_ms: Some(stale_ms) }
            }
            (None, _) => Oldest::Unread { offset, stale_ms: None },
        }
    }

    /// A commit made `key`@`offset` visible with this timestamp: if that is the oldest
    /// unsettled message now (everything before it was settled), no probe needs to read it.
    pub(super) fn learn_oldest(&mut self, key: PartitionKey, offset: u64, timestamp_ms: u64) {
        if self.first_unsettled(key) == Some(offset) {
            self.consumers.oldest.seen.insert(key, (offset, timestamp_ms));
        }
    }

    /// Part of the retention pass: reads the oldest unsettled record of every partition whose
    /// owner does not know its timestamp (one read per partition at a time).
    pub(super) fn probe_oldest_unsettled(&mut self) {
        let keys: Vec<PartitionKey> = self.partitions.keys().copied().collect();
        for key in keys {
            self.probe_oldest(key);
        }
    }

    /// Reads the oldest unsettled record of `key` if its timestamp is not known (also right
    /// after retention deleted a segment: the pass that started the deletion could not read a
    /// record the deletion was about to remove).
    pub(super) fn probe_oldest(&mut self, key: PartitionKey) {
        let Oldest::Unread { offset, .. } = self.oldest_of(key) else { return };
        let Some(log) = self.partitions.get(&key) else { return };
        let probes = &self.consumers.oldest;
        if probes.reading.contains(&key) || log.refuse_read(offset).is_some() {
            return;
        }
        let Some(plan) = log.read_plan(offset, 1, PROBE_BYTES) else { return };
        self.consumers.oldest.reading.insert(key);
        let op = DiskOp::Read { file: plan.file, offset: plan.pos, len: plan.len };
        self.emit(IoPurpose::OldestProbe { key, plan }, op);
    }

    /// A probe's read completed: keep what it found, if its message is still unsettled. A
    /// failed or damaged read is tried again at the next pass, quietly: it is not a client's
    /// read (a receive reports damage, loudly, when it reads it; a read can be damaged on the
    /// way only).
    pub(super) fn on_oldest_probe(
        &mut self,
        key: PartitionKey,
        plan: ReadPlan,
        result: Result<DiskDone, DiskError>,
    ) {
        self.consumers.oldest.reading.remove(&key);
        let (Some(log), Ok(DiskDone::Data(bytes))) = (self.partitions.get(&key), result) else {
            return;
        };
        let Ok(records) = log.decode_read(plan, &bytes) else { return };
        let Some(record) = records.first().filter(|r| r.offset == plan.first_offset) else {
            return;
        };
        if self.first_unsettled(key).is_some_and(|first| record.offset <= first) {
            self.consumers.oldest.seen.insert(key, (record.offset, record.timestamp_ms));
        }
    }
}
