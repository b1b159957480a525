//! The second simulation tier (docs/contributing.md, "Tiers"): the production runtime itself — the
//! `narad` library's driver, HTTP router and QUIC transport, started through
//! `narad::server::run_node` — on 1, 3 or 5 turmoil hosts, with the simulator's `SimDisk` behind
//! the disk seam. A client host speaks HTTP/1.1 to the real router; the first tier's workload
//! decides what it sends, and every outcome feeds the first tier's checker: the same invariants,
//! anomaly names, duplicate accounting and final read. Faults come from the first tier's
//! schedule (crashes, power losses, restarts, disk faults, partitions both ways and one way,
//! holds), plus per-datagram loss, duplication and reordering in the node's UDP socket and
//! clock skew through the wall-clock seam. On the seeds that run the access client, access
//! control is on: every request carries HTTP Basic credentials, and the first tier's access
//! checker judges the answers (`access.rs`). A seed decides everything: turmoil's rng, every
//! disk's, every node's entropy; a run repeats bit for bit, and its trace hash says so.

mod access;
mod clients;
mod disk;
mod faults;
mod final_phase;
mod host;
mod http;
mod http_users;
mod net;
mod peer_ledger;
mod reconnect;
mod world;

pub use reconnect::reconnect_after_acceptor_restart;

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use narad_sim_runtime::{Component, FaultClass, FaultHits, SimDisk, component_rng, component_seed};
use rand::RngExt;

use crate::checker::inv;
use crate::clock::since_start;
use crate::outcome::RunOutcome;
use crate::schedule::{FaultAction, draw_schedule_on};
use crate::swarm::{RunOptions, SwarmConfig};
use crate::trace::{Trace, What};
use host::{NodeSetup, host_name};
use net::{DatagramFaults, DatagramState};
use world::{NodeSlot, Phase, World2, instant_at, lock};

/// The active phase ends after this long even if clients are not done (clusters: twice that).
const ACTIVE_CAP: Duration = Duration::from_secs(30);
/// A run still going after this much simulated time is stopped as a livelock.
const RUN_CAP: Duration = Duration::from_secs(600);
/// Messages a tier-2 seed produces at most (its runs are slower than the first tier's).
const MESSAGES_MAX: u64 = 300;
/// Tier 2 runs this many times the access client's requests the first tier draws.
const ACCESS_OPS_FACTOR: u32 = 2;
/// Largest clock offset of a skewed node, either way.
const SKEW_OFFSET_MAX_MICROS: i64 = 30_000_000;

/// The swarm draw of `seed` as this tier runs it: the first tier's, without what its HTTP
/// workload does not speak yet (queue consumers, retention updates), and with fewer messages.
/// Seeds that run the access client run with access control on (`access.rs`).
pub fn config_for(seed: u64, options: &RunOptions) -> SwarmConfig {
    let mut cfg = SwarmConfig::for_seed(seed, options);
    cfg.workload.queue_workers = 0;
    cfg.workload.update_prob = 0.0;
    // Twice the first tier's access requests: a stale credential finds a node that cached it
    // more often (the seed's draw says whether it runs the access client at all).
    cfg.workload.access_ops *= ACCESS_OPS_FACTOR;
    cfg.workload.messages = cfg.workload.messages.min(MESSAGES_MAX);
    cfg
}

/// Runs `seed` on real runtimes; `keep_trace` keeps every trace record.
pub fn run_seed(seed: u64, options: &RunOptions, keep_trace: bool) -> RunOutcome {
    let cfg = config_for(seed, options);
    let nodes = cfg.nodes.max(1);
    let world = Arc::new(Mutex::new(new_world(seed, &cfg, keep_trace)));
    let mut sim = turmoil::Builder::new()
        .simulation_duration(RUN_CAP + Duration::from_secs(60))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_micros(cfg.net.faults.latency_min_us))
        .max_message_latency(Duration::from_micros(cfg.net.faults.latency_max_us.max(1)))
        .rng_seed(component_seed(seed, Component::Turmoil))
        .build();
    for n in 0..nodes {
        let setup = Arc::new(NodeSetup { seed, n, cfg: cfg.clone() });
        let world = world.clone();
        sim.host(host_name(n), move || host::run_host(world.clone(), setup.clone()));
    }
    sim.client(
        "client",
        client_host(world.clone(), nodes, component_rng(seed, Component::Routing)),
    );
    drive(&mut sim, &world, &cfg, seed);
    drop(sim);
    outcome(seed, &cfg, &world)
}

/// The client host: the workload, then (once the harness healed) the final phase.
async fn client_host(
    world: world::Shared,
    nodes: u32,
    route: rand_chacha::ChaCha8Rng,
) -> turmoil::Result {
    clients::run_workload(world.clone(), route).await;
    lock(&world).phase = Phase::HealAsked;
    while lock(&world).phase != Phase::Healed {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    final_phase::run(world, nodes).await;
    Ok(())
}

pub(crate) fn new_world(seed: u64, cfg: &SwarmConfig, keep_trace: bool) -> World2 {
    let nodes = cfg.nodes.max(1);
    let mut fault_rng = component_rng(seed, Component::Faults);
    let mut hits = FaultHits::default();
    let slots = (0..nodes)
        .map(|n| {
            let mut disk = SimDisk::new(component_rng(seed, Component::Disk(n + 1)));
            crate::sim::apply_rates(&mut disk, cfg);
            let net = &cfg.net.faults;
            let faults = if nodes > 1 {
                DatagramFaults {
                    loss: net.drop_rate,
                    duplicate: net.duplicate_rate,
                    reorder: net.spike_rate,
                }
            } else {
                DatagramFaults::default()
            };
            let datagrams =
                DatagramState::new(faults, component_rng(seed, Component::Datagrams(n + 1)));
            let mut skew = 0;
            if cfg.faults.clock_skew && fault_rng.random_bool(0.5) {
                skew = fault_rng.random_range(-SKEW_OFFSET_MAX_MICROS..=SKEW_OFFSET_MAX_MICROS);
                hits.hit(FaultClass::ClockSkew);
            }
            NodeSlot {
                disk,
                epoch: 0,
                serving: false,
                up: false,
                datagrams: Arc::new(Mutex::new(datagrams)),
                skew: Arc::new(AtomicI64::new(skew)),
                stop: None,
                exited: None,
                stop_at_wal_sync: None,
                refused: false,
                restart_at: None,
            }
        })
        .collect();
    let mut checker = crate::sim::long_poll_checker(nodes > 1, &cfg.net.faults);
    checker.answers_cross_a_network();
    checker.produce_quota(cfg.sizes.produce_quota_bytes_per_sec);
    let workload = crate::sim::workload_of(seed, cfg).access_over_http();
    let admin = workload.has_access_client().then(access::Basic::admin);
    let net = &cfg.net.faults;
    let datagram_faults =
        nodes > 1 && (net.drop_rate > 0.0 || net.duplicate_rate > 0.0 || net.spike_rate > 0.0);
    if datagram_faults {
        checker.disturbance(true);
    }
    let mut world = World2::new(slots, checker, workload, Trace::new(keep_trace));
    world.hits = hits;
    world.datagram_faults = datagram_faults;
    world.admin = admin;
    world
}

/// Steps the simulation, applying the fault schedule during the active phase and the heal
/// once the client host asks for it, until the client host is done.
fn drive(sim: &mut turmoil::Sim<'_>, world: &world::Shared, cfg: &SwarmConfig, seed: u64) {
    let nodes = cfg.nodes.max(1);
    let mut rng = component_rng(seed, Component::Faults);
    let schedule = draw_schedule_on(&cfg.faults, &cfg.net, nodes, cfg.horizon_ms, &mut rng);
    let cap = ACTIVE_CAP * if nodes > 1 { 2 } else { 1 };
    let mut windows = faults::Windows::default();
    let mut supervisor = component_rng(seed, Component::Node(0));
    let mut graceful = component_rng(seed, Component::Tier2Faults);
    let mut next = 0;
    loop {
        let elapsed = sim.elapsed();
        let at = instant_at(elapsed);
        let phase = lock(world).phase;
        let mut f = faults::Faults { sim, world, windows: &mut windows, nodes };
        if phase == Phase::Active {
            while next < schedule.len() && u128::from(schedule[next].at_ms) <= elapsed.as_millis() {
                let mut action = schedule[next].action.clone();
                // The first tier's schedule restarts gracefully only after a latch: here half
                // its process kills are graceful restarts, so shutdown runs under load too.
                if action == FaultAction::ProcessCrash && graceful.random_bool(0.5) {
                    action = FaultAction::GracefulRestart;
                }
                let n = schedule[next].node;
                // And half of those wait for a group commit in flight (up to 2 s).
                if action == FaultAction::GracefulRestart && graceful.random_bool(0.5) {
                    lock(world).record_at(at, n, What::Fault { action: "graceful-restart-armed" });
                    f.graceful_restart_in_group_commit(n, at.plus_micros(2_000_000));
                } else {
                    f.apply(at, n, &action);
                }
                next += 1;
            }
            if elapsed > cap {
                lock(world).workload.stop();
            }
        }
        f.armed_stops_due(at);
        f.supervise(at, &mut supervisor);
        if phase == Phase::HealAsked {
            heal(&mut f, at, nodes);
        }
        match sim.step() {
            Ok(true) => return,
            Ok(false) => {}
            Err(error) => {
                let detail = format!("a host failed: {error}");
                return lock(world).checker_at(at).violation(inv::PROTOCOL, detail);
            }
        }
        if elapsed > RUN_CAP {
            let detail = format!("run still going after {} s of simulated time", RUN_CAP.as_secs());
            return lock(world).checker_at(at).violation(inv::LIVENESS, detail);
        }
    }
}

/// Heals every fault, restarts every node that is down and restarts latched ones gracefully.
fn heal(f: &mut faults::Faults<'_, '_>, at: narad_core::Instant, nodes: u32) {
    lock(f.world).record_at(at, 0, What::Phase { name: "heal" });
    lock(f.world).workload.stop();
    f.heal();
    for n in 0..nodes {
        f.restart(n);
        if lock(f.world).checker.is_latched(n) {
            f.graceful_restart(n);
        }
    }
    lock(f.world).phase = Phase::Healed;
}

fn outcome(seed: u64, cfg: &SwarmConfig, world: &world::Shared) -> RunOutcome {
    let mut w = lock(world);
    let verdict = w.verdict.take().unwrap_or_default();
    let mut hits = w.hits;
    for slot in &w.nodes {
        hits.add(&slot.disk.hits);
        let d = slot.datagrams.lock().unwrap_or_else(std::sync::PoisonError::into_inner).hits;
        hits.hit_n(FaultClass::NetDrop, d.lost);
        hits.hit_n(FaultClass::NetDuplicate, d.duplicated);
        hits.hit_n(FaultClass::NetDelay, d.reordered);
    }
    let (violations, violation_count) = w.checker.violations();
    let mut faults_on = cfg.faults.names();
    faults_on.extend(cfg.net.names());
    RunOutcome {
        seed,
        scenario: None,
        tier: crate::swarm::Tier::Runtime,
        nodes: cfg.nodes.max(1),
        idempotent_commits: cfg.idempotent_commits,
        passed: violation_count == 0,
        events: w.trace_records(),
        simulated_ms: w.last_record_ms(),
        trace_hash: w.trace.hash().hex(),
        verdict,
        faults: hits,
        faults_on,
        violations: violations
            .iter()
            .map(|v| format!("{} (t={}): {}", v.invariant, since_start(v.at), v.detail))
            .collect(),
        violation_count,
        counters: w.checker.counters,
        totals: w.totals,
        recovery_refused: w.checker.recovery_refused.clone(),
        tail: w.trace.tail().iter().map(ToString::to_string).collect(),
        full_trace: w.trace.take_full(),
    }
}
