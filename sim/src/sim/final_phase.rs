//! The end of a run: heal every fault (disks, network, processes), restart what is down or
//! latched, let every node's dispatch backlog drain (liveness, bounded in simulated time), let
//! the cluster settle, check each node's WAL disk bound, then read every partition of every live
//! topic in full (`final_read`), check each partition's oldest unacked message (`final_lag`)
//! and, in queue seeds, drain every topic (`final_queue`).
//! Optionally cut the power of one node once more and re-read: nothing that was visible may
//! vanish or change.

use narad_core::constants::WAL_ROTATE_DISPATCHED_BYTES;
use narad_core::{FileId, Input, Instant};
use rand::RngExt;

use super::Simulation;
use crate::checker::{ReadKind, inv};
use crate::trace::What;

/// Simulated time the backlog gets to drain once faults are healed (one node).
const DRAIN_LIMIT_MICROS: u64 = 60_000_000;
/// The same for a cluster: a commit lost in a healed partition is retried only after its 30 s
/// timeout, and the metastore may first have to elect a leader.
const CLUSTER_DRAIN_LIMIT_MICROS: u64 = 120_000_000;
/// Idle time after the drain for the checkpoint to become durable and the WAL to be compacted.
const SETTLE_MICROS: u64 = 1_500_000;
/// How long the cluster gets to be ready again after the final power loss.
const RECHECK_READY_MICROS: u64 = 30_000_000;

impl Simulation {
    /// Heal, drain, check. Returns whether the final read could run.
    pub(super) fn final_phase(&mut self) -> bool {
        self.world.record(0, What::Phase { name: "heal" });
        self.heal();
        let now = self.world.queue.now();
        let (limit, every) = if self.nodes() > 1 {
            (CLUSTER_DRAIN_LIMIT_MICROS, 50_000)
        } else {
            (DRAIN_LIMIT_MICROS, 10_000)
        };
        let drained = self.run_until(Instant(now.0 + limit), every, |s| s.drained());
        if !self.hosts.iter().all(|h| h.is_up()) {
            if self.nodes() == 1 {
                return false;
            }
            // A node whose recovery refused its damaged disk stays down (a violation unless a
            // corruption-class fault hit): the others are still read and checked.
            self.lost_nodes =
                (0..self.nodes()).filter(|&n| !self.hosts[n].is_up()).fold(0, |m, n| m | 1 << n);
            if 2 * self.lost_nodes.count_ones() as usize >= self.nodes() {
                return false; // no quorum left: nothing can be rerouted or confirmed
            }
        }
        if !drained && !self.world.checker.corruption_hit {
            let detail = format!("{} {} s after faults healed", self.backlogs(), limit / 1_000_000);
            self.world.checker.violation(inv::LIVENESS, detail);
        }
        let now = self.world.queue.now();
        self.run_to(Instant(now.0 + SETTLE_MICROS));
        if drained {
            self.check_wal_bound();
        }
        self.world.record(0, What::Phase { name: "final-read" });
        self.final_read(ReadKind::Final);
        self.check_oldest_unacked();
        self.queue_drain();
        if self.cfg.workload.queue_max_deliveries.is_some() && !self.aborted {
            // The drain's receives moved messages too: once dispatch has taken their copies to
            // the dead-letter topic, read it again.
            // (The last moves' copies may still be in a group commit when the drain ends:
            // settle as before the first read, so that no commit races the read.)
            let now = self.world.queue.now();
            self.run_to(Instant(now.0 + SETTLE_MICROS));
            let now = self.world.queue.now();
            self.run_until(Instant(now.0 + limit), every, |s| s.drained());
            let now = self.world.queue.now();
            self.run_to(Instant(now.0 + SETTLE_MICROS));
            self.reread_dead_letters();
        }
        if self.cfg.faults.final_power_loss && self.lost_nodes == 0 {
            self.final_power_loss();
        }
        true
    }

    fn final_power_loss(&mut self) {
        self.world.record(0, What::Phase { name: "final-power-loss" });
        let victim =
            if self.nodes() > 1 { self.world.fault_rng.random_range(0..self.nodes()) } else { 0 };
        self.crash(victim, true, true);
        self.restart(victim);
        let now = self.world.queue.now();
        let limit = if self.nodes() > 1 { RECHECK_READY_MICROS } else { 5_000_000 };
        self.run_until(Instant(now.0 + limit), 1_000, |s| s.ready());
        if self.hosts.iter().all(|h| h.is_up()) {
            self.final_read(ReadKind::Recheck);
        }
    }

    fn heal(&mut self) {
        self.world.healed = true;
        self.world.armed_crash = None;
        self.world.workload.stop();
        for disk in &mut self.world.disks {
            disk.heal();
        }
        self.heal_network();
        let now = self.world.queue.now();
        for n in 0..self.nodes() {
            self.hosts[n].resume(now, &mut self.world);
            self.restart(n);
        }
        // Each latched node with the incarnation we shut down: a graceful restart already under
        // way may replace it meanwhile, and the fresh incarnation is not ours to wait for.
        let latched: Vec<(usize, u32)> = (0..self.nodes())
            .filter(|&n| self.world.checker.is_latched(n as u32) && self.hosts[n].is_up())
            .map(|n| (n, self.hosts[n].epoch()))
            .collect();
        if latched.is_empty() {
            return;
        }
        for &(n, _) in &latched {
            self.hosts[n].deliver(now, Input::BeginShutdown, &mut self.world);
        }
        let deadline = Instant(now.0 + 10_000_000);
        let shut = self.run_until(deadline, 1_000, |s| {
            latched.iter().all(|&(n, epoch)| {
                s.hosts[n].epoch() != epoch || s.hosts[n].node().is_none_or(|n| n.is_shut_down())
            })
        });
        if !shut {
            let detail = "graceful shutdown did not finish in 10 s".into();
            self.world.checker.violation(inv::LIVENESS, detail);
        }
        for &(n, epoch) in &latched {
            if self.hosts[n].epoch() == epoch {
                self.crash(n, false, false);
                self.restart(n);
            }
        }
    }

    /// Every node is up and ready.
    pub(super) fn ready(&self) -> bool {
        self.hosts.iter().all(|h| h.node().is_some_and(|n| n.is_ready()))
    }

    /// Every running node is ready with an empty dispatch backlog.
    fn drained(&self) -> bool {
        self.hosts
            .iter()
            .all(|h| h.node().is_none_or(|n| n.is_ready() && n.stats().dispatch_backlog == 0))
    }

    /// What is not drained yet, per node, for the liveness report.
    fn backlogs(&self) -> String {
        let parts: Vec<String> = self
            .hosts
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let node = h.node()?;
                let backlog = node.stats().dispatch_backlog;
                (backlog > 0 || !node.is_ready())
                    .then(|| format!("n{i}: backlog {backlog}, ready {}", node.is_ready()))
            })
            .collect();
        format!("dispatch not drained ({})", parts.join("; "))
    }

    /// Invariant 8: after the drain, each running node's WAL is < 1 MiB plus one segment in
    /// rotation, plus the zeros pre-written ahead of it (less than one and a half chunks: a
    /// chunk is written when less than half of one is left).
    fn check_wal_bound(&mut self) {
        let prewritten = self.cfg.sizes.wal_prewrite_chunk_bytes * 3 / 2;
        // A node lost to a damaged disk is not running: its WAL is nobody's to compact.
        for n in (0..self.nodes()).filter(|&n| self.hosts[n].is_up()) {
            let segments: Vec<u64> = self.world.disks[n]
                .files()
                .filter(|(id, _)| matches!(id, FileId::WalSegment { .. }))
                .map(|(_, f)| f.len())
                .collect();
            let newest = segments.last().copied().unwrap_or(0);
            if segments.len() > 2 || newest >= WAL_ROTATE_DISPATCHED_BYTES + prewritten {
                let detail = format!(
                    "n{n} after drain: {} WAL segments, sizes {segments:?}",
                    segments.len()
                );
                self.world.checker.violation(inv::WAL_BOUND, detail);
            }
        }
    }
}
