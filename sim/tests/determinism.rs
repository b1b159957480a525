//! Determinism (docs/design.md §5.10): the same seed gives the same event trace bit for bit,
//! different seeds give different traces, and a replay with the full trace ends with the same hash
//! as a run — for single nodes and clusters alike.

use narad_sim::{RunOptions, run_seed};

#[test]
fn same_seed_same_trace_hash() {
    for (i, seed) in (0..24u64).map(|i| (i, i * 7_919 + 3)) {
        let options = RunOptions::nodes([1, 3, 5][i as usize % 3]);
        let a = run_seed(seed, &options, false);
        let b = run_seed(seed, &options, false);
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed:#x} is not deterministic");
        assert_eq!(a.events, b.events);
        assert_eq!(a.verdict, b.verdict);
    }
}

#[test]
fn replay_with_trace_matches_run() {
    for options in [RunOptions::nodes(1), RunOptions::nodes(3)] {
        let run = run_seed(0x5eed, &options, false);
        let replay = run_seed(0x5eed, &options, true);
        assert_eq!(run.trace_hash, replay.trace_hash);
        // Every event of a single node leaves a record (a cluster's periodic look at the leader
        // leaves one only when the leader changed).
        assert!(
            replay.full_trace.len() as u64 >= replay.events
                || options.nodes != RunOptions::nodes(1).nodes
        );
        let first = replay.full_trace.first().map(ToString::to_string).unwrap_or_default();
        assert!(first.starts_with("[t=0 e=0]"), "trace lines are stamped: {first}");
    }
}

#[test]
fn different_seeds_differ() {
    let options = RunOptions::default();
    let hashes: std::collections::BTreeSet<String> =
        (100..140u64).map(|s| run_seed(s, &options, false).trace_hash).collect();
    assert_eq!(hashes.len(), 40, "40 seeds gave only {} distinct traces", hashes.len());
}

#[test]
fn a_fixed_node_count_replays_what_the_swarm_picked() {
    for seed in 200..210u64 {
        let swarm = run_seed(seed, &RunOptions::default(), false);
        let fixed = run_seed(seed, &RunOptions::nodes(swarm.nodes), false);
        assert_eq!(swarm.trace_hash, fixed.trace_hash, "seed {seed:#x}");
    }
}
