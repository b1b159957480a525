//! The swarm draw of a cluster seed (3 or 5 nodes): the single-node draw of the workload and of
//! the disk and process faults (each fault then strikes a node of its own), plus what only a
//! cluster has: the network's faults ([`NetPlan`]), long deaths of a minority of nodes, skewed
//! clocks, and more topic churn (create, delete and re-create of the same name during load).

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use narad_sim_runtime::{Component, NetFaults, component_rng};

use super::{
    SwarmConfig, draw_faults, draw_io_errors, draw_queue, draw_retention, draw_sizes,
    draw_update_prob, draw_workload, think_for,
};

/// Which network faults a seed injects, and how hard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetPlan {
    /// Latency, spikes (reordering), drops and duplicates of single messages.
    pub faults: NetFaults,
    /// Windows in which a minority group is cut off from the rest (both directions).
    pub partitions: u32,
    /// Windows in which messages flow in one direction only between some nodes.
    pub one_way: u32,
    /// Windows in which whoever leads the metastore at that moment is cut off from everyone.
    pub leader_isolations: u32,
    /// Windows in which a link holds its messages, then releases them in one burst.
    pub clogs: u32,
    /// Longest structured window.
    pub window_max_ms: u64,
    /// The transport reports a peer it cannot reach (`Input::PeerUnreachable`); otherwise the
    /// node finds out by its own timeouts.
    pub report_unreachable: bool,
}

impl NetPlan {
    /// Names of the network fault classes switched on.
    pub fn names(&self) -> Vec<&'static str> {
        let f = &self.faults;
        let flags = [
            (f.spike_rate > 0.0, "net_delay"),
            (f.drop_rate > 0.0, "net_drop"),
            (f.duplicate_rate > 0.0, "net_duplicate"),
            (self.partitions > 0, "partition"),
            (self.one_way > 0, "one_way_partition"),
            (self.leader_isolations > 0, "leader_isolation"),
            (self.clogs > 0, "clog"),
        ];
        flags.into_iter().filter(|(on, _)| *on).map(|(_, name)| name).collect()
    }
}

/// The configuration of cluster seed `seed` with `nodes` nodes.
pub fn draw(seed: u64, nodes: u32) -> SwarmConfig {
    let mut rng = component_rng(seed, Component::Swarm);
    let mut workload = draw_workload(&mut rng);
    let mut faults = draw_faults(&mut rng);
    let horizon_ms = rng.random_range(1_500..12_000);
    if rng.random_bool(0.4) {
        workload.churn_prob = workload.churn_prob.max(rng.random_range(0.05..0.3));
    }
    faults.deaths = if rng.random_bool(0.25) { rng.random_range(1..=(nodes - 1) / 2) } else { 0 };
    faults.clock_skew = rng.random_bool(0.3);
    let net = draw_net(&mut rng, horizon_ms);
    draw_io_errors(&mut rng, &mut faults);
    let mut sizes = draw_sizes(&mut rng);
    workload.update_prob = draw_update_prob(&mut rng);
    workload.think_max_us = think_for(&workload, horizon_ms);
    draw_retention(&mut rng, &mut workload, &mut sizes);
    draw_queue(&mut rng, &mut workload, &mut sizes, &mut faults);
    super::draw_long_poll(&mut rng, &mut workload);
    super::draw_queue_settings(&mut rng, &mut workload, &mut sizes);
    super::draw_prewrite(&mut rng, &mut sizes);
    super::draw_flush_pairing(&mut rng, &mut sizes);
    super::draw_dispatch_linger(&mut rng, &mut sizes);
    super::draw_wal_lanes(&mut rng, &mut sizes);
    super::draw_produce_quota(&mut rng, &mut workload, &mut sizes);
    SwarmConfig { nodes, faults, net, workload, horizon_ms, idempotent_commits: true, sizes }
}

fn draw_net(rng: &mut ChaCha8Rng, horizon_ms: u64) -> NetPlan {
    let mut on = |p: f64| rng.random_bool(p);
    let (spikes, drops, dups) = (on(0.3), on(0.3), on(0.2));
    let (partitions, one_way, isolations, clogs) = (on(0.4), on(0.25), on(0.35), on(0.25));
    let latency_min_us = rng.random_range(20..500);
    let faults = NetFaults {
        latency_min_us,
        latency_max_us: latency_min_us + rng.random_range(0..3_000),
        spike_rate: if spikes { rng.random_range(0.002..0.05) } else { 0.0 },
        spike_max_us: rng.random_range(10_000..400_000),
        drop_rate: if drops { rng.random_range(0.001..0.05) } else { 0.0 },
        duplicate_rate: if dups { rng.random_range(0.001..0.03) } else { 0.0 },
    };
    let mut count = |on: bool, max: u32| if on { rng.random_range(1..=max) } else { 0 };
    NetPlan {
        faults,
        partitions: count(partitions, 3),
        one_way: count(one_way, 2),
        leader_isolations: count(isolations, 2),
        clogs: count(clogs, 3),
        window_max_ms: (horizon_ms / 2).clamp(500, 8_000),
        report_unreachable: rng.random_bool(0.7),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_draws_turn_on_network_faults_and_kill_only_a_minority() {
        let mut partitioned = 0;
        for seed in 0..500 {
            let cfg = draw(seed, 5);
            assert!(cfg.faults.deaths <= 2);
            assert!(draw(seed, 3).faults.deaths <= 1);
            partitioned += u32::from(cfg.net.partitions > 0 || cfg.net.leader_isolations > 0);
        }
        assert!(partitioned > 150, "{partitioned} of 500 seeds cut the network");
    }
}
