//! The building blocks every scenario uses: a fault at a time, a busy two-producer workload,
//! the default fault plan, and the checks an `expect` is written with.

use narad_sim_runtime::FaultClass;

use crate::outcome::RunOutcome;
use crate::schedule::{FaultAction as A, ScheduledFault};
use crate::swarm::{FaultPlan, WorkloadConfig};

pub(super) fn at(ms: u64, action: A) -> ScheduledFault {
    ScheduledFault::at(ms, action)
}

/// Two producers and a reader spreading `messages` over roughly `active_ms` of simulated time,
/// so the scheduled faults strike while clients are busy.
pub(super) fn workload(messages: u64, partitions: u32, active_ms: u64) -> WorkloadConfig {
    let requests_per_producer = messages / 2;
    WorkloadConfig {
        producers: 2,
        readers: 1,
        messages,
        initial_topics: 2,
        max_partitions: partitions,
        batch_prob: 0.0,
        think_max_us: 2 * active_ms * 1_000 / requests_per_producer.max(1),
        invalid_prob: 0.0,
        ..WorkloadConfig::default()
    }
}

pub(super) fn plan() -> FaultPlan {
    FaultPlan { restart_on_latch: true, ..FaultPlan::default() }
}

pub(super) fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what.to_string()) }
}

pub(super) fn hit(o: &RunOutcome, class: FaultClass) -> Result<(), String> {
    check(o.faults.get(class) > 0, &format!("fault {} never hit", class.name()))
}
