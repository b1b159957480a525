//! The cluster part of a fault schedule: long deaths of a minority of nodes, and network windows
//! (partitions of a minority group, one-way cuts, the leader isolated, clogged links), each
//! opened at a random time and healed after a random duration.

use rand::RngExt;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::{FaultAction, ScheduledFault};
use crate::swarm::{FaultPlan, NetPlan};

/// A death lasts longer than the membership dead timeout (5 s), so its partitions' records are
/// rerouted to live siblings before the node returns.
const DEATH_MS: std::ops::Range<u64> = 6_000..15_000;

/// `plan.deaths` distinct nodes die (power loss or crash) and come back much later.
pub(super) fn draw_deaths(
    out: &mut Vec<ScheduledFault>,
    plan: &FaultPlan,
    nodes: u32,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) {
    let mut victims: Vec<u32> = (0..nodes).collect();
    victims.shuffle(rng);
    for &node in victims.iter().take(plan.deaths.min((nodes - 1) / 2) as usize) {
        let t = rng.random_range(horizon_ms / 10..horizon_ms / 2 + 1);
        let power = rng.random_bool(0.5);
        out.push(ScheduledFault::on(node, t, FaultAction::Die { power }));
        out.push(ScheduledFault::on(node, t + rng.random_range(DEATH_MS), FaultAction::Restart));
    }
}

/// The structured network windows of `net`.
pub(super) fn draw_network(
    out: &mut Vec<ScheduledFault>,
    net: &NetPlan,
    nodes: u32,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) {
    let mut id = 0;
    let mut next_id = || {
        id += 1;
        id - 1
    };
    let mut starts = Vec::new();
    for _ in 0..net.partitions {
        let group = minority(rng, nodes);
        starts.push(FaultAction::Partition { id: next_id(), group });
    }
    for _ in 0..net.one_way {
        let mut all: Vec<u32> = (0..nodes).collect();
        all.shuffle(rng);
        let one = vec![all[0]];
        let other = if rng.random_bool(0.5) { all[1..].to_vec() } else { vec![all[1]] };
        let (from, to) = if rng.random_bool(0.5) { (one, other) } else { (other, one) };
        starts.push(FaultAction::OneWay { id: next_id(), from, to });
    }
    for _ in 0..net.leader_isolations {
        starts.push(FaultAction::IsolateLeader { id: next_id() });
    }
    for _ in 0..net.clogs {
        let a = rng.random_range(0..nodes);
        let b = (a + rng.random_range(1..nodes)) % nodes;
        let links = if rng.random_bool(0.5) { vec![(a, b)] } else { vec![(a, b), (b, a)] };
        starts.push(FaultAction::Clog { id: next_id(), links });
    }
    for (id, start) in (0..).zip(starts) {
        let t = rng.random_range(10..horizon_ms.max(11));
        let len = rng.random_range(100..net.window_max_ms.max(101));
        out.push(ScheduledFault::on(0, t, start));
        out.push(ScheduledFault::on(0, t + len, FaultAction::NetHeal { id }));
    }
}

/// A random group of 1..=(nodes - 1) / 2 nodes.
fn minority(rng: &mut ChaCha8Rng, nodes: u32) -> Vec<u32> {
    let mut all: Vec<u32> = (0..nodes).collect();
    all.shuffle(rng);
    let size = rng.random_range(1..=((nodes - 1) / 2).max(1)) as usize;
    let mut group = all[..size].to_vec();
    group.sort_unstable();
    group
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_sim_runtime::{Component, component_rng};

    #[test]
    fn every_network_window_heals_and_deaths_hit_distinct_nodes() {
        let plan = FaultPlan { deaths: 2, ..FaultPlan::default() };
        let net = NetPlan {
            partitions: 2,
            one_way: 1,
            leader_isolations: 1,
            clogs: 2,
            window_max_ms: 900,
            ..NetPlan::default()
        };
        let mut rng = component_rng(4, Component::Faults);
        let mut out = Vec::new();
        draw_deaths(&mut out, &plan, 5, 4_000, &mut rng);
        draw_network(&mut out, &net, 5, 4_000, &mut rng);
        let heals = out.iter().filter(|f| matches!(f.action, FaultAction::NetHeal { .. })).count();
        assert_eq!(heals, 6);
        let mut dead: Vec<u32> = out
            .iter()
            .filter(|f| matches!(f.action, FaultAction::Die { .. }))
            .map(|f| f.node)
            .collect();
        dead.dedup();
        assert_eq!(dead.len(), 2);
        for f in &out {
            if let FaultAction::Partition { group, .. } = &f.action {
                assert!(!group.is_empty() && group.len() <= 2);
            }
        }
    }
}
