//! Many seeds in parallel on plain std threads: each worker takes the next seed from a shared
//! counter, so the result (which seeds fail, the totals) does not depend on the thread count.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant as WallClock;

use narad_sim_runtime::FaultHits;
use serde_json::{Value, json};

use crate::outcome::RunOutcome;
use crate::{RunOptions, run_seed_catching};

/// Totals of the seeds with one node count.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeTally {
    pub seeds: u64,
    pub failed: u64,
    pub events: u64,
    pub acked: u64,
    pub duplicates: u64,
}

/// Totals of a sweep.
#[derive(Clone, Debug, Default)]
pub struct SweepReport {
    pub seeds: u64,
    pub passed: u64,
    pub failed: u64,
    /// Failing outcomes, in seed order.
    pub failures: Vec<RunOutcome>,
    pub events: u64,
    pub simulated_ms: u64,
    pub acked: u64,
    pub visible: u64,
    pub duplicates: u64,
    /// Duplicates by cause (see `Verdict`).
    pub duplicates_from_retries: u64,
    pub duplicates_same_partition: u64,
    pub lost_to_corruption: u64,
    pub faults: FaultHits,
    /// Seeds in which each class hit at least once (observed classes included: e.g. how many
    /// seeds compacted the WAL with a sealed backlog, or committed after a failed commit).
    pub seeds_hit: FaultHits,
    pub wall_secs: f64,
    /// Records rerouted to sibling partitions and commits sent to other nodes, over all seeds.
    pub rerouted: u64,
    pub remote_commits: u64,
    /// Totals per node count.
    pub by_nodes: BTreeMap<u32, NodeTally>,
    /// Whether owners deduplicated commits in this sweep.
    pub idempotent_commits: bool,
    /// Retention: segments and records deleted, seeds that deleted any, and acknowledged
    /// records excused because retention deleted them.
    pub segments_deleted: u64,
    pub records_deleted: u64,
    pub seeds_with_deletions: u64,
    pub excused_by_retention: u64,
    /// Partitions whose oldest unacked message the checker judged.
    pub oldest_checks: u64,
    pub oldest_excused: u64,
    /// Queue consume over every seed (deliveries, redeliveries by cause), and the seeds that
    /// ran queue workers.
    pub queue: crate::checker::QueueVerdict,
    pub seeds_with_queue: u64,
    /// Access control: the seeds that ran the access client, its requests, the answers to its
    /// requests as users and (tier 2) to the bootstrap admin's, judged against the users.
    pub access: AccessTally,
    /// Produce quotas: the seeds whose nodes refused produces for it (429), and how many.
    pub seeds_with_quota_refusals: u64,
    pub quota_refusals: u64,
    /// Pages of the topic list judged.
    pub topic_pages: u64,
}

/// Access-control figures of a sweep.
#[derive(Clone, Copy, Debug, Default)]
pub struct AccessTally {
    pub seeds: u64,
    pub requests: u64,
    pub probes_judged: u64,
    pub admin_judged: u64,
}

impl AccessTally {
    fn add(&mut self, counters: &crate::checker::Counters) {
        self.seeds += u64::from(counters.access_requests > 0);
        self.requests += counters.access_requests;
        self.probes_judged += counters.access_probes_judged;
        self.admin_judged += counters.access_admin_judged;
    }

    fn to_json(self) -> Value {
        json!({
            "seeds": self.seeds,
            "requests": self.requests,
            "probes_judged": self.probes_judged,
            "admin_judged": self.admin_judged,
        })
    }
}

impl SweepReport {
    fn add(&mut self, outcome: RunOutcome) {
        self.seeds += 1;
        self.events += outcome.events;
        self.simulated_ms += outcome.simulated_ms;
        self.acked += outcome.verdict.acked;
        self.visible += outcome.verdict.visible;
        self.duplicates += outcome.verdict.duplicates;
        self.duplicates_from_retries += outcome.verdict.duplicates_from_retries;
        self.duplicates_same_partition += outcome.verdict.duplicates_same_partition;
        self.lost_to_corruption += outcome.verdict.lost_to_corruption;
        self.faults.add(&outcome.faults);
        for (class, hits) in outcome.faults.iter() {
            if hits > 0 {
                self.seeds_hit.hit(class);
            }
        }
        self.rerouted += outcome.totals.rerouted;
        self.remote_commits += outcome.totals.remote_commits;
        self.segments_deleted += outcome.counters.segments_deleted;
        self.records_deleted += outcome.counters.records_deleted;
        self.oldest_checks += outcome.counters.oldest_checks;
        self.oldest_excused += outcome.counters.oldest_excused;
        self.seeds_with_deletions += u64::from(outcome.counters.segments_deleted > 0);
        self.excused_by_retention += outcome.verdict.deleted_by_retention;
        self.queue.add(&outcome.verdict.queue);
        self.seeds_with_queue += u64::from(outcome.verdict.queue.deliveries > 0);
        self.access.add(&outcome.counters);
        self.seeds_with_quota_refusals += u64::from(outcome.counters.quota_refusals > 0);
        self.quota_refusals += outcome.counters.quota_refusals;
        self.topic_pages += outcome.counters.topic_pages;
        let tally = self.by_nodes.entry(outcome.nodes).or_default();
        tally.seeds += 1;
        tally.failed += u64::from(!outcome.passed);
        tally.events += outcome.events;
        tally.acked += outcome.verdict.acked;
        tally.duplicates += outcome.verdict.duplicates;
        if outcome.passed {
            self.passed += 1;
        } else {
            self.failed += 1;
            self.failures.push(outcome);
        }
    }

    /// Seeds per wall-clock second.
    pub fn seeds_per_sec(&self) -> f64 {
        self.seeds as f64 / self.wall_secs.max(1e-9)
    }

    /// Events per wall-clock second.
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.wall_secs.max(1e-9)
    }

    /// Duplicates per acknowledged record.
    pub fn duplicate_rate(&self) -> f64 {
        if self.acked == 0 { 0.0 } else { self.duplicates as f64 / self.acked as f64 }
    }

    /// The JSON summary (`sweep --json`).
    pub fn to_json(&self) -> Value {
        let by_nodes: serde_json::Map<String, Value> = self
            .by_nodes
            .iter()
            .map(|(nodes, t)| {
                let rate = if t.acked == 0 { 0.0 } else { t.duplicates as f64 / t.acked as f64 };
                let tally = json!({
                    "seeds": t.seeds, "failed": t.failed, "events": t.events,
                    "acked": t.acked, "duplicates": t.duplicates, "duplicate_rate": rate,
                });
                (nodes.to_string(), tally)
            })
            .collect();
        let failing: Vec<String> = self.failures.iter().map(|o| format!("{:#x}", o.seed)).collect();
        json!({
            "seeds": self.seeds,
            "passed": self.passed,
            "failed": self.failed,
            "failing_seeds": failing,
            "seeds_per_sec": (self.seeds_per_sec() * 10.0).round() / 10.0,
            "events_per_sec": self.events_per_sec().round(),
            "wall_secs": (self.wall_secs * 100.0).round() / 100.0,
            "events": self.events,
            "simulated_ms": self.simulated_ms,
            "faults": RunOutcome::faults_json(&self.faults),
            "fault_classes_hit": self.faults.classes_hit(),
            "seeds_by_fault_class": RunOutcome::faults_json(&self.seeds_hit),
            "acked": self.acked,
            "visible": self.visible,
            "duplicates": self.duplicates,
            "duplicate_rate": self.duplicate_rate(),
            "duplicates_from_retries": self.duplicates_from_retries,
            "duplicates_same_partition": self.duplicates_same_partition,
            "idempotent_commits": self.idempotent_commits,
            "rerouted": self.rerouted,
            "remote_commits": self.remote_commits,
            "by_nodes": by_nodes,
            "lost_to_corruption": self.lost_to_corruption,
            "segments_deleted": self.segments_deleted,
            "records_deleted": self.records_deleted,
            "oldest_unacked_checks": self.oldest_checks,
            "oldest_unacked_excused": self.oldest_excused,
            "seeds_with_deletions": self.seeds_with_deletions,
            "excused_by_retention": self.excused_by_retention,
            "queue": self.queue.to_json(),
            "seeds_with_queue": self.seeds_with_queue,
            "access": self.access.to_json(),
            "seeds_with_quota_refusals": self.seeds_with_quota_refusals,
            "quota_refusals": self.quota_refusals,
            "topic_pages": self.topic_pages,
        })
    }
}

/// Runs seeds `from..to` under `options` on `jobs` threads; `progress` is called after each.
pub fn sweep(
    from: u64,
    to: u64,
    jobs: usize,
    options: &RunOptions,
    progress: &(dyn Fn(&RunOutcome) + Sync),
) -> SweepReport {
    let next = AtomicU64::new(from);
    let report = Mutex::new(SweepReport {
        idempotent_commits: options.idempotent_commits,
        ..SweepReport::default()
    });
    let started = WallClock::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= to {
                        break;
                    }
                    let outcome = run_seed_catching(seed, options, false);
                    progress(&outcome);
                    report
                        .lock()
                        .expect("invariant: no worker panics while holding the lock")
                        .add(outcome);
                }
            });
        }
    });
    let mut report = report.into_inner().expect("invariant: workers finished");
    report.failures.sort_by_key(|o| o.seed);
    report.wall_secs = started.elapsed().as_secs_f64();
    report
}
