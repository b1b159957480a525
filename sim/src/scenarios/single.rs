//! Single-node scenarios: each is one failure story of docs/design.md §4–§5 with a fixed fault
//! schedule. Times are milliseconds after the start.

use narad_sim_runtime::{FaultClass, FileClass, FileMatch};

use super::Scenario;
use super::kit::{at, check, hit, plan, workload};
use crate::schedule::FaultAction as A;
use crate::swarm::{FaultPlan, NetPlan, NodeSizes, WorkloadConfig};

pub(super) fn wal_fsync_failure() -> Scenario {
    Scenario {
        name: "wal_fsync_failure",
        story: "an ingress WAL fsync fails: the group gets 500s, the WAL latches, a restart replays what was durable, no ack is lost",
        seed: 11,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn partition_torn_write() -> Scenario {
    Scenario {
        name: "partition_torn_write",
        story: "a partition-log write lands torn but reports success: the read-back CRC catches it, the commit is rolled back and retried",
        seed: 12,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn crash_between_wal_fsync_and_reply() -> Scenario {
    Scenario {
        name: "crash_between_wal_fsync_and_reply",
        story: "power fails after a WAL fsync lands but before the 202 goes out: the produce is ambiguous, nothing acked is lost",
        seed: 13,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn crash_with_commits_above_checkpoint() -> Scenario {
    Scenario {
        name: "crash_with_commits_above_checkpoint",
        story: "power fails right after a partition commit is durable, before the checkpoint covers it: the window is re-dispatched, nothing is lost",
        seed: 14,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn stuck_destination() -> Scenario {
    Scenario {
        name: "stuck_destination",
        story: "partition 0's log fails every write and sync for 3 s while the others commit: skip-set, reroute after 3 failed passes, checkpoint pinned, no loss",
        seed: 15,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn topic_deleted_with_records_in_wal() -> Scenario {
    Scenario {
        name: "topic_deleted_with_records_in_wal",
        story: "every partition log is stuck while t1 is deleted: t1's records waiting in the WAL are discarded (leader-confirmed), t2's commit once unstuck",
        seed: 16,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn disk_full_and_recovery() -> Scenario {
    // Without pre-writing: a pre-written WAL keeps acknowledging into its zeros (below).
    let sizes = NodeSizes { wal_prewrite_chunk_bytes: 0, ..NodeSizes::default() };
    Scenario {
        name: "disk_full_and_recovery",
        story: "the disk is full for 700 ms: produces fail, the WAL latches, the node restarts once space is back, nothing acked is lost",
        ..disk_full_for_700_ms(sizes)
    }
}

pub(super) fn disk_full_with_a_prewritten_wal() -> Scenario {
    Scenario {
        name: "disk_full_with_a_prewritten_wal",
        story: "the disk is full for 700 ms while the WAL has zeros pre-written ahead: produces are acknowledged into them, partition commits fail and are retried once space is back, nothing acked is lost",
        ..disk_full_for_700_ms(NodeSizes::default())
    }
}

/// One node under load whose disk is full from 200 ms to 900 ms (name and story to be set).
fn disk_full_for_700_ms(sizes: NodeSizes) -> Scenario {
    Scenario {
        name: "",
        story: "",
        seed: 17,
        nodes: 1,
        sizes,
        net: NetPlan::default(),
        workload: workload(250, 3, 2_000),
        faults: plan(),
        schedule: vec![at(200, A::DiskFull(true)), at(900, A::DiskFull(false))],
        expect: |o| hit(o, FaultClass::DiskFull),
    }
}

pub(super) fn partition_log_lies_about_fsync() -> Scenario {
    Scenario {
        name: "partition_log_lies_about_fsync",
        story: "partition logs claim fsyncs they never did, then power fails: records whose only copy is gone may be lost, never served corrupt",
        seed: 18,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn bit_flip_at_rest() -> Scenario {
    Scenario {
        name: "bit_flip_at_rest",
        story: "a bit flips in a record file while the node is down: the damage is detected (recovery refuses or reads fail), never served",
        seed: 19,
        nodes: 1,
        // Without pre-writing, so that the flip lands in records rather than in a zero tail.
        sizes: NodeSizes { wal_prewrite_chunk_bytes: 0, ..NodeSizes::default() },
        net: NetPlan::default(),
        workload: workload(200, 2, 2_000),
        faults: plan(),
        schedule: vec![at(500, A::PowerLoss), at(550, A::BitFlip), at(700, A::Restart)],
        expect: |o| hit(o, FaultClass::BitFlip),
    }
}

pub(super) fn new_files_vanish_without_dir_fsync() -> Scenario {
    Scenario {
        name: "new_files_vanish_without_dir_fsync",
        story: "created files' directory entries are not durable until their first fsync; power fails early, twice: the node recovers without them",
        seed: 20,
        nodes: 1,
        sizes: NodeSizes::default(),
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

pub(super) fn torn_tails_at_power_loss() -> Scenario {
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
        sizes: NodeSizes::default(),
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

pub(super) fn failed_commits_are_cut_back_before_the_next() -> Scenario {
    // A failed commit can leave bytes in the log file: a torn write lands intact frames before
    // the tear, and a read-back that fails leaves the whole batch. The next commit must start
    // where the last good frame ends and nothing of the failed one may survive past it. The
    // process restart after each failure (the page cache survives it) reads the file again:
    // frames left behind would be recovered as committed records (`recovered-unwritten`).
    let mut schedule = Vec::new();
    for i in 0..6 {
        let target = FileMatch::class(FileClass::Partition);
        let action = if i % 2 == 0 { A::FailNextSync(target) } else { A::TornNextWrite(target) };
        let t = 80 + i * 250;
        schedule.push(at(t, action));
        schedule.push(at(t + 150, A::ProcessCrash));
        schedule.push(at(t + 180, A::Restart));
    }
    Scenario {
        name: "failed_commits_are_cut_back_before_the_next",
        story: "partition-log syncs fail and writes tear, six times, under load, each followed by a process restart: each failed commit is cut back to the last good frame before the partition's next commit, recovery finds exactly the committed records, nothing acknowledged is lost",
        seed: 22,
        nodes: 1,
        sizes: NodeSizes::default(),
        net: NetPlan::default(),
        workload: WorkloadConfig { batch_prob: 0.5, max_batch: 12, ..workload(300, 2, 1_800) },
        faults: plan(),
        schedule,
        expect: |o| {
            hit(o, FaultClass::FsyncError)?;
            hit(o, FaultClass::TornWriteLive)?;
            hit(o, FaultClass::PartitionCommitAfterFailure)?;
            check(o.counters.restarts >= 3, "fewer than three restarts")?;
            check(o.counters.commits_failed >= 2, "fewer than two commits failed")
        },
    }
}

pub(super) fn wal_sequence_reused_after_a_lying_fsync() -> Scenario {
    Scenario {
        name: "wal_sequence_reused_after_a_lying_fsync",
        story: "the WAL's fsyncs lie while records are dispatched and committed, then power fails: the WAL forgets them and reuses their sequence numbers for new records; the owner still holds the old ones, and its idempotent check tells old from new by content, so no new acknowledged record is dropped",
        seed: 23,
        nodes: 1,
        sizes: NodeSizes::default(),
        net: NetPlan::default(),
        workload: workload(300, 2, 2_000),
        faults: plan(),
        schedule: vec![
            at(150, A::LieOn(Some(FileMatch::class(FileClass::Wal)))),
            at(500, A::PowerLoss),
            at(500, A::LieOn(None)),
            at(600, A::Restart),
        ],
        expect: |o| {
            hit(o, FaultClass::LyingFsync)?;
            check(o.counters.reused_sequences > 0, "no committed WAL sequence was reused")
        },
    }
}

/// One node, segments of 256 B (a roll every commit or two) and topics with 1 s of retention.
fn retention_sizes() -> NodeSizes {
    NodeSizes { partition_segment_bytes: 256, retention_check_ms: 200, ..NodeSizes::default() }
}

fn retained(w: WorkloadConfig) -> WorkloadConfig {
    WorkloadConfig { create_retention_ms: Some(1_000), ..w }
}

pub(super) fn a_roll_during_a_failed_fsync() -> Scenario {
    // With 256 B segments most commits start by creating a new segment; its first sync fails
    // now and then, and the process restarts after every other failure. The failed commit must
    // leave at most an empty new segment, the retry lands one copy, and retention keeps deleting
    // from the front behind it.
    let mut schedule = Vec::new();
    for i in 0..8 {
        let t = 100 + i * 200;
        schedule.push(at(t, A::FailNextSync(FileMatch::class(FileClass::Partition))));
        if i % 2 == 1 {
            schedule.push(at(t + 60, A::ProcessCrash));
            schedule.push(at(t + 90, A::Restart));
        }
    }
    Scenario {
        name: "a_roll_during_a_failed_fsync",
        story: "tiny partition segments roll at nearly every commit while partition fsyncs fail eight times (a restart after every other one) and 1 s retention deletes from the front: no acknowledged record is lost early, no segment is left half-made, log starts only move forward",
        seed: 24,
        nodes: 1,
        sizes: retention_sizes(),
        net: NetPlan::default(),
        workload: retained(workload(400, 2, 2_000)),
        faults: plan(),
        schedule,
        expect: |o| {
            hit(o, FaultClass::FsyncError)?;
            hit(o, FaultClass::PartitionSegmentRoll)?;
            check(o.counters.commits_failed >= 4, "fewer than four commits failed")?;
            check(o.counters.segments_deleted >= 10, "retention deleted fewer than ten segments")
        },
    }
}

pub(super) fn a_deletion_interrupted_by_power_loss() -> Scenario {
    // Power fails the moment a segment's delete lands on the disk, before the node hears of it,
    // five times: recovery must find a log that starts at or past every start it reported, with
    // no gap, and the deletion it never heard of is judged at the restart.
    let mut schedule = Vec::new();
    for i in 0..5 {
        let t = 1_300 + i * 400;
        schedule.push(at(t, A::PowerLossAfterNextDelete(FileMatch::class(FileClass::Partition))));
        schedule.push(at(t + 300, A::Restart));
    }
    Scenario {
        name: "a_deletion_interrupted_by_power_loss",
        story: "retention deletes a segment and the power fails as the delete lands, five times, with torn writes on: every restart finds a log whose start never moved backwards and has no gap; nothing deleted early, nothing acknowledged lost",
        seed: 25,
        nodes: 1,
        sizes: retention_sizes(),
        net: NetPlan::default(),
        workload: retained(workload(500, 2, 3_500)),
        faults: FaultPlan { torn_at_power_loss: true, ..plan() },
        schedule,
        expect: |o| {
            hit(o, FaultClass::PowerLoss)?;
            check(o.counters.restarts >= 4, "fewer than four restarts")?;
            check(o.counters.segments_deleted >= 5, "retention deleted fewer than five segments")
        },
    }
}
