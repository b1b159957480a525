//! A sweep of fresh seeds in every `cargo test` (on all cores). The range is fixed so a failure
//! is reproducible by anyone: `narad-sim replay --seed 0x…`. `NARAD_SIM_SEEDS=N` changes how many,
//! `NARAD_SIM_SEED_BASE` where they start (nightly campaigns use other bases).

use narad_sim::sweep::sweep;

const DEFAULT_SEEDS: u64 = 5_000;
const DEFAULT_BASE: u64 = 0x5eed_0000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| narad_sim::parse_seed(&v).ok())
        .unwrap_or(default)
}

#[test]
fn fresh_seeds_pass_every_invariant() {
    let count = env_u64("NARAD_SIM_SEEDS", DEFAULT_SEEDS);
    let base = env_u64("NARAD_SIM_SEED_BASE", DEFAULT_BASE);
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let report = sweep(base, base + count, jobs, &|_| {});
    eprintln!(
        "sweep of {} seeds from {base:#x}: {} passed, {} failed, {:.0} seeds/s, {:.0} events/s, {} fault classes hit, duplicates {} of {} acked",
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
    assert!(
        report.failed == 0,
        "{} seeds failed:\n{}",
        report.failed,
        failing.join("\n")
    );
    assert!(
        report.faults.classes_hit() >= 12,
        "only {} fault classes were hit",
        report.faults.classes_hit()
    );
}
