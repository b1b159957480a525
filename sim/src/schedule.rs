//! Structured fault schedules: timed actions against a node (crash then restart, pause then
//! resume, disk full for a while then clear, ...). The swarm draws one per seed from the
//! fault stream; scenarios write theirs by hand.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use narad_sim_runtime::{FileClass, FileMatch};

use crate::swarm::FaultPlan;

/// One thing the fault schedule does.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Kill the process (the page cache survives).
    ProcessCrash,
    /// Cut the power (unsynced data dropped or torn).
    PowerLoss,
    /// Start the process again from its disk.
    Restart,
    /// `BeginShutdown`, wait until shut down, then restart (page cache survives).
    GracefulRestart,
    Pause,
    Resume,
    DiskFull(bool),
    /// Latency multiplier (1 = healthy).
    Slow(u64),
    /// Flip a bit at rest in a record file.
    BitFlip,
    /// The next sync of a matching file fails.
    FailNextSync(FileMatch),
    /// The next write to a matching file is torn but reports success.
    TornNextWrite(FileMatch),
    /// The next write to a matching file lands this many sectors away.
    MisdirectNextWrite(FileMatch, i64),
    /// Syncs of matching files lie while set.
    LieOn(Option<FileMatch>),
    /// Writes and syncs of matching files fail while set (a stuck destination).
    Failing(Option<FileMatch>),
    /// Crash right after the next successful sync of a matching file lands, before the node
    /// hears of it (`power`: power loss instead of a process crash).
    CrashAfterNextSync {
        target: FileMatch,
        power: bool,
    },
    /// The admin client deletes this topic.
    DeleteTopic(String),
}

/// An action at a time (milliseconds after the start) against a node.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledFault {
    pub at_ms: u64,
    pub node: u32,
    pub action: FaultAction,
}

impl ScheduledFault {
    /// `action` at `at_ms` against node 0.
    pub fn at(at_ms: u64, action: FaultAction) -> ScheduledFault {
        ScheduledFault {
            at_ms,
            node: 0,
            action,
        }
    }
}

/// Draws the timed faults of `plan` within `horizon_ms`.
pub fn draw_schedule(
    plan: &FaultPlan,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) -> Vec<ScheduledFault> {
    let mut out = Vec::new();
    let at = |rng: &mut ChaCha8Rng| rng.random_range(20..horizon_ms.max(21));
    for _ in 0..plan.process_crashes {
        let t = at(rng);
        out.push(ScheduledFault::at(t, FaultAction::ProcessCrash));
        out.push(ScheduledFault::at(
            t + rng.random_range(1..800),
            FaultAction::Restart,
        ));
    }
    for _ in 0..plan.power_losses {
        let t = at(rng);
        let down = rng.random_range(1..1_500);
        out.push(ScheduledFault::at(t, FaultAction::PowerLoss));
        for _ in 0..plan.bit_flips {
            out.push(ScheduledFault::at(
                t + rng.random_range(0..down),
                FaultAction::BitFlip,
            ));
        }
        out.push(ScheduledFault::at(t + down, FaultAction::Restart));
    }
    for _ in 0..plan.precise_crashes {
        let class = if rng.random_bool(0.5) {
            FileClass::Wal
        } else {
            FileClass::Partition
        };
        let action = FaultAction::CrashAfterNextSync {
            target: FileMatch::class(class),
            power: rng.random_bool(0.5),
        };
        out.push(ScheduledFault::at(at(rng), action));
    }
    windows(
        &mut out,
        rng,
        plan.disk_full_windows,
        horizon_ms,
        FaultAction::DiskFull(true),
        FaultAction::DiskFull(false),
    );
    for _ in 0..plan.slow_windows {
        let factor = rng.random_range(5..200);
        windows(
            &mut out,
            rng,
            1,
            horizon_ms,
            FaultAction::Slow(factor),
            FaultAction::Slow(1),
        );
    }
    windows(
        &mut out,
        rng,
        plan.pauses,
        horizon_ms,
        FaultAction::Pause,
        FaultAction::Resume,
    );
    out.sort_by_key(|f| f.at_ms);
    out
}

fn windows(
    out: &mut Vec<ScheduledFault>,
    rng: &mut ChaCha8Rng,
    count: u32,
    horizon_ms: u64,
    start: FaultAction,
    end: FaultAction,
) {
    for _ in 0..count {
        let t = rng.random_range(10..horizon_ms.max(11));
        let len = rng.random_range(5..1_500);
        out.push(ScheduledFault::at(t, start.clone()));
        out.push(ScheduledFault::at(t + len, end.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_sim_runtime::{Component, component_rng};

    #[test]
    fn every_crash_is_followed_by_a_restart() {
        let plan = FaultPlan {
            process_crashes: 2,
            power_losses: 1,
            pauses: 1,
            ..FaultPlan::default()
        };
        let mut rng = component_rng(3, Component::Faults);
        let schedule = draw_schedule(&plan, 1_000, &mut rng);
        let count = |a: &FaultAction| schedule.iter().filter(|f| &f.action == a).count();
        assert_eq!(count(&FaultAction::Restart), 3);
        assert_eq!(count(&FaultAction::Pause), count(&FaultAction::Resume));
        assert!(schedule.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    }
}
