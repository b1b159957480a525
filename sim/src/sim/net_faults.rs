//! Network windows of the fault schedule: a partition of a group, one-way cuts, the current
//! leader isolated, clogged links. Each window remembers the links it touched, so its `NetHeal`
//! undoes exactly that (windows may overlap; the network counts cuts per link). The heal phase
//! ends every window at once and delivers what clogged links held.

use narad_sim_runtime::{FaultClass, Link};

use super::Simulation;
use super::world::{NetWindow, WindowKind};
use crate::schedule::{FaultAction, group_links, one_way_links};

impl Simulation {
    /// Applies a network action; false if `action` is not one.
    pub(super) fn apply_net_fault(&mut self, action: &FaultAction) -> bool {
        let nodes = self.nodes() as u32;
        let (id, links, kind) = match action {
            FaultAction::Partition { id, group } => {
                let links =
                    group_links(nodes, group).into_iter().flat_map(|(a, b)| [(a, b), (b, a)]);
                (*id, links.collect(), WindowKind::Symmetric)
            }
            FaultAction::OneWay { id, from, to } => {
                (*id, one_way_links(from, to), WindowKind::OneWay)
            }
            FaultAction::IsolateLeader { id } => {
                let Some(leader) = self.current_leader() else { return true };
                self.world.hit(FaultClass::LeaderIsolation);
                let links = (0..nodes)
                    .filter(|&b| b != leader)
                    .flat_map(|b| [(leader, b), (b, leader)])
                    .collect();
                (*id, links, WindowKind::Symmetric)
            }
            FaultAction::Clog { id, links } => (*id, links.clone(), WindowKind::Clog),
            FaultAction::NetHeal { id } => {
                self.end_window(*id);
                return true;
            }
            _ => return false,
        };
        self.open_window(id, links, kind);
        true
    }

    fn open_window(&mut self, id: u32, links: Vec<Link>, kind: WindowKind) {
        if matches!(kind, WindowKind::Clog) {
            self.world.checker.disturbance(true); // held messages have no delay bound
        } else {
            self.world.checker.loss(true); // a cut loses what is sent across it
        }
        for &link in &links {
            match kind {
                WindowKind::Symmetric => self.world.net.cut(link, true),
                WindowKind::OneWay => self.world.net.cut(link, false),
                WindowKind::Clog => self.world.net.clog(link),
            }
        }
        self.world.windows.insert(id, NetWindow { links, kind });
    }

    fn end_window(&mut self, id: u32) {
        let Some(window) = self.world.windows.remove(&id) else { return };
        if matches!(window.kind, WindowKind::Clog) {
            self.world.checker.disturbance(false);
        } else {
            self.world.checker.loss(false);
        }
        for link in window.links {
            match window.kind {
                WindowKind::Symmetric => self.world.net.uncut(link, true),
                WindowKind::OneWay => self.world.net.uncut(link, false),
                WindowKind::Clog => {
                    for (bytes, delay) in self.world.net.unclog(link) {
                        self.world.schedule_delivery(link, bytes, delay);
                    }
                }
            }
        }
    }

    /// The heal phase: every window ends, per-message faults stop, held messages go out.
    pub(super) fn heal_network(&mut self) {
        let windows = std::mem::take(&mut self.world.windows);
        for window in windows.values() {
            if matches!(window.kind, WindowKind::Clog) {
                self.world.checker.disturbance(false);
            } else {
                self.world.checker.loss(false);
            }
        }
        if self.cfg.net.faults.drop_rate > 0.0 {
            self.world.checker.loss(false);
        }
        for (link, bytes, delay) in self.world.net.heal() {
            self.world.schedule_delivery(link, bytes, delay);
        }
    }
}
