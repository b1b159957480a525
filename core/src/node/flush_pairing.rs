//! Flush pairing: a lone producer's partition work waits briefly for the next WAL group commit.
//!
//! With one producer, each group commit carries one request, and the records it made durable
//! reach their partition a commit each. A partition fsync issued on its own delays the next
//! group commit's fsync by a whole device flush (measured on one client: 4.2–5.0k msg/s with
//! partition fsyncs, 6.0–6.7k without). So after a group commit of a single produce, disk
//! operations on partition files are held (at most `Config::flush_pairing_us`) and released just
//! before the next group commit's operations: both fsyncs then reach the device together and can
//! share a flush. When the hold expires first, the work goes on alone.
//!
//! Under load a group commit carries many produces and nothing is held: commits stream to the
//! partitions while the next group commit runs. Held operations keep their order (a delete of a
//! partition file never overtakes a write to it) and are already in `Node::io`, so shutdown
//! releases them at once and waits for them like any other.

use super::{IoPurpose, Node};
use crate::ids::Instant;
use crate::io::{Effect, FileId};
use crate::wal::WalIo;

/// The hold (see the module docs).
#[derive(Debug, Default)]
pub(super) struct FlushPairing {
    /// Partition work emitted before this instant is held; `None`: not holding.
    until: Option<Instant>,
    /// Held disk effects, in emission order.
    held: Vec<Effect>,
}

impl FlushPairing {
    /// When the held work must go even if no group commit came (for `poll_timeout`).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.until.filter(|_| !self.held.is_empty())
    }

    /// Held work is partition work under a hold that has not expired at `now`, and nothing is
    /// held once a shutdown began (`is_shut_down` would wait for it forever).
    pub(super) fn check(&self, now: Instant, shutting_down: bool) -> Result<(), String> {
        if self.held.is_empty() {
            return Ok(());
        }
        if shutting_down {
            return Err(format!("{} partition operations held during shutdown", self.held.len()));
        }
        match self.until {
            Some(until) if now < until => {}
            until => {
                return Err(format!("partition work held past its hold ({until:?} at {now:?})"));
            }
        }
        let foreign = self.held.iter().find_map(|effect| match effect {
            Effect::Disk { op, .. } if is_partition_file(op.file()) => None,
            Effect::Disk { op, .. } => Some(op.file().relative_path()),
            _ => Some("an effect that is not disk work".to_string()),
        });
        match foreign {
            Some(what) => Err(format!("held for the WAL but not partition work: {what}")),
            None => Ok(()),
        }
    }
}

impl Node {
    /// Queues a disk effect, holding it if it is partition work behind a lone group commit.
    pub(super) fn push_disk_effect(&mut self, purpose: &IoPurpose, effect: Effect) {
        if matches!(purpose, IoPurpose::Wal(WalIo::Batch)) {
            // Held work goes before a group commit's operations: its fsyncs then reach the
            // device with this one and share a flush.
            self.release_held_partition_work();
        }
        // No hold starts once a shutdown began, and `BeginShutdown` ends the one in force.
        let holding = self.pairing.until.is_some_and(|until| self.now < until);
        let partition_file =
            matches!(&effect, Effect::Disk { op, .. } if is_partition_file(op.file()));
        if holding && partition_file {
            self.pairing.held.push(effect);
        } else {
            self.effects.push_back(effect);
        }
    }

    /// A group commit completed: if it carried a single produce, the partition work its records
    /// now cause is held for the next one.
    pub(super) fn on_group_commit_done(&mut self, produces: usize) {
        let hold_us = self.config.flush_pairing_us;
        if produces == 1 && hold_us > 0 && !self.shutting_down {
            self.pairing.until = Some(self.now.plus_micros(hold_us));
        }
    }

    /// Emits every held operation, in order, and ends the hold.
    pub(super) fn release_held_partition_work(&mut self) {
        self.pairing.until = None;
        self.effects.extend(self.pairing.held.drain(..));
    }

    /// At every pump: the hold expired with no group commit to pair with.
    pub(super) fn expire_flush_pairing(&mut self) {
        if self.pairing.until.is_some_and(|until| until <= self.now) {
            self.release_held_partition_work();
        }
    }
}

fn is_partition_file(file: FileId) -> bool {
    matches!(file, FileId::PartitionSegment { .. } | FileId::PartitionSeal { .. })
}
