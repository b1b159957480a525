//! The first tier's fault schedule, applied to tier-2 hosts from the harness loop (between
//! turmoil steps): crashes and power losses are `Sim::crash` plus the disk's crash model,
//! restarts `Sim::bounce`, graceful restarts a stop request to the running process, disk knobs go
//! to the node's `SimDisk`, and network windows become turmoil partitions (both ways or one way)
//! and holds, counted per link so that overlapping windows heal only what they cut. Actions this
//! tier cannot express (a paused process, the metastore leader's isolation, crashes armed on a
//! precise disk operation) are traced as skipped.

use std::collections::BTreeMap;

use narad_sim_runtime::{FaultClass, Link};
use rand::RngExt;

use super::host::host_name;
use super::world::{Exit, Shared, World2, lock};
use crate::observe;
use crate::schedule::{FaultAction, group_links, one_way_links};
use crate::sim::action_name;
use crate::trace::What;

/// How a window touches its links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    Both,
    OneWay,
    Hold,
}

/// The network windows open, and how many of them cut or hold each link.
#[derive(Default)]
pub struct Windows {
    open: BTreeMap<u32, (Vec<Link>, Cut)>,
    cuts: BTreeMap<(Link, u8), u32>,
}

/// Applies scheduled faults to one run's hosts.
pub struct Faults<'s, 'a> {
    pub sim: &'s mut turmoil::Sim<'a>,
    pub world: &'s Shared,
    pub windows: &'s mut Windows,
    pub nodes: u32,
}

impl Faults<'_, '_> {
    /// Applies `action` to node `n` at simulated time `at`.
    pub fn apply(&mut self, at: narad_core::Instant, n: u32, action: &FaultAction) {
        let name = action_name(action);
        lock(self.world).record_at(at, n, What::Fault { action: name });
        if self.network(action) {
            return;
        }
        {
            let mut w = lock(self.world);
            if action.apply_to_disk(&mut w.nodes[n as usize].disk.faults) {
                return;
            }
        }
        match action {
            FaultAction::ProcessCrash => self.crash(at, n, false),
            FaultAction::PowerLoss => self.crash(at, n, true),
            FaultAction::Die { power } => {
                if lock(self.world).nodes[n as usize].up {
                    lock(self.world).hit(FaultClass::NodeDeath);
                    self.crash(at, n, *power);
                }
            }
            FaultAction::Restart => self.restart(n),
            FaultAction::GracefulRestart => self.graceful_restart(n),
            FaultAction::BitFlip => {
                let mut w = lock(self.world);
                let w = &mut *w;
                let slot = &mut w.nodes[n as usize];
                slot.disk.bit_flip_at_rest();
                w.checker.set_now(at);
                observe::collect_damage(&mut w.checker, &mut slot.disk);
            }
            _ => lock(self.world).record_at(at, n, What::Fault { action: "skipped-in-tier-2" }),
        }
    }

    /// A process that exited is gone (its host's runtime is dropped) and starts again: at once
    /// after a graceful stop, 1 to 100 ms later after exiting by itself, as under a supervisor.
    pub fn supervise(&mut self, at: narad_core::Instant, rng: &mut rand_chacha::ChaCha8Rng) {
        for n in 0..self.nodes {
            let exited = lock(self.world).nodes[n as usize].exited.take();
            if let Some(exit) = exited {
                self.kill(at, n, false, false);
                let delay = match exit {
                    Exit::Graceful => 0,
                    Exit::Early => rng.random_range(1_000..100_000),
                };
                lock(self.world).nodes[n as usize].restart_at = Some(at.plus_micros(delay));
            }
            let due = lock(self.world).nodes[n as usize].restart_at.is_some_and(|t| t <= at);
            if due {
                lock(self.world).nodes[n as usize].restart_at = None;
                self.restart(n);
            }
        }
    }

    /// Kills node `n`'s process (and with `power`, drops what its disk had not synced).
    pub fn crash(&mut self, at: narad_core::Instant, n: u32, power: bool) {
        self.kill(at, n, power, true);
    }

    fn kill(&mut self, at: narad_core::Instant, n: u32, power: bool, count: bool) {
        let was_up = lock(self.world).nodes[n as usize].up;
        if !was_up && !power && count {
            return;
        }
        self.sim.crash(host_name(n));
        let mut w = lock(self.world);
        let w = &mut *w;
        if count {
            w.hits.hit(if power { FaultClass::PowerLoss } else { FaultClass::ProcessCrash });
        }
        let slot = &mut w.nodes[n as usize];
        slot.up = false;
        slot.serving = false;
        slot.stop = None;
        slot.stop_at_wal_sync = None; // armed for the process that is gone
        slot.disk.process_crash();
        w.checker.set_now(at);
        if power {
            slot.disk.power_loss();
            observe::collect_damage(&mut w.checker, &mut slot.disk);
        }
        if (was_up || !count) && w.down_for_loss & (1 << n) == 0 {
            w.checker.loss(true); // what was in flight to or from it is gone
            w.down_for_loss |= 1 << n;
        }
        w.checker.on_crash(n);
        w.peers.life(n, at.0);
    }

    /// Starts node `n` again if it is down.
    pub fn restart(&mut self, n: u32) {
        let mut w = lock(self.world);
        if w.nodes[n as usize].up {
            return;
        }
        w.nodes[n as usize].restart_at = None;
        if w.down_for_loss & (1 << n) != 0 {
            w.down_for_loss &= !(1 << n);
            w.checker.loss(false);
        }
        drop(w);
        self.sim.bounce(host_name(n));
    }

    /// Asks node `n`'s process to stop gracefully (it starts again at once).
    pub fn graceful_restart(&mut self, n: u32) {
        let mut w = lock(self.world);
        w.nodes[n as usize].stop_at_wal_sync = None;
        stop_now(&mut w, n);
    }

    /// Asks node `n`'s process to stop gracefully once its driver submits the fsync of a WAL
    /// group commit, or at `deadline` if none comes.
    pub fn graceful_restart_in_group_commit(&mut self, n: u32, deadline: narad_core::Instant) {
        let mut w = lock(self.world);
        if w.nodes[n as usize].stop.is_some() {
            w.nodes[n as usize].stop_at_wal_sync = Some(deadline);
        }
    }

    /// Stops the processes whose armed graceful restart met no WAL fsync by its deadline.
    pub fn armed_stops_due(&mut self, at: narad_core::Instant) {
        let mut w = lock(self.world);
        for n in 0..self.nodes {
            if w.nodes[n as usize].stop_at_wal_sync.is_some_and(|deadline| deadline <= at) {
                w.nodes[n as usize].stop_at_wal_sync = None;
                stop_now(&mut w, n);
            }
        }
    }

    /// Applies a network action; false if `action` is not one.
    fn network(&mut self, action: &FaultAction) -> bool {
        let nodes = self.nodes;
        let (id, links, cut) = match action {
            FaultAction::Partition { id, group } => (*id, group_links(nodes, group), Cut::Both),
            FaultAction::OneWay { id, from, to } => (*id, one_way_links(from, to), Cut::OneWay),
            FaultAction::Clog { id, links } => (*id, links.clone(), Cut::Hold),
            FaultAction::NetHeal { id } => {
                self.end_window(*id);
                return true;
            }
            _ => return false,
        };
        self.open_window(id, links, cut);
        true
    }

    fn open_window(&mut self, id: u32, links: Vec<Link>, cut: Cut) {
        {
            let mut w = lock(self.world);
            // QUIC retransmits what a cut drops: a cut delays messages without bound, as a
            // hold does, besides losing what was in flight on a connection it ends.
            w.checker.disturbance(true);
            if cut != Cut::Hold {
                w.checker.loss(true);
            }
            w.hit(match cut {
                Cut::Both => FaultClass::Partition,
                Cut::OneWay => FaultClass::OneWayPartition,
                Cut::Hold => FaultClass::Clog,
            });
        }
        for &link in &links {
            let count = self.windows.cuts.entry((link, cut as u8)).or_default();
            *count += 1;
            if *count == 1 {
                self.set_link(link, cut, true);
            }
        }
        self.windows.open.insert(id, (links, cut));
    }

    fn end_window(&mut self, id: u32) {
        let Some((links, cut)) = self.windows.open.remove(&id) else { return };
        {
            let mut w = lock(self.world);
            w.checker.disturbance(false);
            if cut != Cut::Hold {
                w.checker.loss(false);
            }
        }
        for link in links {
            let count = self.windows.cuts.entry((link, cut as u8)).or_default();
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.set_link(link, cut, false);
            }
        }
    }

    fn set_link(&mut self, (a, b): Link, cut: Cut, on: bool) {
        let (a, b) = (host_name(a), host_name(b));
        match (cut, on) {
            (Cut::Both, true) => self.sim.partition(a, b),
            (Cut::Both, false) => self.sim.repair(a, b),
            (Cut::OneWay, true) => self.sim.partition_oneway(a, b),
            (Cut::OneWay, false) => self.sim.repair_oneway(a, b),
            (Cut::Hold, true) => self.sim.hold(a, b),
            (Cut::Hold, false) => self.sim.release(a, b),
        }
    }

    /// The heal: every window ends, every per-datagram fault stops, every disk is healthy, and
    /// an armed graceful restart goes at once.
    pub fn heal(&mut self) {
        let ids: Vec<u32> = self.windows.open.keys().copied().collect();
        for id in ids {
            self.end_window(id);
        }
        let mut w = lock(self.world);
        if w.datagram_faults {
            w.datagram_faults = false;
            w.checker.disturbance(false);
        }
        for slot in &mut w.nodes {
            slot.disk.heal();
            let mut datagrams =
                slot.datagrams.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            datagrams.faults = Default::default();
        }
        // A graceful restart still armed goes now: at its deadline it would stop a node in the
        // middle of the final read.
        for n in 0..self.nodes {
            if w.nodes[n as usize].stop_at_wal_sync.take().is_some() {
                stop_now(&mut w, n);
            }
        }
    }
}

/// Node `n`'s driver submits the fsync of a WAL group commit (records staged since the last
/// fsync): a graceful restart armed for it goes now.
pub fn stop_armed(w: &mut World2, n: u32) {
    if w.nodes[n as usize].stop_at_wal_sync.take().is_some() {
        stop_now(w, n);
        w.hit(FaultClass::RestartInGroupCommit);
    }
}

/// Asks node `n`'s running process, if any, to stop gracefully.
fn stop_now(w: &mut World2, n: u32) {
    if let Some(stop) = &w.nodes[n as usize].stop {
        let _ = stop.send(());
        w.hit(FaultClass::Restart);
    }
}
