//! Structured fault schedules: timed actions against a node (crash then restart, pause then
//! resume, disk full for a while then clear, ...) or against the network (a partition, a
//! one-way cut, the leader isolated, a clogged link, each healed later). The swarm draws one per
//! seed from the fault stream; scenarios write theirs by hand.

mod net;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use narad_sim_runtime::{DiskFaults, FileClass, FileMatch};

use crate::swarm::{FaultPlan, NetPlan};

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
    /// The next write to a matching file fails with EIO; nothing of it lands.
    FailNextWrite(FileMatch),
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
    /// Power fails right after the next write to a matching file lands in the page cache,
    /// before its sync (with torn writes on, the file keeps a torn prefix of it).
    PowerLossAfterNextWrite(FileMatch),
    /// Power fails right after the next delete of a matching file completed on the disk,
    /// before the node hears of it (retention's deletion interrupted).
    PowerLossAfterNextDelete(FileMatch),
    /// The admin client deletes this topic.
    DeleteTopic(String),
    /// The admin client creates this topic (again).
    CreateTopic(String),
    /// Scenarios: from now on, producers and readers send to node `clients` and the admin to
    /// node `admin` (`None`: a random running node).
    Route {
        clients: Option<u32>,
        admin: Option<u32>,
    },
    /// The node dies (power loss or crash) for longer than the membership dead timeout; a
    /// later `Restart` (at the latest the heal phase) brings it back.
    Die {
        power: bool,
    },
    /// Network window `id`: these nodes are cut off from all the others, both directions.
    Partition {
        id: u32,
        group: Vec<u32>,
    },
    /// Network window `id`: messages from `from` to `to` are lost (the other way works).
    OneWay {
        id: u32,
        from: Vec<u32>,
        to: Vec<u32>,
    },
    /// Network window `id`: whoever leads the metastore now is cut off from everyone.
    IsolateLeader {
        id: u32,
    },
    /// Network window `id`: these links hold their messages until the window ends.
    Clog {
        id: u32,
        links: Vec<(u32, u32)>,
    },
    /// Ends network window `id` (a clog releases what it held in one burst).
    NetHeal {
        id: u32,
    },
}

/// An action at a time (milliseconds after the start) against a node.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledFault {
    pub at_ms: u64,
    pub node: u32,
    pub action: FaultAction,
}

/// The links from each node of `group` to each node outside it (one direction).
pub fn group_links(nodes: u32, group: &[u32]) -> Vec<(u32, u32)> {
    (0..nodes)
        .filter(|a| group.contains(a))
        .flat_map(|a| (0..nodes).filter(|b| !group.contains(b)).map(move |b| (a, b)))
        .collect()
}

/// The links from each node of `from` to each other node of `to`.
pub fn one_way_links(from: &[u32], to: &[u32]) -> Vec<(u32, u32)> {
    from.iter().flat_map(|&a| to.iter().filter(move |&&b| b != a).map(move |&b| (a, b))).collect()
}

impl FaultAction {
    /// Sets the disk knob this action turns (both tiers); false if it is not a disk knob.
    pub fn apply_to_disk(&self, disk: &mut DiskFaults) -> bool {
        match *self {
            FaultAction::DiskFull(on) => disk.disk_full = on,
            FaultAction::Slow(factor) => disk.slow_factor = factor,
            FaultAction::FailNextSync(m) => disk.fail_next_sync = Some(m),
            FaultAction::FailNextWrite(m) => disk.fail_next_write = Some(m),
            FaultAction::TornNextWrite(m) => disk.torn_next_write = Some(m),
            FaultAction::MisdirectNextWrite(m, sectors) => {
                disk.misdirect_next_write = Some((m, sectors));
            }
            FaultAction::LieOn(m) => disk.lie_on = m,
            FaultAction::Failing(m) => disk.failing = m,
            _ => return false,
        }
        true
    }
}

impl ScheduledFault {
    /// `action` at `at_ms` against node 0.
    pub fn at(at_ms: u64, action: FaultAction) -> ScheduledFault {
        ScheduledFault { at_ms, node: 0, action }
    }
}

impl ScheduledFault {
    /// `action` at `at_ms` against node `node`.
    pub fn on(node: u32, at_ms: u64, action: FaultAction) -> ScheduledFault {
        ScheduledFault { at_ms, node, action }
    }
}

/// Draws the timed faults of a single node's `plan` within `horizon_ms`.
pub fn draw_schedule(
    plan: &FaultPlan,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) -> Vec<ScheduledFault> {
    draw_schedule_on(plan, &NetPlan::default(), 1, horizon_ms, rng)
}

/// Draws the timed faults of `plan` and `net` within `horizon_ms` over `nodes` nodes. Each
/// fault strikes a node of its own; with one node nothing extra is drawn, so a single-node seed
/// gets exactly the schedule it always got.
pub fn draw_schedule_on(
    plan: &FaultPlan,
    net: &NetPlan,
    nodes: u32,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) -> Vec<ScheduledFault> {
    let mut out = Vec::new();
    let pick = |rng: &mut ChaCha8Rng| if nodes > 1 { rng.random_range(0..nodes) } else { 0 };
    let at = |rng: &mut ChaCha8Rng| rng.random_range(20..horizon_ms.max(21));
    for _ in 0..plan.process_crashes {
        let t = at(rng);
        let node = pick(rng);
        out.push(ScheduledFault::on(node, t, FaultAction::ProcessCrash));
        out.push(ScheduledFault::on(node, t + rng.random_range(1..800), FaultAction::Restart));
    }
    for _ in 0..plan.power_losses {
        let t = at(rng);
        let down = rng.random_range(1..1_500);
        let node = pick(rng);
        out.push(ScheduledFault::on(node, t, FaultAction::PowerLoss));
        for _ in 0..plan.bit_flips {
            out.push(ScheduledFault::on(node, t + rng.random_range(0..down), FaultAction::BitFlip));
        }
        out.push(ScheduledFault::on(node, t + down, FaultAction::Restart));
    }
    draw_node_windows(&mut out, plan, nodes, horizon_ms, rng);
    if nodes > 1 {
        net::draw_deaths(&mut out, plan, nodes, horizon_ms, rng);
        net::draw_network(&mut out, net, nodes, horizon_ms, rng);
    }
    draw_write_errors(&mut out, plan, nodes, horizon_ms, rng);
    draw_partition_failures(&mut out, plan, horizon_ms, rng);
    draw_journal_failures(&mut out, plan, nodes, horizon_ms, rng);
    out.sort_by_key(|f| f.at_ms);
    out
}

/// One-shot write errors (drawn last, so the rest of a schedule is what it was without them).
/// A quarter strike while the nodes boot, when every file gets its first writes (the metastore
/// log its header); four in ten are aimed at the metastore's files.
fn draw_write_errors(
    out: &mut Vec<ScheduledFault>,
    plan: &FaultPlan,
    nodes: u32,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) {
    for _ in 0..plan.write_error_shots {
        let t = if rng.random_bool(0.25) { 0 } else { rng.random_range(20..horizon_ms.max(21)) };
        let class = match rng.random_range(0..10) {
            0..4 => FileClass::Meta,
            4..6 => FileClass::Wal,
            6..8 => FileClass::Partition,
            _ => FileClass::Checkpoint,
        };
        let node = if nodes > 1 { rng.random_range(0..nodes) } else { 0 };
        out.push(ScheduledFault::on(node, t, FaultAction::FailNextWrite(FileMatch::class(class))));
    }
}

/// One-shot failures aimed at partition logs (drawn last of all): a failed fsync, a failed
/// write, or a torn write (whose read-back fails), each at one partition index or any partition.
fn draw_partition_failures(
    out: &mut Vec<ScheduledFault>,
    plan: &FaultPlan,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) {
    for _ in 0..plan.partition_failure_shots {
        let t = rng.random_range(20..horizon_ms.max(21));
        let target = if rng.random_bool(0.5) {
            FileMatch::partition(rng.random_range(0..3))
        } else {
            FileMatch::class(FileClass::Partition)
        };
        let action = match rng.random_range(0..3) {
            0 => FaultAction::FailNextSync(target),
            1 => FaultAction::FailNextWrite(target),
            _ => FaultAction::TornNextWrite(target),
        };
        out.push(ScheduledFault::on(0, t, action));
    }
}

/// One-shot failures aimed at the consumer journal (drawn after everything else): a failed
/// write or fsync (the journal latches: receives and settles answer 500 until a restart), a
/// crash right after a sync lands (acks durable, unanswered), or a power loss right after a
/// write lands (with torn writes on, a torn tail). Live torn writes that report success are not
/// aimed at it: the journal reads nothing back, so they are a corruption-class fault.
fn draw_journal_failures(
    out: &mut Vec<ScheduledFault>,
    plan: &FaultPlan,
    nodes: u32,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) {
    let journal = FileMatch::class(FileClass::Journal);
    for _ in 0..plan.journal_shots {
        let t = rng.random_range(20..horizon_ms.max(21));
        let node = if nodes > 1 { rng.random_range(0..nodes) } else { 0 };
        let action = match rng.random_range(0..4) {
            0 => FaultAction::FailNextSync(journal),
            1 => FaultAction::FailNextWrite(journal),
            2 => FaultAction::CrashAfterNextSync { target: journal, power: rng.random_bool(0.5) },
            _ => FaultAction::PowerLossAfterNextWrite(journal),
        };
        out.push(ScheduledFault::on(node, t, action));
    }
}

/// Precise crashes, disk-full and slow-disk windows and pauses, each on a node of its own.
fn draw_node_windows(
    out: &mut Vec<ScheduledFault>,
    plan: &FaultPlan,
    nodes: u32,
    horizon_ms: u64,
    rng: &mut ChaCha8Rng,
) {
    let pick = |rng: &mut ChaCha8Rng| if nodes > 1 { rng.random_range(0..nodes) } else { 0 };
    let at = |rng: &mut ChaCha8Rng| rng.random_range(20..horizon_ms.max(21));
    for _ in 0..plan.precise_crashes {
        let class = if rng.random_bool(0.5) { FileClass::Wal } else { FileClass::Partition };
        let action = FaultAction::CrashAfterNextSync {
            target: FileMatch::class(class),
            power: rng.random_bool(0.5),
        };
        let t = at(rng);
        out.push(ScheduledFault::on(pick(rng), t, action));
    }
    let mut windows = |count: u32, rng: &mut ChaCha8Rng, start: FaultAction, end: FaultAction| {
        for _ in 0..count {
            let t = rng.random_range(10..horizon_ms.max(11));
            let len = rng.random_range(5..1_500);
            let node = pick(rng);
            out.push(ScheduledFault::on(node, t, start.clone()));
            out.push(ScheduledFault::on(node, t + len, end.clone()));
        }
    };
    windows(plan.disk_full_windows, rng, FaultAction::DiskFull(true), FaultAction::DiskFull(false));
    for _ in 0..plan.slow_windows {
        let factor = rng.random_range(5..200);
        windows(1, rng, FaultAction::Slow(factor), FaultAction::Slow(1));
    }
    windows(plan.pauses, rng, FaultAction::Pause, FaultAction::Resume);
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_sim_runtime::{Component, component_rng};

    #[test]
    fn every_crash_is_followed_by_a_restart() {
        let plan =
            FaultPlan { process_crashes: 2, power_losses: 1, pauses: 1, ..FaultPlan::default() };
        let mut rng = component_rng(3, Component::Faults);
        let schedule = draw_schedule(&plan, 1_000, &mut rng);
        let count = |a: &FaultAction| schedule.iter().filter(|f| &f.action == a).count();
        assert_eq!(count(&FaultAction::Restart), 3);
        assert_eq!(count(&FaultAction::Pause), count(&FaultAction::Resume));
        assert!(schedule.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    }

    #[test]
    fn write_error_shots_leave_the_rest_of_the_schedule_alone() {
        let plan = FaultPlan { process_crashes: 2, pauses: 2, ..FaultPlan::default() };
        let with = FaultPlan { write_error_shots: 3, ..plan.clone() };
        let draw = |p: &FaultPlan| {
            let mut rng = component_rng(5, Component::Faults);
            draw_schedule_on(p, &NetPlan::default(), 3, 2_000, &mut rng)
        };
        let (before, after) = (draw(&plan), draw(&with));
        let shot = |f: &ScheduledFault| matches!(f.action, FaultAction::FailNextWrite(_));
        assert_eq!(after.iter().filter(|f| shot(f)).count(), 3);
        let rest: Vec<_> = after.into_iter().filter(|f| !shot(f)).collect();
        assert_eq!(rest, before);
    }
}
