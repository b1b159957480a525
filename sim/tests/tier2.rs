//! The second tier in `cargo test` (docs/contributing.md, "Tiers"): fresh seeds of the production
//! runtime on simulated hosts, one node and three, judged by the first tier's checker; a seed run
//! twice gives the same trace hash; every kept tier-2 seed (`seeds/runtime.txt`) passes; and a
//! peer reconnects to a restarted acceptor within a second (the derived stateless-reset key).

use std::time::Duration;

use narad_sim::swarm::Tier;
use narad_sim::{RunOptions, run_seed_catching};

fn runtime(nodes: u32) -> RunOptions {
    RunOptions { tier: Tier::Runtime, ..RunOptions::nodes(nodes) }
}

fn assert_passes(seeds: impl Iterator<Item = u64>, options: &RunOptions) -> usize {
    let mut ran = 0;
    for seed in seeds {
        let outcome = run_seed_catching(seed, options, false);
        assert!(outcome.passed, "tier-2 seed {seed:#x} failed:\n{}", outcome.failure_report());
        ran += 1;
    }
    ran
}

#[test]
fn fresh_single_node_seeds_pass() {
    // Seeds far from the sweeps' 0.. ranges, fresh for this test.
    assert_eq!(assert_passes(0x7_0000..0x7_0000 + 30, &runtime(1)), 30);
}

#[test]
fn fresh_three_node_seeds_pass() {
    assert_eq!(assert_passes(0x7_1000..0x7_1000 + 24, &runtime(3)), 24);
}

#[test]
fn a_seed_repeats_bit_for_bit() {
    for (seed, nodes) in [(0x7_2001, 1), (0x7_2002, 3)] {
        let a = run_seed_catching(seed, &runtime(nodes), false);
        let b = run_seed_catching(seed, &runtime(nodes), false);
        assert_eq!(a.trace_hash, b.trace_hash, "tier-2 seed {seed:#x} is not deterministic");
        assert_eq!((a.events, a.verdict), (b.events, b.verdict));
        assert!(a.events > 100, "the run did something: {} trace records", a.events);
    }
}

#[test]
fn kept_runtime_seeds_pass() {
    let text = include_str!("../../seeds/runtime.txt");
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let seed = narad_sim::parse_seed(words.next().expect("a seed")).expect("a valid seed");
        let nodes: u32 = words
            .next()
            .and_then(|w| w.strip_prefix("nodes="))
            .and_then(|n| n.parse().ok())
            .expect("nodes=N after the seed");
        assert_passes(std::iter::once(seed), &runtime(nodes));
    }
}

#[test]
fn a_peer_reconnects_to_a_restarted_acceptor_within_a_second() {
    for seed in [1, 2, 3] {
        let took = narad_sim::tier2::reconnect_after_acceptor_restart(seed)
            .expect("node 1 connected again within a minute");
        eprintln!("seed {seed}: node 1 connected again {took:?} after node 2 restarted");
        assert!(took < Duration::from_secs(1), "seed {seed}: reconnected after {took:?}");
    }
}
