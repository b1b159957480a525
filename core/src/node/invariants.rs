//! `Node::check_invariants`: white-box checks of the node's internal consistency, cheap enough
//! to run after every simulated step (the simulator's `NodeHost` does; a failure is a run
//! violation). Each component checks its own bookkeeping (`Wal`, `Dispatcher`, `PartitionLog`);
//! this file checks how they fit together: the sequence chain from the WAL checkpoint to the next
//! sequence, every disk operation in flight known to the component that waits for it, every
//! commit in flight known on both sides, and every internal queue within its bound.

use std::collections::BTreeMap;

use super::owner::ReplyTo;
use super::{
    DEFERRED_CLIENT_MAX, DEFERRED_PEER_MAX, Deferred, EVENT_QUEUE_MAX, IoPurpose, Node,
    PEER_COMMIT_JOBS_MAX, PEER_REQUESTS_MAX, PRODUCE_WAITERS_MAX,
};
use crate::constants::COMMIT_FANOUT;
use crate::ids::PartitionKey;
use crate::partition::PartIo;
use crate::wal::WalIo;

impl Node {
    /// Checks the node's internal consistency; `Err` names what broke. Costs a walk of the
    /// operations in flight and of the commit jobs (both small) plus a few look-ups;
    /// `check_invariants_deep` adds the walks over every partition log held (thousands in a
    /// cluster with large topics) and over the dispatcher's window.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_sequences()?;
        self.wal.check_invariants()?;
        self.dispatcher.check()?;
        self.meta.check_invariants()?;
        self.check_io()?;
        self.check_commits()?;
        self.check_consumers(false)?;
        self.parked.check()?;
        self.check_log_deletes()?;
        self.pairing.check(self.now, self.shutting_down)?;
        self.check_bounds()
    }

    fn check_log_deletes(&self) -> Result<(), String> {
        let in_flight: Vec<PartitionKey> = self
            .io
            .values()
            .filter_map(|purpose| match purpose {
                IoPurpose::FileDelete(key) => Some(*key),
                _ => None,
            })
            .collect();
        self.log_deletes.check(&in_flight)
    }

    fn check_consumers(&self, deep: bool) -> Result<(), String> {
        let journal_ios =
            self.io.values().filter(|purpose| matches!(purpose, IoPurpose::Journal(_))).count();
        self.consumers.check(journal_ios, deep)?;
        let probes: Vec<PartitionKey> = self
            .io
            .values()
            .filter_map(|purpose| match purpose {
                IoPurpose::OldestProbe { key, .. } => Some(*key),
                _ => None,
            })
            .collect();
        self.consumers.oldest.check(&probes, |key| self.first_unsettled(key))
    }

    /// `check_invariants` plus every partition log (watermark within its committed bytes, its
    /// operations in flight, its jobs) and the dispatcher's held records and destinations.
    pub fn check_invariants_deep(&self) -> Result<(), String> {
        self.check_invariants()?;
        self.check_consumers(true)?;
        for log in self.partitions.values() {
            log.check_invariants()?;
        }
        self.check_partition_io()?;
        self.check_jobs()?;
        self.dispatcher.check_deep()
    }

    /// WAL durable checkpoint ≤ checkpoint target ≤ first undone sequence (the dispatcher's
    /// checkpoint) ≤ dispatcher read position = WAL cursor ≤ durable sequence.
    fn check_sequences(&self) -> Result<(), String> {
        let durable_checkpoint = self.wal.durable_checkpoint();
        let first_undone = self.dispatcher.checkpoint();
        let (upto, cursor) = (self.dispatcher.read_upto(), self.wal.cursor_seq());
        let durable = self.wal.durable_seq();
        if durable_checkpoint > first_undone || first_undone > upto || upto > durable {
            return Err(format!(
                "sequences: durable checkpoint {durable_checkpoint} ≤ first undone \
                 {first_undone} ≤ read {upto} ≤ durable {durable} broken"
            ));
        }
        if upto != cursor {
            return Err(format!("sequences: dispatcher read up to {upto}, WAL cursor at {cursor}"));
        }
        Ok(())
    }

    /// Every token in `io` was issued, and each component waits for exactly the operations of
    /// its own that are in flight.
    fn check_io(&self) -> Result<(), String> {
        if self.io.keys().next_back().is_some_and(|t| t.0 >= self.next_token) {
            return Err(format!("io: token past next token {}", self.next_token));
        }
        let mut wal = crate::wal::invariants::OutstandingIo::default();
        let mut syncs = 0;
        for purpose in self.io.values() {
            match purpose {
                IoPurpose::Wal(WalIo::Batch) => wal.batch += 1,
                IoPurpose::Wal(WalIo::Checkpoint | WalIo::CheckpointCreate) => wal.checkpoint += 1,
                IoPurpose::Wal(WalIo::CursorRead { .. }) => wal.cursor_reads += 1,
                IoPurpose::Wal(WalIo::Repair) => wal.repairs += 1,
                IoPurpose::Wal(WalIo::Prewrite) => wal.prewrites += 1,
                IoPurpose::StartupSync(_) | IoPurpose::StartupDelete(_) => syncs += 1,
                IoPurpose::Wal(WalIo::Delete)
                | IoPurpose::Partition(..)
                | IoPurpose::Meta(_)
                | IoPurpose::Consume { .. }
                | IoPurpose::Journal(_)
                | IoPurpose::QueueRead { .. }
                | IoPurpose::OldestProbe { .. }
                | IoPurpose::FileDelete(_) => {}
            }
        }
        if wal != self.wal.outstanding_io() {
            let expected = self.wal.outstanding_io();
            return Err(format!(
                "io: WAL operations in flight {wal:?}, WAL waits for {expected:?}"
            ));
        }
        if syncs != self.startup_syncs_left {
            let left = self.startup_syncs_left;
            return Err(format!("io: {syncs} start-up syncs in flight, {left} awaited"));
        }
        Ok(())
    }

    /// Partition operations in flight match what each log held here waits for (a log dropped
    /// with its topic may leave completions behind: they are ignored).
    fn check_partition_io(&self) -> Result<(), String> {
        let mut parts: BTreeMap<PartitionKey, (u32, u32, u32, u32)> = BTreeMap::new();
        for purpose in self.io.values() {
            if let IoPurpose::Partition(key, io) = purpose {
                let entry = parts.entry(*key).or_default();
                match io {
                    PartIo::Commit => entry.0 += 1,
                    PartIo::Repair => entry.1 += 1,
                    PartIo::Trim => entry.2 += 1,
                    PartIo::Seal { .. } => entry.3 += 1,
                }
            }
        }
        for (key, log) in &self.partitions {
            let waits = log.outstanding();
            let flying = parts.get(key).copied().unwrap_or_default();
            if flying != (waits.commit, waits.repair, waits.trim, waits.seal) {
                return Err(format!("io: {key} has {flying:?} in flight, log waits for {waits:?}"));
            }
        }
        Ok(())
    }

    /// Every commit the dispatcher has in flight is a remote commit or a local job, and vice
    /// versa.
    fn check_commits(&self) -> Result<(), String> {
        let mut local = 0;
        for job in self.jobs.values() {
            if let ReplyTo::Dispatcher(id) = job.reply_to() {
                local += 1;
                if !self.dispatcher.is_in_flight(id) || self.remote.commits.contains_key(&id) {
                    return Err(format!("commits: job for commit {} the dispatcher lost", id.0));
                }
            }
        }
        if let Some(id) = self.remote.commits.keys().find(|id| !self.dispatcher.is_in_flight(**id))
        {
            return Err(format!("commits: remote commit {} not in the dispatcher", id.0));
        }
        let in_flight = self.dispatcher.commits_in_flight();
        if in_flight != local + self.remote.commits.len() {
            let remote = self.remote.commits.len();
            return Err(format!(
                "commits: {in_flight} in flight ≠ {local} local + {remote} remote"
            ));
        }
        Ok(())
    }

    /// Every job is queued or part of its partition's commit in progress.
    fn check_jobs(&self) -> Result<(), String> {
        let queued: usize = self.commit_queue.values().map(Vec::len).sum();
        let running: usize = self.partitions.values().map(|log| log.outstanding().parts).sum();
        if self.jobs.len() != queued + running {
            let jobs = self.jobs.len();
            return Err(format!("commits: {jobs} jobs ≠ {queued} queued + {running} running"));
        }
        Ok(())
    }

    /// Internal queues within their bounds.
    fn check_bounds(&self) -> Result<(), String> {
        let peers = self.deferred.iter().filter(|d| matches!(d, Deferred::Peer(..))).count();
        let clients = self.deferred.len() - peers;
        let remote = &self.remote;
        let pending = remote.forwards.len() + remote.settling.len() + remote.topic_stats.len();
        let bounds = [
            ("deferred peer messages", peers, DEFERRED_PEER_MAX),
            ("deferred client requests", clients, DEFERRED_CLIENT_MAX),
            ("events", self.events.len(), EVENT_QUEUE_MAX),
            ("produce waiters", self.wal.produce_waiters(), PRODUCE_WAITERS_MAX),
            ("requests to peers", pending, PEER_REQUESTS_MAX),
            ("commit jobs", self.jobs.len(), PEER_COMMIT_JOBS_MAX + COMMIT_FANOUT),
        ];
        match bounds.into_iter().find(|(_, len, max)| len > max) {
            Some((what, len, max)) => Err(format!("bounds: {len} {what}, bound {max}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
