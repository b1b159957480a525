//! Swarm testing: each seed decides which fault classes are on and how hard they hit, and what
//! the workload looks like. Most seeds keep corruption-class faults (bit flips, misdirected
//! writes, lying fsyncs) off so they check the strict no-loss invariant; a few turn one on.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use narad_sim_runtime::{Component, component_rng};

/// Which faults a seed injects, and how hard.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Process kills (page cache survives), each followed by a restart.
    pub process_crashes: u32,
    /// Power losses (unsynced data dropped), each followed by a restart.
    pub power_losses: u32,
    /// Of the crashes, how many strike right after a sync lands (before the node sees it).
    pub precise_crashes: u32,
    /// Power loss keeps a torn, sector-aligned prefix of unsynced writes.
    pub torn_at_power_loss: bool,
    pub fsync_error_rate: f64,
    pub read_error_rate: f64,
    pub read_corruption_rate: f64,
    pub torn_live_rate: f64,
    pub missing_dir_fsync: bool,
    pub disk_full_windows: u32,
    pub slow_windows: u32,
    pub pauses: u32,
    /// Corruption class: writes to record files land at the wrong offset.
    pub misdirect_rate: f64,
    /// Corruption class: syncs of record files lie.
    pub lying_fsync_rate: f64,
    /// Corruption class: bits flip at rest while the node is down.
    pub bit_flips: u32,
    /// Restart the node (gracefully) after its WAL latches, as an operator would.
    pub restart_on_latch: bool,
    /// After the final read, cut the power once more and check nothing visible vanished.
    pub final_power_loss: bool,
}

impl FaultPlan {
    /// True when a fault that may destroy the only copy of a record is on.
    pub fn corruption_class(&self) -> bool {
        self.misdirect_rate > 0.0 || self.lying_fsync_rate > 0.0 || self.bit_flips > 0
    }

    /// Names of the fault classes switched on.
    pub fn names(&self) -> Vec<&'static str> {
        let flags = [
            (self.process_crashes > 0, "process_crash"),
            (self.power_losses > 0, "power_loss"),
            (self.precise_crashes > 0, "crash_after_sync"),
            (self.torn_at_power_loss, "torn_write"),
            (self.fsync_error_rate > 0.0, "fsync_error"),
            (self.read_error_rate > 0.0, "read_error"),
            (self.read_corruption_rate > 0.0, "read_corruption"),
            (self.torn_live_rate > 0.0, "torn_write_live"),
            (self.missing_dir_fsync, "missing_dir_fsync"),
            (self.disk_full_windows > 0, "disk_full"),
            (self.slow_windows > 0, "slow_disk"),
            (self.pauses > 0, "pause"),
            (self.misdirect_rate > 0.0, "misdirected_write"),
            (self.lying_fsync_rate > 0.0, "lying_fsync"),
            (self.bit_flips > 0, "bit_flip"),
            (self.final_power_loss, "final_power_loss"),
        ];
        flags
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| name)
            .collect()
    }
}

/// What the clients do.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub producers: u32,
    pub readers: u32,
    /// Messages to produce in total (each with a unique id).
    pub messages: u64,
    pub initial_topics: u32,
    pub max_partitions: u32,
    pub batch_prob: f64,
    pub max_batch: u32,
    pub keyed_prob: f64,
    pub pinned_prob: f64,
    /// Probability that a payload is large (up to `large_max` bytes).
    pub large_prob: f64,
    pub small_max: usize,
    pub large_max: usize,
    /// Longest pause between two operations of one client.
    pub think_max_us: u64,
    /// Probability per admin wake of deleting or creating a topic (0 = no churn).
    pub churn_prob: f64,
    /// Probability that a produce is deliberately invalid (must be rejected whole).
    pub invalid_prob: f64,
    pub request_timeout_ms: u64,
    /// Attempts of one produce after ambiguous answers.
    pub max_attempts: u32,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            producers: 2,
            readers: 1,
            messages: 200,
            initial_topics: 2,
            max_partitions: 4,
            batch_prob: 0.2,
            max_batch: 16,
            keyed_prob: 0.4,
            pinned_prob: 0.2,
            large_prob: 0.0,
            small_max: 200,
            large_max: 64 * 1024,
            think_max_us: 2_000,
            churn_prob: 0.0,
            invalid_prob: 0.02,
            request_timeout_ms: 2_000,
            max_attempts: 8,
        }
    }
}

/// Everything a seed decides before the run starts.
#[derive(Clone, Debug)]
pub struct SwarmConfig {
    pub faults: FaultPlan,
    pub workload: WorkloadConfig,
    /// Window in which scheduled faults strike.
    pub horizon_ms: u64,
}

impl SwarmConfig {
    /// A healthy run with the given workload.
    pub fn quiet(workload: WorkloadConfig) -> SwarmConfig {
        SwarmConfig {
            faults: FaultPlan::default(),
            workload,
            horizon_ms: 2_000,
        }
    }

    /// The configuration seed `seed` draws.
    pub fn draw(seed: u64) -> SwarmConfig {
        let mut rng = component_rng(seed, Component::Swarm);
        let mut workload = draw_workload(&mut rng);
        let faults = draw_faults(&mut rng);
        let horizon_ms = rng.random_range(300..2_500);
        workload.think_max_us = think_for(&workload, horizon_ms);
        SwarmConfig {
            faults,
            workload,
            horizon_ms,
        }
    }
}

/// The longest think time that spreads the workload's requests over about `horizon_ms`, so
/// scheduled faults strike while clients are busy.
fn think_for(w: &WorkloadConfig, horizon_ms: u64) -> u64 {
    let per_request = 1.0 + w.batch_prob * f64::from(w.max_batch) / 2.0;
    let requests_per_producer = w.messages as f64 / per_request / f64::from(w.producers.max(1));
    (2.0 * horizon_ms as f64 * 1_000.0 / requests_per_producer.max(1.0)) as u64
}

fn draw_workload(rng: &mut ChaCha8Rng) -> WorkloadConfig {
    let big = rng.random_bool(0.1);
    WorkloadConfig {
        producers: rng.random_range(1..=4),
        readers: rng.random_range(0..=2),
        messages: rng.random_range(100..=500),
        initial_topics: rng.random_range(1..=3),
        max_partitions: rng.random_range(1..=6),
        batch_prob: rng.random_range(0.0..0.4),
        max_batch: rng.random_range(2..=32),
        keyed_prob: rng.random_range(0.0..0.6),
        pinned_prob: rng.random_range(0.0..0.3),
        large_prob: if big {
            rng.random_range(0.05..0.3)
        } else {
            0.0
        },
        small_max: rng.random_range(16..=400),
        large_max: 64 * 1024,
        think_max_us: rng.random_range(0..=3_000),
        churn_prob: if rng.random_bool(0.2) {
            rng.random_range(0.05..0.3)
        } else {
            0.0
        },
        invalid_prob: if rng.random_bool(0.3) { 0.03 } else { 0.0 },
        request_timeout_ms: rng.random_range(1_000..=3_000),
        max_attempts: 8,
    }
}

fn draw_faults(rng: &mut ChaCha8Rng) -> FaultPlan {
    let mut on = |p: f64| rng.random_bool(p);
    let (crash, power, precise, torn) = (on(0.5), on(0.5), on(0.3), on(0.6));
    let (fsync, read, read_corrupt, torn_live) = (on(0.3), on(0.25), on(0.2), on(0.2));
    let (dir, full, slow, pause) = (on(0.3), on(0.25), on(0.3), on(0.25));
    let corruption = on(0.08);
    let latch_restart = on(0.8);
    let final_loss = on(0.25);
    let mut plan = FaultPlan {
        process_crashes: if crash { rng.random_range(1..=3) } else { 0 },
        power_losses: if power { rng.random_range(1..=3) } else { 0 },
        precise_crashes: if precise { rng.random_range(1..=2) } else { 0 },
        torn_at_power_loss: torn,
        fsync_error_rate: if fsync {
            rng.random_range(0.002..0.03)
        } else {
            0.0
        },
        read_error_rate: if read {
            rng.random_range(0.005..0.05)
        } else {
            0.0
        },
        read_corruption_rate: if read_corrupt {
            rng.random_range(0.005..0.05)
        } else {
            0.0
        },
        torn_live_rate: if torn_live {
            rng.random_range(0.005..0.05)
        } else {
            0.0
        },
        missing_dir_fsync: dir,
        disk_full_windows: if full { rng.random_range(1..=3) } else { 0 },
        slow_windows: if slow { rng.random_range(1..=3) } else { 0 },
        pauses: if pause { rng.random_range(1..=3) } else { 0 },
        restart_on_latch: latch_restart,
        final_power_loss: final_loss,
        ..FaultPlan::default()
    };
    if corruption {
        match rng.random_range(0..3) {
            0 => plan.misdirect_rate = rng.random_range(0.002..0.02),
            1 => plan.lying_fsync_rate = rng.random_range(0.01..0.2),
            _ => plan.bit_flips = rng.random_range(1..=2),
        }
        if plan.bit_flips > 0 || plan.lying_fsync_rate > 0.0 {
            plan.power_losses = plan.power_losses.max(1);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_deterministic_and_varied() {
        let a = SwarmConfig::draw(1);
        let b = SwarmConfig::draw(1);
        assert_eq!(a.faults.names(), b.faults.names());
        assert_eq!(a.workload.messages, b.workload.messages);
        let corrupt = (0..1000)
            .filter(|&s| SwarmConfig::draw(s).faults.corruption_class())
            .count();
        assert!(
            (30..200).contains(&corrupt),
            "{corrupt} of 1000 seeds with corruption faults"
        );
    }
}
