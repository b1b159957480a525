//! A tier-2 scenario for the transport's stateless-reset key: two nodes, no faults; once node 1
//! (the dialer: the lower id dials) holds a connection to node 2 (the acceptor), node 2's process
//! is killed and started again at once, and the scenario measures how long node 1 takes to hold a
//! new authenticated connection. The restarted acceptor derives the same reset key from the
//! cluster secret and its id, so node 1's next packet on the dead connection draws a stateless
//! reset it trusts and it redials at once; with a key drawn at each start it would wait out the
//! 5 s idle timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use narad_sim_runtime::{Component, component_rng, component_seed};

use super::clients::node_addr;
use super::host::{NodeSetup, host_name};
use super::world::{Phase, Shared, instant_at, lock};
use crate::swarm::{FaultPlan, RunOptions, SwarmConfig};

/// Longest the scenario waits for anything (simulated time).
const WAIT: Duration = Duration::from_secs(60);

/// Simulated time from the acceptor's restart until the dialer holds a new connection (`None`:
/// not within a minute).
pub fn reconnect_after_acceptor_restart(seed: u64) -> Option<Duration> {
    let mut cfg = SwarmConfig::for_seed(seed, &RunOptions::nodes(2));
    cfg.faults = FaultPlan::default();
    cfg.net = Default::default();
    cfg.net.faults.latency_min_us = 100;
    cfg.net.faults.latency_max_us = 500;
    // A transport scenario: no access client, so no access control (it reads `/metrics` bare).
    cfg.workload.access_ops = 0;
    let world = Arc::new(Mutex::new(super::new_world(seed, &cfg, false)));
    let mut sim = turmoil::Builder::new()
        .simulation_duration(WAIT * 3)
        .tick_duration(Duration::from_millis(1))
        .rng_seed(component_seed(seed, Component::Turmoil))
        .build();
    for n in 0..2 {
        let setup = Arc::new(NodeSetup { seed, n, cfg: cfg.clone() });
        let world = world.clone();
        sim.host(host_name(n), move || super::host::run_host(world.clone(), setup.clone()));
    }
    let measured = Arc::new(Mutex::new(None));
    sim.client("client", watch(world.clone(), measured.clone()));
    let mut windows = super::faults::Windows::default();
    let mut supervisor = component_rng(seed, Component::Node(0));
    loop {
        let at = instant_at(sim.elapsed());
        let mut f =
            super::faults::Faults { sim: &mut sim, world: &world, windows: &mut windows, nodes: 2 };
        f.supervise(at, &mut supervisor);
        if lock(&world).phase == Phase::HealAsked {
            f.crash(at, 1, false);
            f.restart(1);
            lock(&world).phase = Phase::Healed;
        }
        match sim.step() {
            Ok(false) if sim.elapsed() < WAIT * 2 => {}
            _ => break,
        }
    }
    *measured.lock().expect("invariant: no panics while held")
}

/// The client host: waits for the first connection, asks for the restart (through the phase),
/// and times the reconnection.
async fn watch(world: Shared, measured: Arc<Mutex<Option<Duration>>>) -> turmoil::Result {
    let Some(before) = wait_for_connections(1).await else { return Ok(()) };
    lock(&world).phase = Phase::HealAsked;
    while lock(&world).phase != Phase::Healed {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let restarted = tokio::time::Instant::now();
    if wait_for_connections(before + 1).await.is_some() {
        *measured.lock().expect("invariant: no panics while held") = Some(restarted.elapsed());
    }
    Ok(())
}

/// Polls node 1's `/metrics` every millisecond until it counts `at_least` connections; returns
/// the count (`None`: not within `WAIT`).
async fn wait_for_connections(at_least: u64) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        let body = super::http::get(node_addr(0), "/metrics", Duration::from_secs(1), None).await;
        let count = body.and_then(|body| {
            let text = String::from_utf8_lossy(&body).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("narad_peer_connections_total "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        if let Some(count) = count.filter(|&c| c >= at_least) {
            return Some(count);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}
