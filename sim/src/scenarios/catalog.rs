//! The scenario catalogue: each entry is one failure story of docs/design.md §4–§5 with a fixed
//! fault schedule. Times are milliseconds after the start; these use one node, the cluster ones are
//! in `cluster.rs`.

use narad_sim_runtime::{FaultClass, FileClass, FileMatch};

use super::Scenario;
use crate::outcome::RunOutcome;
use crate::schedule::{FaultAction as A, ScheduledFault};
use crate::swarm::{FaultPlan, NetPlan, WorkloadConfig};

fn at(ms: u64, action: A) -> ScheduledFault {
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

/// Every scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        wal_fsync_failure(),
        partition_torn_write(),
        crash_between_wal_fsync_and_reply(),
        crash_with_commits_above_checkpoint(),
        stuck_destination(),
        topic_deleted_with_records_in_wal(),
        disk_full_and_recovery(),
        partition_log_lies_about_fsync(),
        bit_flip_at_rest(),
        new_files_vanish_without_dir_fsync(),
        torn_tails_at_power_loss(),
        super::cluster::leader_isolated_during_load(),
        super::cluster::owner_dies_and_its_share_is_rerouted(),
        super::cluster::topic_deleted_while_a_node_is_cut_off(),
    ]
}

fn wal_fsync_failure() -> Scenario {
    Scenario {
        name: "wal_fsync_failure",
        story: "an ingress WAL fsync fails: the group gets 500s, the WAL latches, a restart replays what was durable, no ack is lost",
        seed: 11,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(200, 3, 1_500),
        faults: plan(),
        schedule: vec![at(150, A::FailNextSync(FileMatch::class(FileClass::Wal)))],
        expect: |o| {
            hit(o, FaultClass::FsyncError)?;
            check(o.counters.latches > 0, "the WAL never latched")
        },
    }
}

fn partition_torn_write() -> Scenario {
    Scenario {
        name: "partition_torn_write",
        story: "a partition-log write lands torn but reports success: the read-back CRC catches it, the commit is rolled back and retried",
        seed: 12,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(200, 3, 1_500),
        faults: plan(),
        schedule: vec![
            at(100, A::TornNextWrite(FileMatch::class(FileClass::Partition))),
            at(400, A::TornNextWrite(FileMatch::class(FileClass::Partition))),
        ],
        expect: |o| {
            hit(o, FaultClass::TornWriteLive)?;
            check(o.counters.commits_failed > 0, "no commit failed: the read-back missed the tear")
        },
    }
}

fn crash_between_wal_fsync_and_reply() -> Scenario {
    Scenario {
        name: "crash_between_wal_fsync_and_reply",
        story: "power fails after a WAL fsync lands but before the 202 goes out: the produce is ambiguous, nothing acked is lost",
        seed: 13,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(200, 3, 1_500),
        faults: plan(),
        schedule: vec![at(
            200,
            A::CrashAfterNextSync { target: FileMatch::class(FileClass::Wal), power: true },
        )],
        expect: |o| {
            hit(o, FaultClass::PowerLoss)?;
            check(o.counters.ambiguous_attempts > 0, "no produce attempt was left ambiguous")
        },
    }
}

fn crash_with_commits_above_checkpoint() -> Scenario {
    Scenario {
        name: "crash_with_commits_above_checkpoint",
        story: "power fails right after a partition commit is durable, before the checkpoint covers it: the window is re-dispatched, nothing is lost",
        seed: 14,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(250, 2, 1_500),
        faults: plan(),
        schedule: vec![at(
            300,
            A::CrashAfterNextSync { target: FileMatch::class(FileClass::Partition), power: true },
        )],
        expect: |o| hit(o, FaultClass::PowerLoss),
    }
}

fn stuck_destination() -> Scenario {
    Scenario {
        name: "stuck_destination",
        story: "partition 0's log fails every write and sync for 3 s while the others commit: skip-set, reroute after 3 failed passes, checkpoint pinned, no loss",
        seed: 15,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(300, 4, 4_000),
        faults: plan(),
        schedule: vec![
            at(50, A::Failing(Some(FileMatch::partition(0)))),
            at(3_050, A::Failing(None)),
        ],
        expect: |o| check(o.counters.commits_failed > 0, "partition 0 never failed a commit"),
    }
}

fn topic_deleted_with_records_in_wal() -> Scenario {
    Scenario {
        name: "topic_deleted_with_records_in_wal",
        story: "every partition log is stuck while t1 is deleted: t1's records waiting in the WAL are discarded (leader-confirmed), t2's commit once unstuck",
        seed: 16,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(200, 2, 2_000),
        faults: plan(),
        schedule: vec![
            at(100, A::Failing(Some(FileMatch::class(FileClass::Partition)))),
            at(600, A::DeleteTopic("t1".to_string())),
            at(1_500, A::Failing(None)),
        ],
        expect: |o| check(o.counters.discarded > 0, "no record was discarded"),
    }
}

fn disk_full_and_recovery() -> Scenario {
    Scenario {
        name: "disk_full_and_recovery",
        story: "the disk is full for 700 ms: produces fail, the WAL latches, the node restarts once space is back, nothing acked is lost",
        seed: 17,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(250, 3, 2_000),
        faults: plan(),
        schedule: vec![at(200, A::DiskFull(true)), at(900, A::DiskFull(false))],
        expect: |o| hit(o, FaultClass::DiskFull),
    }
}

fn partition_log_lies_about_fsync() -> Scenario {
    Scenario {
        name: "partition_log_lies_about_fsync",
        story: "partition logs claim fsyncs they never did, then power fails: records whose only copy is gone may be lost, never served corrupt",
        seed: 18,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(200, 2, 2_000),
        faults: FaultPlan { torn_at_power_loss: true, ..plan() },
        schedule: vec![
            at(100, A::LieOn(Some(FileMatch::class(FileClass::Partition)))),
            at(600, A::PowerLoss),
            at(600, A::LieOn(None)),
            at(800, A::Restart),
        ],
        expect: |o| {
            hit(o, FaultClass::LyingFsync)?;
            hit(o, FaultClass::PowerLoss)
        },
    }
}

fn bit_flip_at_rest() -> Scenario {
    Scenario {
        name: "bit_flip_at_rest",
        story: "a bit flips in a record file while the node is down: the damage is detected (recovery refuses or reads fail), never served",
        seed: 19,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(200, 2, 2_000),
        faults: plan(),
        schedule: vec![at(500, A::PowerLoss), at(550, A::BitFlip), at(700, A::Restart)],
        expect: |o| hit(o, FaultClass::BitFlip),
    }
}

fn new_files_vanish_without_dir_fsync() -> Scenario {
    Scenario {
        name: "new_files_vanish_without_dir_fsync",
        story: "created files' directory entries are not durable until their first fsync; power fails early, twice: the node recovers without them",
        seed: 20,
        nodes: 1,
        net: NetPlan::default(),
        workload: workload(150, 3, 1_000),
        faults: FaultPlan { missing_dir_fsync: true, torn_at_power_loss: true, ..plan() },
        schedule: vec![
            at(3, A::PowerLoss),
            at(40, A::Restart),
            at(45, A::PowerLoss),
            at(90, A::Restart),
        ],
        expect: |o| hit(o, FaultClass::PowerLoss),
    }
}

fn torn_tails_at_power_loss() -> Scenario {
    // Power fails right after a write lands and before its sync, alternately on the WAL and on
    // a partition log; the node comes back soon after, and the power fails once more shortly
    // after that, while the torn file is still in use (a tail kept by mistake would now sit
    // before good frames).
    let mut schedule = Vec::new();
    for i in 0..8 {
        let class = if i % 2 == 0 { FileClass::Wal } else { FileClass::Partition };
        let arm = 100 + i * 220;
        schedule.push(at(arm, A::PowerLossAfterNextWrite(FileMatch::class(class))));
        schedule.push(at(arm + 60, A::Restart));
        schedule.push(at(arm + 120, A::PowerLoss));
        schedule.push(at(arm + 150, A::Restart));
    }
    Scenario {
        name: "torn_tails_at_power_loss",
        story: "power fails eight times right after a WAL or partition-log write lands, before its sync: the file keeps a torn, sector-aligned prefix of it; recovery cuts every torn tail so that appends start at the last valid frame, and nothing acknowledged is lost",
        seed: 21,
        nodes: 1,
        net: NetPlan::default(),
        // Batches and large messages: writes that span several sectors can be torn mid-frame.
        workload: WorkloadConfig {
            batch_prob: 0.5,
            max_batch: 20,
            large_prob: 0.3,
            ..workload(400, 3, 2_000)
        },
        faults: FaultPlan { torn_at_power_loss: true, ..plan() },
        schedule,
        expect: |o| {
            hit(o, FaultClass::PowerLoss)?;
            hit(o, FaultClass::TornWrite)
        },
    }
}
