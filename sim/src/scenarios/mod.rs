//! Named, hand-written fault scenarios: a fixed seed (for latencies), a fixed workload and a fixed
//! fault schedule that tells one failure story each (see [`catalog`]). `sim/tests/scenarios.rs`
//! runs every one and snapshot-tests its outcome summary (stored in `scenarios/snapshots/`).

pub mod catalog;
mod cluster;
mod kit;
mod queue;
mod single;

use std::fmt::Write;

use crate::outcome::RunOutcome;
use crate::schedule::ScheduledFault;
use crate::sim::Simulation;
use crate::swarm::{FaultPlan, NetPlan, SwarmConfig, WorkloadConfig};

/// One scenario.
pub struct Scenario {
    pub name: &'static str,
    /// What it shows, in one sentence.
    pub story: &'static str,
    pub seed: u64,
    /// Nodes in the cluster (most scenarios: one).
    pub nodes: u32,
    /// File sizes and retention knobs of the nodes (most scenarios: production's).
    pub sizes: crate::swarm::NodeSizes,
    pub workload: WorkloadConfig,
    /// The network's per-message faults and latency (cluster scenarios).
    pub net: NetPlan,
    /// Per-operation fault rates and switches (usually all off).
    pub faults: FaultPlan,
    pub schedule: Vec<ScheduledFault>,
    /// What must be true of the outcome for the story to have happened.
    pub expect: fn(&RunOutcome) -> Result<(), String>,
}

impl Scenario {
    /// Runs the scenario.
    pub fn run(&self, keep_trace: bool) -> RunOutcome {
        let cfg = SwarmConfig {
            nodes: self.nodes,
            faults: self.faults.clone(),
            net: self.net.clone(),
            workload: self.workload.clone(),
            horizon_ms: 0,
            idempotent_commits: true,
            sizes: self.sizes,
        };
        let mut sim = Simulation::new(self.seed, cfg, self.schedule.clone(), keep_trace);
        sim.scenario = Some(self.name.to_string());
        sim.run()
    }
}

/// The scenario named `name`.
pub fn by_name(name: &str) -> Option<Scenario> {
    catalog::all().into_iter().find(|s| s.name == name)
}

/// A summary of an outcome that is stable across harmless core changes: exact numbers for what
/// the invariants judge, yes/no for the rest.
pub fn summary(scenario: &Scenario, outcome: &RunOutcome) -> String {
    let v = &outcome.verdict;
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut out = String::new();
    let _ = writeln!(out, "scenario: {}", scenario.name);
    let _ = writeln!(out, "story: {}", scenario.story);
    let _ = writeln!(out, "passed: {}", outcome.passed);
    let _ = writeln!(out, "violations: {}", outcome.violation_count);
    for violation in &outcome.violations {
        let _ = writeln!(out, "  - {}", violation.split(" (t=").next().unwrap_or(violation));
    }
    let _ = writeln!(out, "lost: {}", v.lost);
    let _ = writeln!(out, "lost_to_corruption: {}", yes(v.lost_to_corruption > 0));
    let _ = writeln!(out, "acked: {}", yes(v.acked > 0));
    let _ = writeln!(out, "ambiguous_attempts: {}", yes(outcome.counters.ambiguous_attempts > 0));
    let _ = writeln!(out, "duplicates: {}", yes(v.duplicates > 0));
    let _ = writeln!(out, "wal_latched: {}", yes(outcome.counters.latches > 0));
    let _ = writeln!(out, "commit_failed: {}", yes(outcome.counters.commits_failed > 0));
    let _ = writeln!(out, "discarded: {}", yes(outcome.counters.discarded > 0));
    let _ = writeln!(out, "restarted: {}", yes(outcome.counters.restarts > 0));
    let _ = writeln!(out, "recovery_refused: {}", yes(outcome.recovery_refused.is_some()));
    if outcome.nodes > 1 {
        let _ = writeln!(out, "nodes: {}", outcome.nodes);
        let _ = writeln!(out, "remote_commits: {}", yes(outcome.totals.remote_commits > 0));
        let _ = writeln!(out, "rerouted: {}", yes(outcome.totals.rerouted > 0));
    }
    let q = &v.queue;
    if q.deliveries > 0 {
        let _ = writeln!(out, "queue_acks: {}", yes(q.acks > 0));
        let _ = writeln!(out, "queue_redelivered_expired: {}", yes(q.redelivered_expired > 0));
        let _ = writeln!(out, "queue_redelivered_nack: {}", yes(q.redelivered_nack > 0));
        let _ = writeln!(out, "queue_redelivered_restart: {}", yes(q.redelivered_restart > 0));
        let _ = writeln!(out, "queue_stale_settles: {}", yes(q.stale > 0));
        let _ = writeln!(out, "queue_drain_checked: {}", yes(q.drain_required > 0));
    }
    let hit: Vec<&str> =
        outcome.faults.iter().filter(|(_, n)| *n > 0).map(|(c, _)| c.name()).collect();
    let _ = writeln!(out, "fault_classes_hit: {}", hit.join(" "));
    out
}
