//! What one run reports: pass/fail, the numbers (acked, visible, lost, duplicates, fault hits),
//! the violations, the trace hash, and — for a failing seed — the faults that were on, the last
//! events and the one command that replays it.

use narad_sim_runtime::FaultHits;
use serde_json::{Value, json};

use crate::checker::{Counters, Verdict};

/// Counters summed over every node and every incarnation (a node's own counters restart with
/// it, so each incarnation's are added when it dies, and the running ones at the end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterTotals {
    /// Records committed to a sibling partition because their owner was dead or failing.
    pub rerouted: u64,
    /// Commits sent to other nodes and acknowledged.
    pub remote_commits: u64,
    /// Records discarded (deleted topics, leader-confirmed).
    pub discarded: u64,
}

impl ClusterTotals {
    /// Adds one incarnation's counters.
    pub fn add(&mut self, stats: &narad_core::Stats) {
        self.rerouted += stats.records_rerouted;
        self.remote_commits += stats.remote_commits_ok;
        self.discarded += stats.records_discarded;
    }
}

/// The result of one seed.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub seed: u64,
    pub scenario: Option<String>,
    /// Which tier ran it (a replay must name the same).
    pub tier: crate::swarm::Tier,
    /// Nodes in the run.
    pub nodes: u32,
    /// Whether owners deduplicated commits (`Config::idempotent_commits`).
    pub idempotent_commits: bool,
    pub passed: bool,
    pub events: u64,
    pub simulated_ms: u64,
    pub trace_hash: String,
    pub verdict: Verdict,
    pub faults: FaultHits,
    pub faults_on: Vec<&'static str>,
    /// "invariant: detail" per violation (at most 64 kept).
    pub violations: Vec<String>,
    pub violation_count: usize,
    pub counters: Counters,
    /// Cluster counters over every incarnation (reroutes, remote commits, discards).
    pub totals: ClusterTotals,
    pub recovery_refused: Option<String>,
    /// The last trace lines.
    pub tail: Vec<String>,
    /// Every trace record, when the run kept them (`replay --trace`).
    pub full_trace: Vec<crate::trace::TraceRecord>,
}

impl RunOutcome {
    /// The outcome of a run that panicked.
    pub fn panicked(seed: u64, options: &crate::swarm::RunOptions, message: &str) -> RunOutcome {
        let cfg = crate::swarm::SwarmConfig::for_seed(seed, options);
        RunOutcome {
            seed,
            scenario: None,
            tier: options.tier,
            nodes: cfg.nodes,
            idempotent_commits: cfg.idempotent_commits,
            passed: false,
            events: 0,
            simulated_ms: 0,
            trace_hash: "0000000000000000".to_string(),
            verdict: Verdict::default(),
            faults: FaultHits::default(),
            faults_on: cfg.faults.names(),
            violations: vec![format!("panic: {message}")],
            violation_count: 1,
            counters: Counters::default(),
            totals: Default::default(),
            recovery_refused: None,
            tail: Vec::new(),
            full_trace: Vec::new(),
        }
    }

    /// Fault hits as a JSON object (class name → hits), every class listed.
    pub fn faults_json(hits: &FaultHits) -> Value {
        Value::Object(hits.iter().map(|(c, n)| (c.name().to_string(), json!(n))).collect())
    }

    /// The one-line JSON summary (`run --json`).
    pub fn to_json(&self) -> Value {
        let v = &self.verdict;
        let mut json = json!({
            "seed": self.seed,
            "seed_hex": format!("{:#x}", self.seed),
            "scenario": self.scenario,
            "nodes": self.nodes,
            "idempotent_commits": self.idempotent_commits,
            "passed": self.passed,
            "events": self.events,
            "simulated_ms": self.simulated_ms,
            "trace_hash": self.trace_hash,
            "acked": v.acked,
            "ambiguous": v.ambiguous,
            "visible": v.visible,
            "lost": v.lost,
            "lost_to_corruption": v.lost_to_corruption,
            "excused_deleted_topic": v.deleted_topic,
            "excused_deleted_by_retention": v.deleted_by_retention,
            "segments_deleted": self.counters.segments_deleted,
            "records_deleted": self.counters.records_deleted,
            "oldest_unacked_checks": self.counters.oldest_checks,
            "oldest_unacked_excused": self.counters.oldest_excused,
            "duplicates": v.duplicates,
            "duplicate_rate": if v.acked == 0 { 0.0 } else { v.duplicates as f64 / v.acked as f64 },
            "duplicates_from_retries": v.duplicates_from_retries,
            "duplicates_same_partition": v.duplicates_same_partition,
            "queue": v.queue.to_json(),
            "faults": Self::faults_json(&self.faults),
            "faults_on": self.faults_on,
            "commits_failed": self.counters.commits_failed,
            "wal_latches": self.counters.latches,
            "discarded": self.counters.discarded,
            "access_requests": self.counters.access_requests,
            "access_probes_judged": self.counters.access_probes_judged,
            "access_admin_judged": self.counters.access_admin_judged,
            "quota_refusals": self.counters.quota_refusals,
            "rerouted": self.totals.rerouted,
            "remote_commits": self.totals.remote_commits,
            "restarts": self.counters.restarts,
            "recovery_refused": self.recovery_refused,
            "violation_count": self.violation_count,
            "violations": self.violations,
        });
        // Added apart: one `json!` of every field passes the macro's recursion limit.
        json["tier"] = self.tier.name().into();
        json["topic_pages"] = self.counters.topic_pages.into();
        json
    }

    /// The exact command that replays this run.
    pub fn replay_command(&self) -> String {
        match &self.scenario {
            Some(name) => format!("cargo test -p narad-sim --test scenarios -- {name}"),
            None => {
                let dedupe = if self.idempotent_commits { "" } else { " --no-idempotent-commits" };
                let tier = match self.tier {
                    crate::swarm::Tier::Core => String::new(),
                    other => format!(" --tier {}", other.name()),
                };
                let (seed, nodes) = (self.seed, self.nodes);
                format!("narad-sim replay --seed {seed:#x} --nodes {nodes}{tier}{dedupe}")
            }
        }
    }

    /// Human-readable report of a failing run.
    pub fn failure_report(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "FAILED seed {:#x} ({}) with {} node(s)\n",
            self.seed, self.seed, self.nodes
        ));
        out.push_str(&format!("faults on: {}\n", self.faults_on.join(", ")));
        let hits: Vec<String> = self
            .faults
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{}={n}", c.name()))
            .collect();
        out.push_str(&format!("fault hits: {}\n", hits.join(" ")));
        out.push_str(&format!("{} violation(s):\n", self.violation_count));
        for v in &self.violations {
            out.push_str(&format!("  - {v}\n"));
        }
        out.push_str(&format!("last {} events:\n", self.tail.len()));
        for line in &self.tail {
            out.push_str(&format!("  {line}\n"));
        }
        out.push_str(&format!("replay: {}\n", self.replay_command()));
        out
    }

    /// One summary line.
    pub fn summary_line(&self) -> String {
        let v = &self.verdict;
        format!(
            "seed {:#x} nodes={}: {} events={} simulated_ms={} acked={} visible={} lost={} lost_to_corruption={} duplicates={} hash={}",
            self.seed,
            self.nodes,
            if self.passed { "PASSED" } else { "FAILED" },
            self.events,
            self.simulated_ms,
            v.acked,
            v.visible,
            v.lost,
            v.lost_to_corruption,
            v.duplicates,
            self.trace_hash
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swarm::{RunOptions, Tier};

    /// A failing tier-2 seed printed a replay of a scenario named `tier-2`, which does not exist.
    #[test]
    fn a_replay_command_names_the_tier_that_ran_the_seed() {
        let core = RunOutcome::panicked(0x2a, &RunOptions::nodes(3), "boom");
        assert_eq!(core.replay_command(), "narad-sim replay --seed 0x2a --nodes 3");
        let options = RunOptions { tier: Tier::Runtime, ..RunOptions::nodes(3) };
        let runtime = RunOutcome::panicked(0x2a, &options, "boom");
        assert_eq!(
            runtime.replay_command(),
            "narad-sim replay --seed 0x2a --nodes 3 --tier runtime"
        );
        assert_eq!(runtime.to_json()["tier"], "runtime");
    }
}
