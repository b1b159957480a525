//! Seeded fault schedules over whole metastore clusters: crashes with torn writes, restarts,
//! symmetric and one-way partitions, message loss, duplication and reordering, while topics are
//! created and deleted. After healing, every replica must hold the same state, every
//! acknowledged topic creation must be there, and no term may ever have had two leaders (checked
//! after every event by the world).

use std::collections::BTreeSet;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::ids::{NodeId, TopicId};
use crate::meta::{Applied, MetaCommand};

use super::harness::{World, config, create};

struct Run {
    world: World,
    rng: ChaCha8Rng,
    nodes: u32,
    down: BTreeSet<u32>,
    /// Waiters of creations of names that are never deleted.
    kept: Vec<u64>,
}

impl Run {
    fn new(seed: u64, nodes: u32) -> Run {
        let configs = (1..=nodes)
            .map(|n| {
                let mut c = config(n, nodes, seed);
                c.snapshot_every_entries = 32;
                c
            })
            .collect();
        let mut world = World::with_configs(configs);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        world.chaos = Some(ChaCha8Rng::seed_from_u64(seed ^ 0x5eed));
        for host in world.hosts.values_mut() {
            host.disk_delay_ms = rng.random_range(1..=5);
        }
        world.heartbeating = (1..=nodes).map(NodeId).collect();
        Run { world, rng, nodes, down: BTreeSet::new(), kept: Vec::new() }
    }

    fn pick(&mut self) -> u32 {
        self.rng.random_range(1..=self.nodes)
    }

    fn step(&mut self, step: u32) {
        let pause = self.rng.random_range(20..600);
        self.world.run_for(pause);
        let majority_left = (self.down.len() as u32) < (self.nodes - 1) / 2;
        match self.rng.random_range(0..14) {
            0 | 1 if majority_left => {
                let victim = self.pick();
                self.crash(victim);
            }
            2 if majority_left => {
                if let Some(leader) = self.leaders().first().copied() {
                    self.crash(leader);
                }
            }
            3 | 4 => {
                let back = self.pick();
                if self.down.remove(&back) {
                    self.world.start(NodeId(back));
                }
            }
            5 => {
                let node = self.pick();
                self.world.isolate(node);
            }
            6 => {
                let (a, b) = (self.pick(), self.pick());
                self.world.cut.insert((NodeId(a), NodeId(b)));
            }
            7 => self.world.cut.clear(),
            8 if step.is_multiple_of(5) => self.power_loss(),
            _ => self.propose(step),
        }
    }

    fn crash(&mut self, node: u32) {
        if self.down.insert(node) {
            self.world.crash(NodeId(node));
        }
    }

    /// Every node loses power at once (torn tails everywhere), then all restart.
    fn power_loss(&mut self) {
        for node in 1..=self.nodes {
            self.crash(node);
        }
        for node in std::mem::take(&mut self.down) {
            self.world.start(NodeId(node));
        }
    }

    fn leaders(&self) -> Vec<u32> {
        (1..=self.nodes)
            .filter(|n| !self.down.contains(n) && self.world.meta(*n).is_leader())
            .collect()
    }

    fn propose(&mut self, step: u32) {
        let Some(&leader) = self.leaders().first() else {
            return;
        };
        let (command, keep) = match self.rng.random_range(0..3) {
            0 => (create("churn", 2), false),
            1 => {
                // The incarnation the proposer's replica knows (0: none, refused at apply).
                let meta = self.world.meta(leader);
                let id = meta.topic("churn").map_or(TopicId(0), |t| t.id);
                (MetaCommand::DeleteTopic { name: "churn".into(), id }, false)
            }
            _ => (create(&format!("keep{step}"), 3), true),
        };
        if let (Ok(waiter), true) = (self.world.propose(leader, command), keep) {
            self.kept.push(waiter);
        }
    }

    fn heal_and_check(mut self) -> Outcome {
        self.world.cut.clear();
        for node in std::mem::take(&mut self.down) {
            self.world.start(NodeId(node));
        }
        self.world.run_for(15_000);
        self.world.heartbeating.clear();
        self.world.run_for(3_000);
        let world = &self.world;
        assert!(world.leader().is_some(), "a leader after healing");
        let reference = world.meta(1);
        for n in 2..=self.nodes {
            let meta = world.meta(n);
            assert_eq!(meta.applied_index(), reference.applied_index(), "node {n}");
            assert!(meta.topics().eq(reference.topics()), "node {n} topics");
            assert_eq!(meta.members(), reference.members(), "node {n} members");
        }
        for waiter in &self.kept {
            if let Some(Ok(Applied::Created(info))) = world.results.get(waiter) {
                for n in 1..=self.nodes {
                    let found = world.meta(n).topic(&info.name).map(|t| t.id);
                    assert_eq!(found, Some(info.id), "acked {} lost on node {n}", info.name);
                }
            }
        }
        let installs = (1..=self.nodes).map(|n| world.meta(n).counters().snapshots_installed).sum();
        Outcome { terms: world.leaders_by_term.len(), installs, trace: self.world.trace }
    }
}

/// What a run went through (to check the faults actually bit) and its full output trace.
struct Outcome {
    terms: usize,
    installs: u64,
    trace: Vec<String>,
}

fn run(seed: u64, nodes: u32) -> Outcome {
    let mut run = Run::new(seed, nodes);
    for step in 0..150 {
        run.step(step);
    }
    run.heal_and_check()
}

fn sweep(seeds: std::ops::Range<u64>, nodes: u32) {
    let count = seeds.end - seeds.start;
    let (mut terms, mut installs) = (0, 0);
    for seed in seeds {
        let outcome = run(seed, nodes);
        terms += outcome.terms as u64;
        installs += outcome.installs;
    }
    // The schedules must actually change leaders and make followers catch up by snapshot.
    assert!(terms >= 3 * count, "{terms} terms over {count} seeds");
    assert!(installs >= count / 2, "{installs} snapshot installs over {count} seeds");
}

#[test]
fn three_node_clusters_survive_seeded_faults() {
    sweep(0..50, 3);
}

#[test]
fn five_node_clusters_survive_seeded_faults() {
    sweep(100..125, 5);
}

#[test]
fn a_faulty_run_replays_bit_for_bit() {
    let (first, second) = (run(0xfeed, 3).trace, run(0xfeed, 3).trace);
    assert!(first == second, "same seed, different outputs");
}
