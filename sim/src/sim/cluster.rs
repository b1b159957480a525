//! What only a cluster run does: skewed node clocks, peer messages arriving through the network,
//! clients picking a random live node per request, and a periodic look at who leads the
//! metastore (leader changes are counted as the fruit of the faults; `IsolateLeader` needs to
//! know whom to isolate).

use bytes::Bytes;
use narad_core::{Input, NodeId};
use narad_sim_runtime::{ClockSkew, FaultClass};
use rand::RngExt;

use super::{Event, START, Simulation};
use crate::trace::What;

/// How often a cluster run looks at who leads.
const OBSERVE_EVERY_MICROS: u64 = 100_000;
/// Largest clock offset of a skewed node, either way.
const SKEW_OFFSET_MAX_MICROS: i64 = 30_000_000;
/// Largest clock drift of a skewed node, either way (2 %).
const SKEW_DRIFT_MAX_PPM: i64 = 20_000;

impl Simulation {
    /// Before the nodes start: skew clocks (when the seed says so) and start observing.
    pub(super) fn boot_cluster(&mut self) {
        if self.cfg.faults.clock_skew {
            for n in 0..self.nodes() {
                let rng = &mut self.world.fault_rng;
                if rng.random_bool(0.5) {
                    continue;
                }
                let offset_us = rng.random_range(-SKEW_OFFSET_MAX_MICROS..=SKEW_OFFSET_MAX_MICROS);
                let drift_ppm = rng.random_range(-SKEW_DRIFT_MAX_PPM..=SKEW_DRIFT_MAX_PPM);
                self.hosts[n].set_skew(ClockSkew { base: START, offset_us, drift_ppm });
                self.world.hit(FaultClass::ClockSkew);
            }
        }
        self.world.queue.push_after(OBSERVE_EVERY_MICROS, Event::Observe);
    }

    /// A peer message arrives, unless its receiver died or restarted since it was sent, or a cut
    /// that started meanwhile stops it.
    pub(super) fn deliver(&mut self, from: u32, to: u32, epoch: u32, bytes: Bytes) {
        let running = self.world.running[to as usize] == Some(epoch);
        let ok = running && self.world.net.passes((from, to));
        let (tag, len) = (super::world::peer_tag(&bytes), bytes.len() as u64);
        self.world.record(to, What::Deliver { from, tag, len, ok });
        if ok {
            let now = self.world.queue.now();
            let input = Input::Peer { from: NodeId(from + 1), bytes };
            self.hosts[to as usize].deliver(now, input, &mut self.world);
        }
    }

    /// The transport of `node` reports `to` unreachable (if `node` is still that incarnation).
    pub(super) fn unreachable(&mut self, node: u32, epoch: u32, to: u32) {
        self.world.unreachable_pending.remove(&(node, to));
        if self.world.running[node as usize] == Some(epoch) {
            let now = self.world.queue.now();
            let input = Input::PeerUnreachable { to: NodeId(to + 1) };
            self.world.record(node, What::Unreachable { to });
            self.hosts[node as usize].deliver(now, input, &mut self.world);
        }
    }

    /// The node a client request goes to: a random running one (`None`: all are down), unless
    /// a scenario pinned the client's role to a node. A single node draws nothing, so
    /// single-node runs are what they always were.
    pub(super) fn pick_node(&mut self, admin: bool) -> Option<usize> {
        if self.nodes() == 1 {
            return self.hosts[0].is_up().then_some(0);
        }
        let pinned = if admin { self.world.pinned.1 } else { self.world.pinned.0 };
        if let Some(n) = pinned {
            return self.hosts[n as usize].is_up().then_some(n as usize);
        }
        let up: Vec<usize> = (0..self.nodes()).filter(|&n| self.hosts[n].is_up()).collect();
        if up.is_empty() {
            return None;
        }
        Some(up[self.world.route_rng.random_range(0..up.len())])
    }

    /// The node that leads the metastore as far as the running, unpaused nodes say (the lowest
    /// index if a stale leader in a minority still believes it leads).
    pub(super) fn current_leader(&self) -> Option<u32> {
        (0..self.nodes())
            .filter(|&n| !self.hosts[n].is_paused())
            .find(|&n| self.hosts[n].node().is_some_and(|node| node.stats().meta_leader == 1))
            .map(|n| n as u32)
    }

    /// Counts a leader change when a node other than the last observed leader now leads.
    pub(super) fn observe(&mut self) {
        if let Some(leader) = self.current_leader()
            && self.world.leader != Some(leader)
        {
            if self.world.leader.is_some() {
                self.world.hit(FaultClass::LeaderChange);
            }
            self.world.leader = Some(leader);
            self.world.record(leader, What::Leader);
        }
        self.world.queue.push_after(OBSERVE_EVERY_MICROS, Event::Observe);
    }
}
