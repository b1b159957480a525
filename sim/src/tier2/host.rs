//! One tier-2 node: the software of turmoil host `n<id>`. It does what `narad serve` does, with
//! the simulated seams: read the data directory (the harness's `SimDisk`), recover through
//! `narad::server::recover`, and serve through `narad::server::run_node` (the production
//! driver, router and transport) on turmoil's TCP and UDP. A graceful stop ends the process and
//! it starts again at once; a fatal exit or a failed start-up read restarts it a little later,
//! as a supervisor would; a recovery that refuses the disk keeps it down. Crashes and power
//! losses are the harness's (`turmoil::Sim::crash`, then `bounce`). On the seeds that run the
//! access client it starts as `--admin-password-file` would have it (`access.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use narad::cluster_cli::{ClusterArgs, ClusterPlan, Peers};
use narad::datadir::Found;
use narad::env::{NodeObserver, PeerTraffic};
use narad::server::{NodeParts, StopRequests};
use narad::{ClusterKey, TransportEnv};
use narad_core::{Node, NodeEvent};
use narad_sim_runtime::{Component, component_rng, component_seed};
use tokio::sync::mpsc;

use super::disk::SimDiskBackend;
use super::net::{SimListener, SimResolver, SimUdp};
use super::world::{Exit, Shared, SimEntropy, SimWall, World2, lock, now};
use crate::observe;
use crate::swarm::SwarmConfig;
use crate::trace::What;

/// Port of the HTTP API on every host.
pub const HTTP_PORT: u16 = 7942;
/// Port of node RPC (QUIC) on every host.
pub const CLUSTER_PORT: u16 = 7943;
/// The cluster secret of every tier-2 run.
const SECRET: &[u8] = b"tier-2 simulated cluster secret";

/// The turmoil host name of node index `n` (node id `n + 1`).
pub fn host_name(n: u32) -> String {
    format!("n{}", n + 1)
}

/// What every start of node `n` needs.
pub struct NodeSetup {
    pub seed: u64,
    pub n: u32,
    pub cfg: SwarmConfig,
}

/// The host software of node `n`: one process, from start-up to exit. When it exits (a graceful
/// stop, a failed start-up read, a fatal error) the harness drops the host's runtime (its
/// sockets and tasks go, as a process's would) and starts it again: at once after a graceful
/// stop, a little later otherwise, as a supervisor would.
pub async fn run_host(world: Shared, setup: Arc<NodeSetup>) -> turmoil::Result {
    let n = setup.n;
    lock(&world).peers.life(n, now().0);
    let served = start_and_serve(&world, &setup).await;
    let mut w = lock(&world);
    w.peers.life(n, now().0);
    match served {
        Served::Stopped => w.nodes[n as usize].exited = Some(Exit::Graceful),
        Served::ExitedEarly(reason) => {
            w.record(n, What::Fault { action: reason });
            w.nodes[n as usize].exited = Some(Exit::Early);
        }
        Served::Refused => w.nodes[n as usize].refused = true, // stays down
    }
    Ok(())
}

/// How one incarnation ended.
enum Served {
    /// A graceful stop: start again.
    Stopped,
    /// The process exited by itself (start-up read failed, fatal error): start again later.
    ExitedEarly(&'static str),
    /// Recovery refused the disk.
    Refused,
}

async fn start_and_serve(world: &Shared, setup: &NodeSetup) -> Served {
    let n = setup.n;
    let ip = turmoil::lookup(host_name(n));
    let plan = plan(setup, ip).expect("invariant: the tier-2 cluster flags are valid");
    let config = node_config(setup, &plan, ip);
    let Some((node, clock)) = recover(world, n, config) else { return Served::Refused };
    let Ok(node) = node else { return Served::ExitedEarly("start-read-failed") };
    let (done_tx, disk_done) = mpsc::unbounded_channel();
    let (disk, completer) = SimDiskBackend::new(n, world.clone(), done_tx);
    tokio::spawn(completer);
    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let (mut entropy, datagrams) = {
        let mut w = lock(world);
        let slot = &mut w.nodes[n as usize];
        slot.epoch += 1;
        slot.up = true;
        slot.stop = Some(stop_tx);
        let epoch = u64::from(slot.epoch);
        let entropy = component_rng(setup.seed ^ epoch, Component::Entropy(n + 1));
        (entropy, Arc::clone(&slot.datagrams))
    };
    let mut rng_seed = [0u8; 32];
    rand::Rng::fill_bytes(&mut entropy, &mut rng_seed);
    let entropy = Arc::new(SimEntropy { rng: Mutex::new(entropy) });
    let access = super::access::node_access(lock(world).admin.as_ref(), &*entropy);
    // The previous incarnation's host was dropped with its sockets: the ports are free.
    let Some(listener) = bound(SimListener::bind(HTTP_PORT).await) else {
        return Served::ExitedEarly("http-bind-failed");
    };
    let socket = if setup.cfg.nodes > 1 {
        let any = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), CLUSTER_PORT);
        let Some(udp) = bound(SimUdp::bind(any, datagrams).await) else {
            return Served::ExitedEarly("udp-bind-failed");
        };
        Some(narad::env::GivenSocket { socket: Arc::new(udp), rng_seed })
    } else {
        None
    };
    let transport = TransportEnv { socket, resolver: Arc::new(SimResolver), entropy };
    let parts = NodeParts {
        id: n + 1,
        node,
        clock,
        disk: Box::new(disk),
        disk_done,
        data_dir: None,
        observer: Box::new(Observer { n, world: world.clone() }),
        transport,
        access,
    };
    let mut stop = Stop(stop_rx);
    let result = narad::server::run_node(parts, plan, listener, &mut stop).await;
    ended(&mut lock(world), n, result)
}

/// Node `n`'s incarnation ended with `result`: a driver panic is a violation (the production
/// process would exit 1 and be restarted, as here).
fn ended(w: &mut World2, n: u32, result: anyhow::Result<narad_core::Stats>) -> Served {
    let slot = &mut w.nodes[n as usize];
    slot.up = false;
    slot.serving = false;
    slot.stop = None;
    match result {
        Ok(stats) => {
            w.totals.add(&stats);
            w.record(n, What::Fault { action: "stopped-gracefully" });
            Served::Stopped
        }
        Err(error) => {
            if let Some(panicked) = error.downcast_ref::<narad::server::DriverPanicked>() {
                let detail = format!("n{n}: {panicked}");
                w.checker.violation(crate::checker::inv::NODE_PANICKED, detail);
            }
            Served::ExitedEarly("fatal-exit")
        }
    }
}

/// The socket, or `None` after logging why the bind failed.
fn bound<T>(result: std::io::Result<T>) -> Option<T> {
    result.map_err(|error| tracing::warn!(%error, "bind failed")).ok()
}

/// Reads node `n`'s disk and recovers it with `config`. `None`: recovery refused the disk (the checker heard);
/// `Some(Err)`: the start-up read failed.
fn recover(
    world: &Shared,
    n: u32,
    config: narad_core::Config,
) -> Option<(Result<Node, ()>, narad::clock::Clock)> {
    let mut w = lock(world);
    let now = now();
    let skew = Arc::clone(&w.nodes[n as usize].skew);
    let mut clock = narad::clock::Clock::new(Arc::new(SimWall { skew }));
    let files = match w.nodes[n as usize].disk.read_at_start() {
        Ok(files) => files,
        Err(_) => return Some((Err(()), clock)),
    };
    w.checker_at(now).recovered_origins(n, &observe::recovered_origins(&files));
    match narad::server::recover(config, &mut clock, Found::from_files(files)) {
        Ok(node) => {
            w.nodes[n as usize].refused = false;
            w.checker_at(now).users_unknown(n);
            if node.recovered_segments().0 > 0 {
                w.hit(narad_sim_runtime::FaultClass::PartitionSealAdopted);
            }
            w.record(n, What::Started { ok: true });
            Some((Ok(node), clock))
        }
        Err(error) => {
            w.record(n, What::Started { ok: false });
            w.checker_at(now).recovery_failed(error.to_string());
            None
        }
    }
}

/// The cluster flags `narad serve` would get on this host.
fn plan(setup: &NodeSetup, ip: std::net::IpAddr) -> anyhow::Result<ClusterPlan> {
    let nodes = setup.cfg.nodes.max(1);
    let peers = (nodes > 1).then(|| {
        Peers(
            (0..nodes)
                .map(|m| (m + 1, format!("{}:{CLUSTER_PORT}", host_name(m))))
                .collect::<BTreeMap<_, _>>(),
        )
    });
    let args = ClusterArgs {
        peers,
        cluster: (nodes > 1).then_some(SocketAddr::new(ip, CLUSTER_PORT)),
        cluster_secret_file: None,
        heartbeat_ms: 1_000,
        dead_after_ms: 5_000,
    };
    ClusterPlan::with_key(setup.n + 1, &args, || Ok(ClusterKey::from_secret(SECRET)?))
}

/// The node's configuration: production's for these flags, with the seed's file sizes (as the
/// first tier sets them, so short runs reach snapshots, rotations and retention).
fn node_config(setup: &NodeSetup, plan: &ClusterPlan, ip: std::net::IpAddr) -> narad_core::Config {
    let seed = component_seed(setup.seed, Component::Node(setup.n + 1));
    let mut config = plan.node_config(setup.n + 1, seed, SocketAddr::new(ip, HTTP_PORT));
    crate::sim::apply_sizes(&mut config, &setup.cfg);
    config
}

/// The harness's graceful-stop requests (a closed channel asks nothing).
struct Stop(mpsc::UnboundedReceiver<()>);

impl StopRequests for Stop {
    async fn next(&mut self) -> &'static str {
        match self.0.recv().await {
            Some(()) => "graceful restart",
            None => std::future::pending().await,
        }
    }
}

/// Tells the checker what the node reports, as the first tier's host does.
struct Observer {
    n: u32,
    world: Shared,
}

impl NodeObserver for Observer {
    fn event(&mut self, event: &NodeEvent) {
        let mut w = lock(&self.world);
        if let Some(what) = crate::sim::world::traced(event) {
            w.record(self.n, what);
        }
        let now = now();
        w.checker_at(now).on_event(self.n, event);
    }

    fn replied(&mut self, reply: &narad_core::ClientReply) {
        if let narad_core::ClientReply::Produced { accepted } = reply {
            let mut w = lock(&self.world);
            let now = now();
            w.checker_at(now).node_answered_produce(self.n, *accepted);
        }
    }

    fn shut_down(&mut self, produces: usize, _unanswered: usize) {
        if produces > 0 {
            let detail =
                format!("n{}: graceful shutdown left {produces} produces unanswered", self.n);
            lock(&self.world).checker_at(now()).violation(crate::checker::inv::LIVENESS, detail);
        }
    }

    fn peer(&mut self, traffic: PeerTraffic<'_>) {
        lock(&self.world).peers.traffic(self.n, now().0, traffic);
    }

    fn serving(&mut self, node: &Node) {
        let mut w = lock(&self.world);
        w.nodes[self.n as usize].serving = true;
        let now = now();
        w.checker_at(now).on_restart(self.n, &node.partition_numbers(), node.clock().as_millis());
    }
}
