//! Turns a finished `Simulation` into its `RunOutcome`. It lives beside the simulation, not in
//! `outcome`, so that `outcome` stays plain data and the imports go one way: the simulation
//! knows its report, the report knows nothing of the simulation.

use crate::checker::Verdict;
use crate::clock::since_start;
use crate::outcome::RunOutcome;

use super::Simulation;

impl Simulation {
    /// Collects the outcome of this finished simulation (without its full trace).
    pub(super) fn outcome(&self, verdict: Verdict) -> RunOutcome {
        let world = self.world();
        let (violations, violation_count) = world.checker.violations();
        RunOutcome {
            seed: self.seed,
            scenario: self.scenario.clone(),
            tier: crate::swarm::Tier::Core,
            nodes: self.cfg.nodes,
            idempotent_commits: self.cfg.idempotent_commits,
            passed: violation_count == 0,
            events: world.queue.popped(),
            simulated_ms: since_start(world.queue.now()) / 1_000,
            trace_hash: world.trace.hash().hex(),
            verdict,
            faults: self.fault_hits(),
            faults_on: self.faults_on(),
            violations: violations
                .iter()
                .map(|v| format!("{} (t={}): {}", v.invariant, since_start(v.at), v.detail))
                .collect(),
            violation_count,
            counters: world.checker.counters,
            totals: self.totals(),
            recovery_refused: world.checker.recovery_refused.clone(),
            tail: world.trace.tail().iter().map(ToString::to_string).collect(),
            full_trace: Vec::new(),
        }
    }

    /// The names of the fault classes this run drew, disk and process first, then network.
    fn faults_on(&self) -> Vec<&'static str> {
        let mut faults_on = self.cfg.faults.names();
        faults_on.extend(self.cfg.net.names());
        if self.cfg.faults.restart_on_latch {
            faults_on.push("restart_on_latch");
        }
        faults_on
    }
}
