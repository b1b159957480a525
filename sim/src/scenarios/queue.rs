//! Queue-consume scenarios (docs/design.md §4.8): queue workers next to the producers, with a
//! short lease, and one fault story each.

use narad_sim_runtime::{FaultClass, FileClass, FileMatch};

use super::Scenario;
use super::kit::{at, check, hit, plan, workload};
use crate::schedule::FaultAction as A;
use crate::swarm::{NetPlan, NodeSizes, WorkloadConfig};

/// The scenarios' workload: two producers, no reader, two queue workers with a 1 s lease.
fn queue_workload() -> WorkloadConfig {
    WorkloadConfig {
        readers: 0,
        queue_workers: 2,
        queue_visibility_ms: 1_000,
        ..workload(200, 2, 1_500)
    }
}

pub(super) fn owner_killed_with_leases_outstanding() -> Scenario {
    Scenario {
        name: "owner_killed_with_leases_outstanding",
        story: "the owner's process is killed while queue workers hold leases: its leases are void, their messages are delivered again at once after the restart (before the leases would have expired), acks and delivery counts survive",
        seed: 41,
        nodes: 1,
        sizes: NodeSizes::default(),
        net: NetPlan::default(),
        workload: queue_workload(),
        faults: plan(),
        schedule: vec![at(700, A::ProcessCrash), at(760, A::Restart)],
        expect: |o| {
            hit(o, FaultClass::ProcessCrash)?;
            let q = &o.verdict.queue;
            check(q.acks > 0, "no ack answered 204")?;
            check(q.redelivered_restart > 0, "no lease voided by the restart was delivered again")
        },
    }
}

pub(super) fn ack_whose_journal_fsync_fails() -> Scenario {
    Scenario {
        name: "ack_whose_journal_fsync_fails",
        story: "the consumer-journal fsync under an ack fails: the ack answers 500 (ambiguous, retried), the journal latches and queue receives and settles answer 500 until the drain restarts the node; no ack answered 204 is lost and every acked produce is delivered",
        seed: 42,
        nodes: 1,
        // A small compaction bound: images and file switches happen as well.
        sizes: NodeSizes { consumer_journal_compact_bytes: 2_048, ..NodeSizes::default() },
        net: NetPlan::default(),
        workload: queue_workload(),
        faults: plan(),
        schedule: vec![at(500, A::FailNextSync(FileMatch::class(FileClass::Journal)))],
        expect: |o| {
            hit(o, FaultClass::FsyncError)?;
            let q = &o.verdict.queue;
            check(q.acks > 0, "no ack answered 204")?;
            check(q.drain_required > 0, "the drain was not checked")
        },
    }
}

pub(super) fn counts_granted_ahead_lost_in_a_power_loss() -> Scenario {
    Scenario {
        name: "counts_granted_ahead_lost_in_a_power_loss",
        story: "receives are answered ahead of their delivery counts' journal entries; the disk turns slow (journal syncs take tens of ms, leases of 100 ms expire and are taken again meanwhile), then power fails, once a second: counts granted ahead are lost and given again after the restart, never a lower one, never under an old receipt handle",
        seed: 43,
        nodes: 1,
        sizes: NodeSizes::default(),
        net: NetPlan::default(),
        workload: WorkloadConfig { queue_workers: 6, queue_visibility_ms: 100, ..queue_workload() },
        faults: plan(),
        schedule: std::iter::once(at(1_000, A::Slow(100)))
            .chain(
                (2..14u64)
                    .flat_map(|s| [at(s * 1_000, A::PowerLoss), at(s * 1_000 + 50, A::Restart)]),
            )
            .collect(),
        expect: |o| {
            hit(o, FaultClass::PowerLoss)?;
            let q = &o.verdict.queue;
            check(q.acks > 0, "no ack answered 204")?;
            check(q.repeated_count > 0, "no count granted ahead was lost and given again")
        },
    }
}
