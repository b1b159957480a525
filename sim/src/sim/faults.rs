//! Applying faults: process crashes and power losses (with the restart that follows), pauses,
//! graceful restarts, disk switches, exits (a fatal error, a failed start-up read) followed by a
//! later restart, and the damage reports corruption-class faults file with the checker (which
//! records they hit and which partition logs forgot acknowledged bytes).

use narad_core::{DiskOp, Input, Instant, IoToken};
use narad_sim_runtime::FaultClass;

use super::world::ArmedCrash;
use super::{Event, Simulation};
use crate::checker::inv;
use crate::schedule::FaultAction;
use crate::trace::{DoneCode, OpKind, What};
use rand::RngExt;

impl Simulation {
    /// Pauses (or resumes) node `n`; the checker hears of it (a paused node's answers have no
    /// delay bound).
    fn pause(&mut self, n: usize, pause: bool) {
        if pause {
            if self.hosts[n].is_up() && !self.hosts[n].is_paused() {
                self.world.hit(FaultClass::Pause);
                self.world.checker.disturbance(true);
                self.hosts[n].pause();
            }
        } else {
            if self.hosts[n].is_paused() {
                self.world.checker.disturbance(false);
            }
            let now = self.world.queue.now();
            self.hosts[n].resume(now, &mut self.world);
        }
    }

    pub(super) fn apply_fault(&mut self, node: u32, action: FaultAction) {
        let n = node as usize;
        self.world.record(node, What::Fault { action: action_name(&action) });
        if self.apply_net_fault(&action) {
            return;
        }
        if action.apply_to_disk(&mut self.world.disks[n].faults) {
            return;
        }
        match action {
            FaultAction::ProcessCrash => self.crash(n, false, true),
            FaultAction::PowerLoss => self.crash(n, true, true),
            FaultAction::Restart => self.restart(n),
            FaultAction::GracefulRestart => self.begin_graceful_restart(n),
            FaultAction::Pause => self.pause(n, true),
            FaultAction::Resume => self.pause(n, false),
            FaultAction::BitFlip => {
                self.world.disks[n].bit_flip_at_rest();
                crate::observe::collect_damage(&mut self.world.checker, &mut self.world.disks[n]);
            }
            FaultAction::CrashAfterNextSync { target, power } => {
                let after = OpKind::Sync;
                self.world.armed_crash = Some(ArmedCrash { node, target, power, after });
            }
            FaultAction::PowerLossAfterNextWrite(target) => {
                let (power, after) = (true, OpKind::Write);
                self.world.armed_crash = Some(ArmedCrash { node, target, power, after });
            }
            FaultAction::PowerLossAfterNextDelete(target) => {
                let (power, after) = (true, OpKind::Delete);
                self.world.armed_crash = Some(ArmedCrash { node, target, power, after });
            }
            FaultAction::DeleteTopic(name) => {
                self.world.workload.request_delete(&name);
                self.world.wake_client(0, 0);
            }
            FaultAction::CreateTopic(name) => {
                self.world.workload.request_create(&name);
                self.world.wake_client(0, 0);
            }
            FaultAction::Route { clients, admin } => self.world.pinned = (clients, admin),
            FaultAction::Die { power } => {
                if self.hosts[n].is_up() {
                    self.world.hit(FaultClass::NodeDeath);
                    self.crash(n, power, true);
                }
            }
            FaultAction::Partition { .. }
            | FaultAction::OneWay { .. }
            | FaultAction::IsolateLeader { .. }
            | FaultAction::Clog { .. }
            | FaultAction::NetHeal { .. } => unreachable!("network actions are applied above"),
            FaultAction::DiskFull(_)
            | FaultAction::Slow(_)
            | FaultAction::FailNextSync(_)
            | FaultAction::FailNextWrite(_)
            | FaultAction::TornNextWrite(_)
            | FaultAction::MisdirectNextWrite(..)
            | FaultAction::LieOn(_)
            | FaultAction::Failing(_) => unreachable!("disk knobs are applied above"),
        }
    }

    /// Kills node `n` (and with `power`, drops what its disk had not synced).
    pub(super) fn crash(&mut self, n: usize, power: bool, count: bool) {
        let was_up = self.hosts[n].is_up();
        if !was_up && !power {
            return;
        }
        if count {
            self.world.hit(if power { FaultClass::PowerLoss } else { FaultClass::ProcessCrash });
        }
        if let Some(node) = self.hosts[n].node() {
            self.world.totals.add(&node.stats());
        }
        if was_up {
            self.world.checker.loss(true);
            self.down_for_loss |= 1 << n;
        }
        self.hosts[n].crash();
        self.world.running[n] = None;
        self.world.disks[n].process_crash();
        if power {
            self.world.disks[n].power_loss();
            crate::observe::collect_damage(&mut self.world.checker, &mut self.world.disks[n]);
        }
        self.world.checker.on_crash(n as u32);
        self.world.latch_restart_pending[n] = false;
        if was_up {
            let checker = &mut self.world.checker;
            for (client, delay) in self.world.workload.on_node_down(n as u32, checker) {
                self.world.wake_client(client, delay);
            }
        }
    }

    /// Starts node `n` from what its disk holds (if it is down).
    pub(super) fn restart(&mut self, n: usize) {
        if self.hosts[n].is_up() {
            return;
        }
        let now = self.world.queue.now();
        let files = match self.world.disks[n].read_at_start() {
            Ok(files) => files,
            Err(_) => return self.exit_and_restart_later(n, "start-read-failed"),
        };
        self.world.checker.recovered_origins(n as u32, &crate::observe::recovered_origins(&files));
        match self.hosts[n].start(now, files, &mut self.world) {
            Ok(()) => {
                let adopted = self.hosts[n].node().map_or(0, |node| node.recovered_segments().0);
                if adopted > 0 {
                    self.world.hit(FaultClass::PartitionSealAdopted);
                }
                self.world.running[n] = Some(self.hosts[n].epoch());
                if self.down_for_loss & (1 << n) != 0 {
                    self.down_for_loss &= !(1 << n);
                    self.world.checker.loss(false);
                }
                // The checker learns the recovered watermarks when the node is ready
                // (`HostRuntime::ready`): before its start-up syncs nothing it read is served.
                self.world.record(n as u32, What::Started { ok: true });
            }
            Err(e) => {
                self.world.record(n as u32, What::Started { ok: false });
                self.world.checker.recovery_failed(e.to_string());
            }
        }
    }

    /// The process stops by itself (`reason`: a start-up read failed, or the node reported a
    /// fatal error), as the production runtime exits 1; a supervisor starts it again a little
    /// later. Not counted as a crash: the fault that caused it is.
    pub(super) fn exit_and_restart_later(&mut self, n: usize, reason: &'static str) {
        let node = n as u32;
        self.world.record(node, What::Fault { action: reason });
        if self.hosts[n].is_up() {
            self.land_handed_over(n);
            self.crash(n, false, false);
        }
        let down = self.world.fault_rng.random_range(1_000..100_000);
        let event = Event::Fault { node, action: FaultAction::Restart, scheduled: false };
        self.world.queue.push_after(down, event);
    }

    /// A process exits with disk operations in flight: its disk still lands a prefix of each
    /// file's (`SimDisk::complete_handed_over`), and nobody hears of them.
    fn land_handed_over(&mut self, n: usize) {
        let (node, epoch) = (n as u32, self.hosts[n].epoch());
        let mine = |e: &Event| matches!(e, Event::Disk { node: m, epoch: x, .. } if *m == node && *x == epoch);
        let taken = self.world.queue.take_where(mine);
        let ops: Vec<(IoToken, DiskOp)> = taken
            .into_iter()
            .filter_map(|e| match e {
                Event::Disk { token, op, .. } => Some((token, op)),
                _ => None,
            })
            .collect();
        let just_ops: Vec<DiskOp> = ops.iter().map(|(_, op)| op.clone()).collect();
        for (i, result) in self.world.disks[n].complete_handed_over(&just_ops) {
            let (token, op) = &ops[i];
            crate::observe::note_partition_tail(&mut self.world.checker, op);
            let (kind, _, _) = OpKind::of(op);
            let (token, file, result) = (token.0, op.file(), DoneCode::of(&result));
            self.world.record(node, What::DiskDone { token, kind, file, result });
        }
        crate::observe::collect_damage(&mut self.world.checker, &mut self.world.disks[n]);
    }

    fn begin_graceful_restart(&mut self, n: usize) {
        if !self.hosts[n].is_up() {
            return;
        }
        self.world.hit(FaultClass::Restart);
        let now = self.world.queue.now();
        self.hosts[n].deliver(now, Input::BeginShutdown, &mut self.world);
        let deadline = Instant(now.0 + 10_000_000);
        let (node, epoch) = (n as u32, self.hosts[n].epoch());
        self.world.queue.push_after(1_000, Event::ShutdownCheck { node, epoch, deadline });
    }

    /// Polls a graceful shutdown of incarnation `epoch` (a later incarnation is not ours).
    pub(super) fn shutdown_check(&mut self, node: u32, epoch: u32, deadline: Instant) {
        let n = node as usize;
        let Some(state) = self.hosts[n].node().filter(|_| self.hosts[n].epoch() == epoch) else {
            return;
        };
        let shut_down = state.is_shut_down();
        if !shut_down && self.world.queue.now() < deadline {
            self.world.queue.push_after(5_000, Event::ShutdownCheck { node, epoch, deadline });
            return;
        }
        if !shut_down && self.world.healed {
            self.world
                .checker
                .violation(inv::LIVENESS, "graceful shutdown did not finish in 10 s".into());
        }
        self.crash(n, false, false);
        self.restart(n);
    }
}

/// Trace name of a fault action.
pub fn action_name(action: &FaultAction) -> &'static str {
    match action {
        FaultAction::ProcessCrash => "process-crash",
        FaultAction::PowerLoss => "power-loss",
        FaultAction::Restart => "restart",
        FaultAction::GracefulRestart => "graceful-restart",
        FaultAction::Pause => "pause",
        FaultAction::Resume => "resume",
        FaultAction::DiskFull(true) => "disk-full",
        FaultAction::DiskFull(false) => "disk-full-cleared",
        FaultAction::Slow(1) => "disk-healthy",
        FaultAction::Slow(_) => "disk-slow",
        FaultAction::FailNextSync(_) => "fail-next-sync",
        FaultAction::FailNextWrite(_) => "fail-next-write",
        FaultAction::TornNextWrite(_) => "torn-next-write",
        FaultAction::MisdirectNextWrite(..) => "misdirect-next-write",
        FaultAction::LieOn(Some(_)) => "fsync-lies",
        FaultAction::LieOn(None) => "fsync-honest",
        FaultAction::Failing(Some(_)) => "files-stuck",
        FaultAction::Failing(None) => "files-unstuck",
        FaultAction::BitFlip => "bit-flip",
        FaultAction::CrashAfterNextSync { .. } => "arm-crash-after-sync",
        FaultAction::PowerLossAfterNextWrite(_) => "arm-power-loss-after-write",
        FaultAction::PowerLossAfterNextDelete(_) => "arm-power-loss-after-delete",
        FaultAction::DeleteTopic(_) => "delete-topic",
        FaultAction::CreateTopic(_) => "create-topic",
        FaultAction::Route { .. } => "route-clients",
        FaultAction::Die { .. } => "node-dies",
        FaultAction::Partition { .. } => "partition",
        FaultAction::OneWay { .. } => "one-way-partition",
        FaultAction::IsolateLeader { .. } => "isolate-leader",
        FaultAction::Clog { .. } => "clog",
        FaultAction::NetHeal { .. } => "net-heal",
    }
}
