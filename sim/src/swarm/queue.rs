//! Queue consume in the swarm, drawn last of all from the swarm stream (so every earlier draw of
//! a seed stays what it was): 35 % of seeds run 1 to 3 queue workers with a lease of 50 ms to
//! 2 s (a run lasts a few simulated seconds, so leases dropped by a crashed worker expire while
//! the others still work, and in the final drain). Half of those compact the consumer journal
//! past 256 B to 16 KiB (a run journals a few KiB), so images, their crash windows and stale
//! files are explored; half aim 1 to 4 one-shot failures at the journal
//! (`schedule::draw_journal_failures`).

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::{FaultPlan, NodeSizes, WorkloadConfig};

/// The queue part of a seed (see the module docs).
pub(crate) fn draw_queue(
    rng: &mut ChaCha8Rng,
    w: &mut WorkloadConfig,
    sizes: &mut NodeSizes,
    faults: &mut FaultPlan,
) {
    if !rng.random_bool(0.35) {
        return;
    }
    w.queue_workers = rng.random_range(1..=3);
    w.queue_visibility_ms = rng.random_range(50..=2_000);
    if rng.random_bool(0.5) {
        sizes.consumer_journal_compact_bytes = 1 << rng.random_range(8..=14u32);
    }
    if rng.random_bool(0.5) {
        faults.journal_shots = rng.random_range(1..=4);
    }
}

/// The topics' queue settings of a seed with queue workers, drawn after everything else (so
/// every earlier draw of a seed stays what it was): on half of them the topics carry the lease
/// themselves (`visibility_timeout_ms`, at least the 100 ms a topic may set); on 40 % they
/// send a message to the dead-letter topic after 1 to 3 deliveries; on half the consumer
/// journal's group commits linger (`Config::consumer_journal_linger`), on half they do not.
pub(crate) fn draw_queue_settings(
    rng: &mut ChaCha8Rng,
    w: &mut WorkloadConfig,
    sizes: &mut NodeSizes,
) {
    if w.queue_workers == 0 {
        return;
    }
    if rng.random_bool(0.5) {
        w.queue_topic_lease = true;
        w.queue_visibility_ms =
            w.queue_visibility_ms.max(narad_core::api::MIN_VISIBILITY_TIMEOUT_MS);
    }
    if rng.random_bool(0.4) {
        w.queue_max_deliveries = Some(rng.random_range(1..=3));
    }
    // Last of all: half the seeds run without the journal's linger (commits start at once).
    sizes.consumer_journal_linger = rng.random_bool(0.5);
}

#[cfg(test)]
mod tests {
    use crate::swarm::{RunOptions, SwarmConfig};

    #[test]
    fn a_share_of_seeds_runs_queue_workers_with_short_leases() {
        let cfgs: Vec<SwarmConfig> =
            (0..1000).map(|s| SwarmConfig::for_seed(s, &RunOptions::nodes(1))).collect();
        let queue: Vec<&SwarmConfig> =
            cfgs.iter().filter(|c| c.workload.queue_workers > 0).collect();
        assert!((250..450).contains(&queue.len()), "{} of 1000 seeds", queue.len());
        assert!(queue.iter().all(|c| c.workload.queue_visibility_ms <= 2_000));
        let compacting = queue.iter().filter(|c| c.sizes.consumer_journal_compact_bytes < 1 << 20);
        assert!(compacting.count() > 100);
        assert!(cfgs.iter().all(|c| c.workload.queue_workers > 0 || c.faults.journal_shots == 0));
        let dead_letters = queue.iter().filter(|c| c.workload.queue_max_deliveries.is_some());
        assert!((60..220).contains(&dead_letters.count()));
        let own_lease = queue.iter().filter(|c| c.workload.queue_topic_lease).count();
        assert!((100..250).contains(&own_lease));
        assert!(cfgs.iter().all(|c| c.workload.queue_workers > 0
            || (c.workload.queue_max_deliveries.is_none() && !c.workload.queue_topic_lease)));
    }
}
