//! `Simulation`: one seeded run of one node or a cluster. It owns the node hosts and the
//! `World`, pops events in (time, sequence) order and routes each to the host, disk, network,
//! workload or fault schedule it concerns. A run is an active phase (workload + faults), then
//! heal, drain and final checks (`final_phase`). Nothing here reads a clock or an OS random
//! source: the seed decides all.

mod cluster;
mod faults;
mod final_lag;
mod final_phase;
mod final_queue;
mod final_read;
mod net_faults;
mod report;
pub mod world;

use narad_core::quota::Payer;
use narad_core::{Config, DiskOp, FileId, Input, Instant, IoToken, NodeId};
use narad_sim_runtime::{
    Component, EventQueue, FaultHits, NodeHost, SimDisk, SimNetwork, component_rng, component_seed,
};

use crate::checker::{Checker, inv};
/// Re-exported: the simulation's clock origin lives in the leaf `crate::clock`.
pub use crate::clock::START;
use crate::outcome::{ClusterTotals, RunOutcome};
use crate::schedule::{FaultAction, ScheduledFault, draw_schedule_on};
use crate::swarm::{RunOptions, SwarmConfig};
use crate::trace::{DoneCode, OpKind, Trace, What};
use crate::workload::{Wake, Workload};
pub use faults::action_name;
use rand::RngExt;
pub use world::{Event, World};

/// The active phase ends after this long even if clients are not done (clusters: twice that,
/// so long deaths and network windows play out).
const ACTIVE_CAP_MICROS: u64 = 30_000_000;
/// Partition-log bytes per in-memory index entry in simulated nodes (production: 64 KiB).
const SIM_PARTITION_INDEX_INTERVAL_BYTES: u64 = 512;
/// A run with more events than this is stopped as a livelock.
const MAX_EVENTS: u64 = 5_000_000;
/// Events at one instant beyond this are a livelock (a timer re-armed in the past forever).
const MAX_EVENTS_AT_ONE_INSTANT: u64 = 200_000;
/// The violation `Node::check_invariants` failing after a step is reported as.
pub const NODE_INVARIANTS: &str = "node-invariants";

/// How a seed feeds its nodes (`Component::Batching`): like the tokio driver, which takes up to
/// 256 inputs of one channel per wakeup before it drains, or one input per drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Most inputs of one channel handed to a node before a drain (1: no batching).
    pub max: usize,
    /// A batch is drained once no further event falls within this long of its first input
    /// (the inputs that queued while the driver was busy).
    pub window_micros: u64,
}

impl Batching {
    /// The draw of `seed`: 40 % of seeds batch, with a max of 2 to 256 and a window of 0 (same
    /// instant only) to 5 ms.
    pub fn for_seed(seed: u64) -> Batching {
        let mut rng = component_rng(seed, Component::Batching);
        if !rng.random_bool(0.4) {
            return Batching { max: 1, window_micros: 0 };
        }
        let max = [2, 4, 8, 16, 64, 256][rng.random_range(0..6)];
        let window_micros = [0, 50, 500, 2_000, 5_000][rng.random_range(0..5)];
        Batching { max, window_micros }
    }
}

/// One seeded run.
pub struct Simulation {
    pub seed: u64,
    pub cfg: SwarmConfig,
    pub scenario: Option<String>,
    hosts: Vec<NodeHost>,
    world: World,
    schedule: Vec<ScheduledFault>,
    same_instant: (Instant, u64),
    aborted: bool,
    /// Cluster runs keep the active phase going until the last scheduled fault has struck.
    hold_until: Instant,
    /// Nodes still down after the heal (their recovery refused a damaged disk), a bit each.
    lost_nodes: u32,
    /// Nodes crashed and not started again, a bit each: the checker counts each as something
    /// that may lose messages between nodes (`Checker::loss`).
    down_for_loss: u32,
    pub batching: Batching,
}

impl Simulation {
    /// The run of `seed` under the swarm configuration it draws with `options`.
    pub fn from_seed(seed: u64, options: &RunOptions, keep_trace: bool) -> Simulation {
        let cfg = SwarmConfig::for_seed(seed, options);
        let mut rng = component_rng(seed, Component::Faults);
        let schedule = draw_schedule_on(&cfg.faults, &cfg.net, cfg.nodes, cfg.horizon_ms, &mut rng);
        Simulation::new(seed, cfg, schedule, keep_trace).with_batching(Batching::for_seed(seed))
    }

    /// Feeds the nodes in batches as `batching` says (swarm seeds draw it; scenarios do not).
    pub fn with_batching(mut self, batching: Batching) -> Simulation {
        for host in &mut self.hosts {
            host.set_batching(batching.max);
        }
        self.batching = batching;
        self
    }

    /// Prints every trace record as it happens instead of keeping them (`replay --trace`).
    pub fn print_trace_live(mut self) -> Simulation {
        self.world.trace = Trace::live();
        self
    }

    /// A run with an explicit configuration and fault schedule (scenarios).
    pub fn new(
        seed: u64,
        cfg: SwarmConfig,
        schedule: Vec<ScheduledFault>,
        keep_trace: bool,
    ) -> Simulation {
        let nodes = cfg.nodes.max(1);
        let batching = Batching { max: 1, window_micros: 0 };
        let hosts = (0..nodes).map(|n| NodeHost::new(n, node_config(seed, &cfg, n))).collect();
        let disks = (0..nodes)
            .map(|n| {
                let mut disk = SimDisk::new(component_rng(seed, Component::Disk(n + 1)));
                apply_rates(&mut disk, &cfg);
                disk
            })
            .collect();
        let mut net = SimNetwork::new(component_rng(seed, Component::Network));
        net.faults = cfg.net.faults.clone();
        let workload = workload_of(seed, &cfg);
        let last_fault_ms = schedule.iter().map(|f| f.at_ms).max().unwrap_or(0);
        let hold_until = if nodes > 1 { Instant(START.0 + last_fault_ms * 1_000) } else { START };
        let world = World {
            queue: EventQueue::new(START),
            disks,
            net,
            workload,
            checker: long_poll_checker(nodes > 1, &cfg.net.faults),
            trace: Trace::new(keep_trace),
            hits: FaultHits::default(),
            fault_rng: component_rng(seed, Component::Faults),
            route_rng: component_rng(seed, Component::Routing),
            healed: false,
            restart_on_latch: cfg.faults.restart_on_latch,
            latch_restart_pending: vec![false; nodes as usize],
            armed_crash: None,
            harness_request: None,
            harness_reply: None,
            next_harness: world::HARNESS_REQUEST_BASE,
            running: vec![None; nodes as usize],
            windows: Default::default(),
            leader: None,
            report_unreachable: cfg.net.report_unreachable,
            unreachable_pending: Default::default(),
            totals: Default::default(),
            pinned: (None, None),
        };
        let mut world = world;
        world.checker.queue_visibility(cfg.workload.queue_visibility_ms);
        world.checker.produce_quota(cfg.sizes.produce_quota_bytes_per_sec);
        if cfg.faults.read_error_rate > 0.0 || cfg.faults.read_corruption_rate > 0.0 {
            world.checker.queue_waits_unjudged();
        }
        if let Some(max) = cfg.workload.queue_max_deliveries {
            world.checker.dead_letter_topic(crate::workload::DEAD_LETTER_TOPIC, max);
        }
        Simulation {
            seed,
            cfg,
            scenario: None,
            hosts,
            world,
            schedule,
            same_instant: (START, 0),
            aborted: false,
            hold_until,
            lost_nodes: 0,
            down_for_loss: 0,
            batching,
        }
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.hosts.len()
    }

    /// Runs to the end and reports.
    pub fn run(mut self) -> RunOutcome {
        self.boot();
        let cap = ACTIVE_CAP_MICROS * if self.nodes() > 1 { 2 } else { 1 };
        while !self.aborted
            && (!self.world.workload.is_done() || self.world.queue.now() < self.hold_until)
        {
            if self.world.queue.now().0 >= START.0 + cap {
                break;
            }
            let Some(event) = self.world.queue.pop() else {
                break;
            };
            self.step(event);
        }
        let read_complete = if self.aborted { false } else { self.final_phase() };
        let verdict = self.world.checker.verdict(read_complete, self.lost_nodes);
        let mut outcome = self.outcome(verdict);
        outcome.full_trace = self.world.trace.take_full();
        outcome
    }

    fn boot(&mut self) {
        self.world.record(0, What::Phase { name: "boot" });
        if self.nodes() > 1 {
            self.boot_cluster();
        }
        let now = self.world.queue.now();
        for n in 0..self.nodes() {
            let started = self.hosts[n].start(now, Default::default(), &mut self.world);
            match started {
                Ok(()) => self.world.running[n] = Some(self.hosts[n].epoch()),
                Err(e) => self.world.checker.recovery_failed(format!("fresh node: {e}")),
            }
        }
        for client in 0..self.world.workload.clients() {
            let delay = self.world.workload.think();
            self.world.wake_client(client, delay);
        }
        for fault in std::mem::take(&mut self.schedule) {
            let at = Instant(START.0 + fault.at_ms * 1_000);
            let event = Event::Fault { node: fault.node, action: fault.action, scheduled: true };
            self.world.queue.push_at(at, event);
        }
    }

    /// Processes one event.
    fn step(&mut self, event: Event) {
        self.step_event(event);
        for n in 0..self.hosts.len() {
            self.report_invariants(n);
            self.exit_if_fatal(n);
            self.flush_batch(n);
        }
    }

    /// A node whose `check_invariants` failed is a violation; the run stops there (what follows
    /// would only report the consequences).
    fn report_invariants(&mut self, n: usize) {
        if let Some(failure) = self.hosts[n].take_invariant_failure() {
            self.world.checker.violation(NODE_INVARIANTS, format!("node {n}: {failure}"));
            self.aborted = true;
        }
    }

    /// Drains a node's batch once no further event falls within the batching window.
    fn flush_batch(&mut self, n: usize) {
        let Some(since) = self.hosts[n].batch_since() else { return };
        let end = since.0 + self.batching.window_micros;
        if self.aborted || self.world.queue.peek_time().is_none_or(|t| t.0 > end) {
            self.hosts[n].flush(&mut self.world);
        }
    }

    fn step_event(&mut self, event: Event) {
        let now = self.world.queue.now();
        self.world.checker.set_now(now);
        crate::trace::set_stamp(now.0 - START.0, self.world.queue.popped());
        self.guard_livelock(now);
        match event {
            Event::Disk { node, epoch, token, op } => self.disk_done(node, epoch, token, op),
            Event::Timer { node, generation } => {
                self.world.record(node, What::Timer);
                self.hosts[node as usize].fire_timer(now, generation, &mut self.world);
            }
            Event::ClientWake { client } => self.client_wake(client as usize),
            Event::ClientTimeout { request } => {
                if let Some((client, delay)) =
                    self.world.workload.on_timeout(request, &mut self.world.checker)
                {
                    self.world.record(0, What::Timeout { request: request.0 });
                    self.world.wake_client(client, delay);
                }
            }
            Event::Fault { node, action, scheduled } => {
                if !(scheduled && self.world.healed) {
                    self.apply_fault(node, action);
                }
            }
            Event::ShutdownCheck { node, epoch, deadline } => {
                self.shutdown_check(node, epoch, deadline);
            }
            Event::Deliver { from, to, epoch, bytes } => self.deliver(from, to, epoch, bytes),
            Event::Observe => self.observe(),
            Event::Unreachable { node, epoch, to } => self.unreachable(node, epoch, to),
        }
    }

    fn guard_livelock(&mut self, now: Instant) {
        if self.same_instant.0 == now {
            self.same_instant.1 += 1;
        } else {
            self.same_instant = (now, 0);
        }
        let stuck = self.same_instant.1 > MAX_EVENTS_AT_ONE_INSTANT;
        if (stuck || self.world.queue.popped() > MAX_EVENTS) && !self.aborted {
            self.aborted = true;
            let detail = format!(
                "livelock: {} events, {} at t={}",
                self.world.queue.popped(),
                self.same_instant.1,
                now.0
            );
            self.world.checker.violation(inv::LIVENESS, detail);
        }
    }

    fn disk_done(&mut self, node: u32, epoch: u32, token: IoToken, op: DiskOp) {
        let n = node as usize;
        if epoch != self.hosts[n].epoch() {
            return; // the process died with this operation in flight: it never happened
        }
        let result = self.world.disks[n].complete(&op);
        let (kind, _, _) = OpKind::of(&op);
        let file = op.file();
        self.world.record(
            node,
            What::DiskDone { token: token.0, kind, file, result: DoneCode::of(&result) },
        );
        crate::observe::collect_damage(&mut self.world.checker, &mut self.world.disks[n]);
        crate::observe::note_partition_tail(&mut self.world.checker, &op);
        if result.is_err() && matches!(file, FileId::ConsumerJournal { .. }) {
            // A latched journal makes its owner's partitions fail each round of a topic-wide
            // receive, which then waits out its deadline on the others: not judged (one node
            // too: its other partitions answer the round empty).
            self.world.checker.queue_waits_unjudged();
        }
        if let Some(armed) = self.world.armed_crash
            && armed.node == node
            && kind == armed.after
            && result.is_ok()
            && armed.target.matches(&file)
        {
            self.world.armed_crash = None;
            let action = match kind {
                OpKind::Sync => "crash-after-sync",
                _ => "crash-after-write",
            };
            self.world.record(node, What::Fault { action });
            self.crash(n, armed.power, true);
            let down = self.world.fault_rng.random_range(1_000..800_000);
            let action = FaultAction::Restart;
            self.world.queue.push_after(down, Event::Fault { node, action, scheduled: true });
            return;
        }
        let now = self.world.queue.now();
        self.hosts[n].disk_done(now, epoch, token, result, &mut self.world);
    }

    /// A node that reports a fatal error (a start-up sync or a metastore write failed) is
    /// stopped by its runtime, as the tokio runtime exits the process; what it had handed to
    /// the disk may still land. It is started again a little later.
    fn exit_if_fatal(&mut self, n: usize) {
        let fatal = self.hosts[n].node().is_some_and(|node| node.fatal_error().is_some());
        if fatal {
            self.exit_and_restart_later(n, "fatal-exit");
        }
    }

    fn client_wake(&mut self, client: usize) {
        let now = self.world.queue.now();
        match self.world.workload.wake(client, &mut self.world.checker) {
            Wake::Send { request, op, who } => {
                if let Some(n) = self.pick_node(self.world.workload.is_admin(client)) {
                    let what = What::Request {
                        request: request.0,
                        op: world::op_name(&op),
                        topic: crate::trace::TopicTag::of(&op),
                    };
                    self.world.record(n as u32, what);
                    let checker = &mut self.world.checker;
                    self.world.workload.delivered(client, request, n as u32, checker);
                    let who = who.principal();
                    if let Some(epoch) = self.world.running[n] {
                        checker.quota_sent(request, (n as u32, epoch), &op, Payer::of(&who));
                    }
                    let timeout = self.world.workload.timeout_micros();
                    self.world.queue.push_after(timeout, Event::ClientTimeout { request });
                    self.hosts[n].deliver(
                        now,
                        Input::Client { request, op: *op, who },
                        &mut self.world,
                    );
                } else {
                    self.world.record(0, What::Refused { client: client as u32 });
                    let delay = self.world.workload.refused(client);
                    self.world.wake_client(client, delay);
                }
            }
            Wake::Sleep(delay) => self.world.wake_client(client, delay),
            Wake::Done => {}
        }
    }

    /// Runs events up to and including time `until`, then sets the clock there.
    fn run_to(&mut self, until: Instant) {
        while !self.aborted && self.world.queue.peek_time().is_some_and(|t| t <= until) {
            let event = self.world.queue.pop().expect("invariant: peeked");
            self.step(event);
        }
        if !self.aborted {
            self.world.queue.advance_to(until);
        }
    }

    /// Runs until `done` holds (checked every `every_micros`) or `deadline`; true if it held.
    fn run_until(
        &mut self,
        deadline: Instant,
        every_micros: u64,
        done: impl Fn(&Simulation) -> bool,
    ) -> bool {
        loop {
            if done(self) {
                return true;
            }
            let now = self.world.queue.now();
            if now >= deadline || self.aborted {
                return false;
            }
            self.run_to(Instant(now.0 + every_micros).min(deadline));
        }
    }

    /// Accessors for the outcome report.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Cluster counters over every incarnation of every node, up to now.
    pub fn totals(&self) -> ClusterTotals {
        let mut totals = self.world.totals;
        for host in &self.hosts {
            if let Some(node) = host.node() {
                totals.add(&node.stats());
            }
        }
        totals
    }

    /// Sum of fault hits over the disks, the network and the process-level faults.
    pub fn fault_hits(&self) -> FaultHits {
        let mut hits = self.world.hits;
        hits.add(&self.world.net.hits);
        for disk in &self.world.disks {
            hits.add(&disk.hits);
        }
        hits
    }
}

/// The workload of `seed` (both tiers), each of its draws on its own stream.
pub fn workload_of(seed: u64, cfg: &SwarmConfig) -> Workload {
    let workload_rng = component_rng(seed, Component::Workload);
    let update_rng = component_rng(seed, Component::WorkloadUpdates);
    let poll_rng = component_rng(seed, Component::WorkloadLongPoll);
    let rngs = (workload_rng, update_rng, poll_rng);
    Workload::new(cfg.workload.clone(), rngs, cfg.nodes.max(1) > 1)
        .with_queue_rng(component_rng(seed, Component::WorkloadQueue))
        .with_access_rng(component_rng(seed, Component::WorkloadAccess))
}

/// The configuration of node index `n` (node id `n + 1`).
fn node_config(seed: u64, cfg: &SwarmConfig, n: u32) -> Config {
    let id = NodeId(n + 1);
    let node_seed = component_seed(seed, Component::Node(n + 1));
    let mut config = if cfg.nodes <= 1 {
        Config::single(id, node_seed)
    } else {
        let mut config = Config::cluster(id, node_seed, (1..=cfg.nodes).map(NodeId).collect());
        config.http_addr = format!("10.0.0.{}:7942", n + 1);
        config.cluster_addr = format!("10.0.0.{}:7943", n + 1);
        config
    };
    apply_sizes(&mut config, cfg);
    config
}

/// The seed's knobs on a node's configuration (both tiers): file sizes smaller than
/// production's, so short runs reach snapshots, rotations and retention, and the queue lease.
pub fn apply_sizes(config: &mut Config, cfg: &SwarmConfig) {
    config.idempotent_commits = cfg.idempotent_commits;
    // Small index intervals: a run's partitions hold kilobytes, and reads should still start
    // at an entry well before the wanted offset and skip frames (as production reads do).
    config.partition_index_interval_bytes = SIM_PARTITION_INDEX_INTERVAL_BYTES;
    config.meta_snapshot_every_entries = cfg.sizes.meta_snapshot_every_entries;
    config.wal_segment_bytes = cfg.sizes.wal_segment_bytes;
    config.wal_rotate_dispatched_bytes = cfg.sizes.wal_rotate_dispatched_bytes;
    config.partition_segment_bytes = cfg.sizes.partition_segment_bytes;
    config.retention_check_ms = cfg.sizes.retention_check_ms;
    config.retention_bytes_divisor = cfg.sizes.retention_bytes_divisor;
    config.consumer_journal_compact_bytes = cfg.sizes.consumer_journal_compact_bytes;
    config.consumer_journal_linger = cfg.sizes.consumer_journal_linger;
    config.wal_prewrite_chunk_bytes = cfg.sizes.wal_prewrite_chunk_bytes;
    config.flush_pairing_us = cfg.sizes.flush_pairing_us;
    config.dispatch_linger = cfg.sizes.dispatch_linger;
    config.produce_quota_bytes_per_sec = cfg.sizes.produce_quota_bytes_per_sec;
    config.wal_small_request_bytes = cfg.sizes.wal_small_request_bytes;
    config.wal_group_bulk_bytes = cfg.sizes.wal_group_bulk_bytes;
    // With the lease set on the topics, the nodes' default is the shortest there is: a node
    // that ignored a topic's lease would lease for less than the checker allows.
    config.queue_visibility_ms = if cfg.workload.queue_topic_lease {
        narad_core::api::MIN_VISIBILITY_TIMEOUT_MS
    } else {
        cfg.workload.queue_visibility_ms
    };
}

pub fn apply_rates(disk: &mut SimDisk, cfg: &SwarmConfig) {
    let f = &cfg.faults;
    disk.faults.fsync_error_rate = f.fsync_error_rate;
    disk.faults.write_error_rate = f.write_error_rate;
    disk.faults.read_error_rate = f.read_error_rate;
    disk.faults.start_read_error_rate = f.start_read_error_rate;
    disk.faults.read_corruption_rate = f.read_corruption_rate;
    disk.faults.torn_live_rate = f.torn_live_rate;
    disk.faults.misdirect_rate = f.misdirect_rate;
    disk.faults.lying_fsync_rate = f.lying_fsync_rate;
    disk.faults.missing_dir_fsync = f.missing_dir_fsync;
    disk.faults.torn_at_power_loss = f.torn_at_power_loss;
}

/// A checker whose long-poll bound allows one network hop of `net` (cluster runs).
pub fn long_poll_checker(cluster: bool, net: &narad_sim_runtime::NetFaults) -> Checker {
    let mut checker = Checker::new(cluster);
    if cluster {
        let spike = if net.spike_rate > 0.0 { net.spike_max_us } else { 0 };
        checker.set_long_poll_network_bound(net.latency_max_us.max(net.latency_min_us) + spike);
    }
    if net.drop_rate > 0.0 {
        checker.loss(true); // until the heal stops per-message faults
    }
    checker
}
