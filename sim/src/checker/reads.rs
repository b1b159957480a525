//! Checks on every record a consumer reads: it was produced, byte for byte, for this topic
//! incarnation (no phantom, no corrupt read, no leak across incarnations), it sits below the
//! high watermark, offsets are dense, and an offset once seen never changes its record.

use narad_core::{ConsumedRecord, PartitionKey};

use super::{Checker, inv};
use crate::payload::parse_id;

/// How a read should be accounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    /// A reader during the run.
    Live,
    /// The final read after drain: counts visible copies.
    Final,
    /// A re-read after the final power loss: checks only.
    Recheck,
}

impl Checker {
    /// Records read from `key` starting at `from` (the request's offset).
    pub fn consumed(
        &mut self,
        key: PartitionKey,
        from: u64,
        records: &[ConsumedRecord],
        kind: ReadKind,
    ) {
        self.counters.records_read += records.len() as u64;
        if self.is_deleted(key.topic) {
            // A delete was sent after this read: the topic's state is no longer tracked.
            return;
        }
        if kind == ReadKind::Live && self.cluster && self.served_elsewhere(key, records) {
            // A lagging replica resolved the name to another incarnation (stale reads are
            // allowed): the bytes must still be genuine, offsets and watermarks are not ours.
            for record in records {
                self.check_record(None, record);
            }
            return;
        }
        let hwm = self.known_hwm(key);
        for (i, record) in records.iter().enumerate() {
            let offset = from + i as u64;
            if record.offset != offset || record.partition != key.partition {
                let detail = format!(
                    "{key}: asked from offset {from}, record {i} is p{}@{}",
                    record.partition, record.offset
                );
                self.violation(inv::PROTOCOL, detail);
                return;
            }
            if offset >= hwm && kind == ReadKind::Live {
                let detail = format!("{key}: offset {offset} served, watermark is {hwm}");
                self.violation(inv::ABOVE_WATERMARK, detail);
            }
            let Some(id) = self.check_record(Some(key), record) else {
                continue;
            };
            if kind == ReadKind::Final && self.dead_letter.ids.contains(&key.topic) {
                self.msgs[id as usize].dead_letter_visible += 1;
            } else if kind == ReadKind::Final {
                let msg = &mut self.msgs[id as usize];
                msg.visible += 1;
                if !msg.found_on.contains(&key) {
                    msg.found_on.push(key);
                }
            }
            if let Some(before) = self.seen.insert((key, offset), id)
                && before != id
            {
                let detail = format!("{key}@{offset}: held message {before}, now message {id}");
                self.violation(inv::VISIBLE_THEN_GONE, detail);
            }
        }
    }

    /// True when the node that served a reply resolved the topic name to another incarnation
    /// than `key`'s: some record of it was never staged for `key`'s incarnation, or sits exactly
    /// where a commit placed it in another incarnation of the name and not at that offset of
    /// `key` (a message retried through a lagging node can be staged for both incarnations).
    fn served_elsewhere(&self, key: PartitionKey, records: &[ConsumedRecord]) -> bool {
        records.iter().any(|r| {
            let Some(msg) = parse_id(&r.payload).and_then(|id| self.msgs.get(id as usize)) else {
                return false;
            };
            let here = PartitionKey { topic: key.topic, partition: r.partition };
            let placed_here = msg.placed.contains(&(here, r.offset));
            let placed_elsewhere = msg.placed.iter().any(|&(at, offset)| {
                at.topic != key.topic && at.partition == r.partition && offset == r.offset
            });
            !msg.reached(key.topic) || (placed_elsewhere && !placed_here)
        })
    }

    /// Checks one record against the history (and, with `key`, that it was staged for that
    /// incarnation); returns its message id if it is genuine.
    pub(super) fn check_record(
        &mut self,
        key: Option<PartitionKey>,
        record: &ConsumedRecord,
    ) -> Option<u64> {
        let at = match key {
            Some(key) => format!("{key}@{}", record.offset),
            None => format!(
                "{}/p{}@{} (another incarnation)",
                record.topic, record.partition, record.offset
            ),
        };
        let Some(id) = parse_id(&record.payload).filter(|&id| id < self.msgs.len() as u64) else {
            self.violation(inv::PHANTOM, format!("{at}: payload is no message the workload made"));
            return None;
        };
        let msg = &self.msgs[id as usize];
        let problem = if msg.payload != record.payload || msg.key != record.key {
            Some((inv::CORRUPT, "payload or key differs from what was produced"))
        } else if key.is_some_and(|key| !msg.reached(key.topic)) {
            Some((inv::PHANTOM, "message was staged for another topic incarnation"))
        } else if !msg.sent {
            Some((inv::PHANTOM, "message was never sent"))
        } else if !msg.acked && !msg.ambiguous && self.answers_cross_a_network {
            // An answer may still be on its way: judged once every answer is in (`verdict`).
            self.half_applied_suspects.push((id, at.clone()));
            None
        } else if !msg.acked && !msg.ambiguous {
            Some((inv::HALF_APPLIED, "every attempt was rejected, yet the record is visible"))
        } else {
            None
        };
        if let Some((invariant, what)) = problem {
            self.violation(invariant, format!("{at}: message {id}: {what}"));
            return None;
        }
        Some(id)
    }

    /// Records read while no answer to their message had arrived (second tier): a violation
    /// if every attempt ended rejected after all.
    pub(super) fn judge_half_applied_suspects(&mut self) {
        for (id, at) in std::mem::take(&mut self.half_applied_suspects) {
            let msg = &self.msgs[id as usize];
            if !msg.acked && !msg.ambiguous {
                let what = "every attempt was rejected, yet the record is visible";
                self.violation(inv::HALF_APPLIED, format!("{at}: message {id}: {what}"));
            }
        }
    }
}
