//! Sweeps of fresh seeds in every `cargo test` (on all cores): single-node seeds and cluster
//! seeds (3 and 5 nodes). The ranges are fixed so a failure is reproducible by anyone with the
//! replay command it prints. `NARAD_SIM_SEEDS=N` / `NARAD_SIM_CLUSTER_SEEDS=N` change how many,
//! `NARAD_SIM_SEED_BASE` where they start (nightly campaigns use other bases).

use narad_sim::sweep::{SweepReport, sweep};
use narad_sim::{NodesChoice, RunOptions};
use narad_sim_runtime::FaultClass;

const DEFAULT_SEEDS: u64 = 5_000;
const DEFAULT_CLUSTER_SEEDS: u64 = 2_000;
const DEFAULT_BASE: u64 = 0x5eed_0000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| narad_sim::parse_seed(&v).ok()).unwrap_or(default)
}

fn run(what: &str, count_var: &str, default: u64, options: RunOptions) -> SweepReport {
    let count = env_u64(count_var, default);
    let base = env_u64("NARAD_SIM_SEED_BASE", DEFAULT_BASE);
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let report = sweep(base, base + count, jobs, &options, &|_| {});
    eprintln!(
        "{what} sweep of {} seeds from {base:#x}: {} passed, {} failed, {:.0} seeds/s, {:.0} events/s, {} fault classes hit, duplicates {} of {} acked",
        report.seeds,
        report.passed,
        report.failed,
        report.seeds_per_sec(),
        report.events_per_sec(),
        report.faults.classes_hit(),
        report.duplicates,
        report.acked
    );
    for failure in &report.failures {
        eprintln!("{}", failure.failure_report());
    }
    let failing: Vec<String> = report.failures.iter().map(|o| o.replay_command()).collect();
    assert!(report.failed == 0, "{} seeds failed:\n{}", report.failed, failing.join("\n"));
    report
}

#[test]
fn fresh_single_node_seeds_pass_every_invariant() {
    let report = run("single-node", "NARAD_SIM_SEEDS", DEFAULT_SEEDS, RunOptions::nodes(1));
    let classes = report.faults.classes_hit();
    assert!(classes >= 12, "only {classes} fault classes were hit");
}

#[test]
fn fresh_cluster_seeds_pass_every_invariant() {
    let options = RunOptions { nodes: NodesChoice::Cluster, ..RunOptions::default() };
    let report = run("cluster", "NARAD_SIM_CLUSTER_SEEDS", DEFAULT_CLUSTER_SEEDS, options);
    for class in [
        FaultClass::Partition,
        FaultClass::OneWayPartition,
        FaultClass::LeaderIsolation,
        FaultClass::LeaderChange,
        FaultClass::NodeDeath,
        FaultClass::ProcessCrash,
        FaultClass::PowerLoss,
        FaultClass::NetDrop,
        FaultClass::Clog,
    ] {
        assert!(report.faults.get(class) > 0, "no {} in the cluster sweep", class.name());
    }
    for nodes in [3, 5] {
        assert!(report.by_nodes.get(&nodes).is_some_and(|t| t.seeds > 0), "no {nodes}-node seed");
    }
    assert!(report.remote_commits > 0 && report.rerouted > 0, "no remote commit or no reroute");
}

/// Duplicates are allowed, so no invariant catches a dedupe that stopped working: compare the
/// same seeds with the owners' idempotent commits on and off.
#[test]
fn idempotent_commits_prevent_same_partition_duplicates() {
    let (from, to) = (DEFAULT_BASE, DEFAULT_BASE + 300);
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let on = RunOptions { nodes: NodesChoice::Cluster, ..RunOptions::default() };
    let off = RunOptions { idempotent_commits: false, ..on };
    let with = sweep(from, to, jobs, &on, &|_| {});
    let without = sweep(from, to, jobs, &off, &|_| {});
    eprintln!(
        "duplicates on the same partition: {} with idempotent commits, {} without ({} acked)",
        with.duplicates_same_partition, without.duplicates_same_partition, with.acked
    );
    assert!(without.duplicates_same_partition > 100, "dedupe off made no duplicates to compare");
    assert!(
        with.duplicates_same_partition * 100 <= without.duplicates_same_partition,
        "idempotent commits prevented less than 99 % of same-partition duplicates"
    );
}
