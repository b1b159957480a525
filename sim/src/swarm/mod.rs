//! Swarm testing: each seed decides how many nodes it runs (1, 3 or 5, from its own stream so a
//! single-node seed draws exactly what it always drew), which fault classes are on and how hard
//! they hit, and what the workload looks like. Most seeds keep corruption-class faults (bit
//! flips, misdirected writes, lying fsyncs) off so they check the strict no-loss invariant; a few
//! turn one on. Cluster seeds add the network and process faults of [`cluster`]. Transient I/O
//! errors (a failed write, a failed start-up read of a metastore file) are drawn last.

pub mod cluster;
mod queue;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use narad_sim_runtime::{Component, component_rng};

pub use cluster::NetPlan;
pub(crate) use queue::{draw_queue, draw_queue_settings};

/// How many nodes a run has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodesChoice {
    /// The seed picks 1, 3 or 5 (swarm testing keeps single-node seeds in the mix).
    Swarm,
    /// The seed picks 3 or 5.
    Cluster,
    /// Exactly this many.
    Fixed(u32),
}

impl NodesChoice {
    /// The node count of `seed`. A fixed count gives the same run as the swarm picking it.
    pub fn pick(self, seed: u64) -> u32 {
        let mut rng = component_rng(seed, Component::Topology);
        let roll: u32 = rng.random_range(0..100);
        match self {
            NodesChoice::Fixed(n) => n,
            NodesChoice::Swarm if roll < 25 => 1,
            NodesChoice::Swarm if roll < 70 => 3,
            NodesChoice::Swarm => 5,
            NodesChoice::Cluster if roll < 60 => 3,
            NodesChoice::Cluster => 5,
        }
    }

    /// Parses `1`, `3`, `5` (any count from 1 to 9), `swarm` or `cluster`.
    pub fn parse(text: &str) -> Result<NodesChoice, String> {
        match text.trim() {
            "swarm" => Ok(NodesChoice::Swarm),
            "cluster" => Ok(NodesChoice::Cluster),
            n => match n.parse::<u32>() {
                Ok(n) if (1..=9).contains(&n) => Ok(NodesChoice::Fixed(n)),
                _ => Err(format!("--nodes takes 1..9, `swarm` or `cluster`, not `{n}`")),
            },
        }
    }
}

/// What a run is asked to be, beyond its seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    pub nodes: NodesChoice,
    /// `Config::idempotent_commits` on every node (off measures the duplicates it prevents).
    pub idempotent_commits: bool,
    /// Which simulation tier runs the seed.
    pub tier: Tier,
}

/// The simulation tiers (docs/design.md §5): the core's state machine under the simulator's
/// own scheduler, or the production runtime on turmoil hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tier {
    #[default]
    Core,
    Runtime,
}

impl Tier {
    /// The name `parse` takes.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Core => "core",
            Tier::Runtime => "runtime",
        }
    }

    /// Parses `core` or `runtime`.
    pub fn parse(text: &str) -> Result<Tier, String> {
        match text {
            "core" => Ok(Tier::Core),
            "runtime" => Ok(Tier::Runtime),
            other => Err(format!("unknown tier `{other}` (core or runtime)")),
        }
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { nodes: NodesChoice::Swarm, idempotent_commits: true, tier: Tier::Core }
    }
}

impl RunOptions {
    /// Options for exactly `nodes` nodes.
    pub fn nodes(nodes: u32) -> RunOptions {
        RunOptions { nodes: NodesChoice::Fixed(nodes), ..RunOptions::default() }
    }
}

/// Which faults a seed injects, and how hard.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Process kills (page cache survives), each followed by a restart.
    pub process_crashes: u32,
    /// Power losses (unsynced data dropped), each followed by a restart.
    pub power_losses: u32,
    /// Of the crashes, how many strike right after a sync lands (before the node sees it).
    pub precise_crashes: u32,
    /// Power loss keeps a torn, sector-aligned prefix of unsynced writes.
    pub torn_at_power_loss: bool,
    pub fsync_error_rate: f64,
    pub read_error_rate: f64,
    pub read_corruption_rate: f64,
    pub torn_live_rate: f64,
    pub missing_dir_fsync: bool,
    pub disk_full_windows: u32,
    pub slow_windows: u32,
    pub pauses: u32,
    /// Corruption class: writes to record files land at the wrong offset.
    pub misdirect_rate: f64,
    /// Corruption class: syncs of record files lie.
    pub lying_fsync_rate: f64,
    /// Corruption class: bits flip at rest while the node is down.
    pub bit_flips: u32,
    /// Restart the node (gracefully) after its WAL latches, as an operator would.
    pub restart_on_latch: bool,
    /// After the final read, cut the power once more and check nothing visible vanished.
    pub final_power_loss: bool,
    /// Cluster: nodes that die for longer than the membership dead timeout (a minority).
    pub deaths: u32,
    /// Cluster: nodes run on skewed clocks (offset and drift).
    pub clock_skew: bool,
    /// Transient write errors: a write to any file fails with EIO, nothing of it lands.
    pub write_error_rate: f64,
    /// One-shot write errors at random times (some while the nodes boot), each aimed at one
    /// class of file on one node; the metastore's files get their share.
    pub write_error_shots: u32,
    /// Reading a metastore file at start-up fails (per file and start-up): the process exits.
    pub start_read_error_rate: f64,
    /// Single node: one-shot failures aimed at partition logs (a failed write or fsync, a torn
    /// write), so failed commits and the commits after them are common.
    pub partition_failure_shots: u32,
    /// Queue seeds: one-shot failures aimed at the consumer journal (a failed write or fsync,
    /// a crash or power loss right after its write or sync lands; `schedule` places them).
    pub journal_shots: u32,
}

impl FaultPlan {
    /// True when a fault that may destroy the only copy of a record is on.
    pub fn corruption_class(&self) -> bool {
        self.misdirect_rate > 0.0 || self.lying_fsync_rate > 0.0 || self.bit_flips > 0
    }

    /// Names of the fault classes switched on.
    pub fn names(&self) -> Vec<&'static str> {
        let flags = [
            (self.process_crashes > 0, "process_crash"),
            (self.power_losses > 0, "power_loss"),
            (self.precise_crashes > 0, "crash_after_sync"),
            (self.torn_at_power_loss, "torn_write"),
            (self.fsync_error_rate > 0.0, "fsync_error"),
            (self.read_error_rate > 0.0, "read_error"),
            (self.read_corruption_rate > 0.0, "read_corruption"),
            (self.torn_live_rate > 0.0, "torn_write_live"),
            (self.missing_dir_fsync, "missing_dir_fsync"),
            (self.disk_full_windows > 0, "disk_full"),
            (self.slow_windows > 0, "slow_disk"),
            (self.pauses > 0, "pause"),
            (self.misdirect_rate > 0.0, "misdirected_write"),
            (self.lying_fsync_rate > 0.0, "lying_fsync"),
            (self.bit_flips > 0, "bit_flip"),
            (self.final_power_loss, "final_power_loss"),
            (self.deaths > 0, "node_death"),
            (self.clock_skew, "clock_skew"),
            (self.write_error_rate > 0.0 || self.write_error_shots > 0, "write_error"),
            (self.start_read_error_rate > 0.0, "start_read_error"),
            (self.partition_failure_shots > 0, "partition_failure"),
            (self.journal_shots > 0, "journal_failure"),
        ];
        flags.into_iter().filter(|(on, _)| *on).map(|(_, name)| name).collect()
    }
}

/// What the clients do.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub producers: u32,
    pub readers: u32,
    /// Messages to produce in total (each with a unique id).
    pub messages: u64,
    pub initial_topics: u32,
    /// Partitions of a created topic are drawn from `min_partitions..=max_partitions`.
    pub min_partitions: u32,
    pub max_partitions: u32,
    pub batch_prob: f64,
    pub max_batch: u32,
    pub keyed_prob: f64,
    pub pinned_prob: f64,
    /// Probability that a payload is large (up to `large_max` bytes).
    pub large_prob: f64,
    pub small_max: usize,
    pub large_max: usize,
    /// Longest pause between two operations of one client.
    pub think_max_us: u64,
    /// Probability per admin wake of deleting or creating a topic (0 = no churn).
    pub churn_prob: f64,
    /// Probability per admin wake of changing a live topic's retention (0 = never).
    pub update_prob: f64,
    /// Probability that a produce is deliberately invalid (must be rejected whole).
    pub invalid_prob: f64,
    pub request_timeout_ms: u64,
    /// Attempts of one produce after ambiguous answers.
    pub max_attempts: u32,
    /// Retention of the topics the workload creates (`None`: the default, 7 days).
    pub create_retention_ms: Option<u64>,
    /// Size bound of the topics it creates (`None`: none); the nodes divide it by
    /// `NodeSizes::retention_bytes_divisor`.
    pub create_retention_bytes: Option<u64>,
    /// Queue workers (receive, then ack, extend, nack or drop the lease); 0: no queue consume
    /// in this seed (see `swarm::queue`).
    pub queue_workers: u32,
    /// The lease a receive gives (`Config::queue_visibility_ms`), short so leases expire.
    pub queue_visibility_ms: u64,
    /// The workload's topics carry that lease as their own `visibility_timeout_ms` (the
    /// nodes' default is then the shortest allowed).
    pub queue_topic_lease: bool,
    /// The workload's topics send a message to the dead-letter topic after this many
    /// deliveries (`None`: they have no dead-letter topic).
    pub queue_max_deliveries: Option<u32>,
    /// Probability that a reader's consume is a long-poll (`wait_ms` > 0; 0 = never).
    pub long_poll_prob: f64,
    /// Requests of the access client (users, grants, requests as those users; 0: none in this
    /// seed). Drawn on its own stream (`draw_access`).
    pub access_ops: u32,
    /// The nodes set a produce quota: a 429 to a produce is retried, not a violation.
    pub produce_quota: bool,
}

impl WorkloadConfig {
    /// The queue settings of the topics the workload creates (the dead-letter topic's own are
    /// the default).
    pub fn queue_settings(&self) -> narad_core::api::QueueSettings {
        narad_core::api::QueueSettings {
            visibility_timeout_ms: self.queue_topic_lease.then_some(self.queue_visibility_ms),
            dead_letter: self.queue_max_deliveries.map(|max_deliveries| {
                narad_core::api::DeadLetter {
                    max_deliveries,
                    topic: crate::workload::DEAD_LETTER_TOPIC.to_string(),
                }
            }),
        }
    }
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            producers: 2,
            readers: 1,
            messages: 200,
            initial_topics: 2,
            min_partitions: 1,
            max_partitions: 4,
            batch_prob: 0.2,
            max_batch: 16,
            keyed_prob: 0.4,
            pinned_prob: 0.2,
            large_prob: 0.0,
            small_max: 200,
            large_max: 64 * 1024,
            think_max_us: 2_000,
            churn_prob: 0.0,
            update_prob: 0.0,
            invalid_prob: 0.02,
            request_timeout_ms: 2_000,
            max_attempts: 8,
            create_retention_ms: None,
            create_retention_bytes: None,
            queue_workers: 0,
            queue_visibility_ms: narad_core::constants::DEFAULT_VISIBILITY_TIMEOUT_MS,
            queue_topic_lease: false,
            queue_max_deliveries: None,
            long_poll_prob: 0.0,
            access_ops: 0,
            produce_quota: false,
        }
    }
}

/// Everything a seed decides before the run starts.
#[derive(Clone, Debug)]
pub struct SwarmConfig {
    /// Nodes in the cluster (1: a single node, the only voter of its metastore).
    pub nodes: u32,
    pub faults: FaultPlan,
    /// The network's faults (cluster runs; all off for one node).
    pub net: NetPlan,
    pub workload: WorkloadConfig,
    /// Window in which scheduled faults strike.
    pub horizon_ms: u64,
    /// Owners skip records a partition already holds (`Config::idempotent_commits`).
    pub idempotent_commits: bool,
    /// Sizes of the nodes' files, smaller than production's so short runs reach what large
    /// ones do (metastore snapshots and Raft log resets).
    pub sizes: NodeSizes,
}

/// File-size knobs of every node of a run (`Config` fields). `Default` is production's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSizes {
    /// `Config::meta_snapshot_every_entries`.
    pub meta_snapshot_every_entries: u64,
    /// `Config::wal_segment_bytes`.
    pub wal_segment_bytes: u64,
    /// `Config::wal_rotate_dispatched_bytes`.
    pub wal_rotate_dispatched_bytes: u64,
    /// `Config::partition_segment_bytes`.
    pub partition_segment_bytes: u64,
    /// `Config::retention_check_ms`.
    pub retention_check_ms: u64,
    /// `Config::retention_bytes_divisor`.
    pub retention_bytes_divisor: u64,
    /// `Config::consumer_journal_compact_bytes`.
    pub consumer_journal_compact_bytes: u64,
    /// `Config::consumer_journal_linger`.
    pub consumer_journal_linger: bool,
    /// `Config::wal_prewrite_chunk_bytes`.
    pub wal_prewrite_chunk_bytes: u64,
    /// `Config::flush_pairing_us`.
    pub flush_pairing_us: u64,
    /// `Config::dispatch_linger`.
    pub dispatch_linger: bool,
    /// `Config::wal_small_request_bytes`.
    pub wal_small_request_bytes: u64,
    /// `Config::wal_group_bulk_bytes`.
    pub wal_group_bulk_bytes: u64,
    /// `Config::produce_quota_bytes_per_sec`.
    pub produce_quota_bytes_per_sec: u64,
}

impl Default for NodeSizes {
    fn default() -> Self {
        NodeSizes {
            meta_snapshot_every_entries: narad_core::constants::META_SNAPSHOT_EVERY_ENTRIES,
            wal_segment_bytes: narad_core::constants::WAL_SEGMENT_BYTES,
            wal_rotate_dispatched_bytes: narad_core::constants::WAL_ROTATE_DISPATCHED_BYTES,
            partition_segment_bytes: narad_core::constants::PARTITION_SEGMENT_BYTES,
            retention_check_ms: narad_core::constants::RETENTION_CHECK_MS,
            retention_bytes_divisor: 1,
            consumer_journal_compact_bytes: narad_core::constants::CONSUMER_JOURNAL_COMPACT_BYTES,
            consumer_journal_linger: true,
            wal_prewrite_chunk_bytes: narad_core::constants::WAL_PREWRITE_CHUNK_BYTES,
            flush_pairing_us: narad_core::constants::FLUSH_PAIRING_US,
            dispatch_linger: true,
            wal_small_request_bytes: narad_core::constants::WAL_SMALL_REQUEST_BYTES,
            wal_group_bulk_bytes: narad_core::constants::WAL_GROUP_BULK_BYTES,
            produce_quota_bytes_per_sec: 0,
        }
    }
}

/// Half the seeds snapshot the metastore every 4 to 64 entries (a run applies a few hundred:
/// heartbeats, creates, deletes), so snapshots, log resets and their faults happen. Then (drawn
/// last) half the seeds seal WAL segments past 1 to 64 KiB and rotate dispatched ones past 512 B
/// up to the segment size: a run writes tens of KiB to a few MiB, so it holds several sealed
/// segments, some with a backlog, and compaction and recovery work across them. Last, half the
/// seeds seal partition log segments past 128 B to 16 KiB: a partition takes a few KiB in a run,
/// so its log rolls (often after every commit at the low end) and reads and recovery cross
/// segment boundaries.
/// WAL pre-writing, drawn after everything else (every earlier draw of a seed stays what it
/// was): a quarter of the seeds do not pre-write, the others pre-write chunks of 512 B, 4 KiB
/// or production's 256 KiB, so that small WAL segments are pre-written to their end.
pub(crate) fn draw_prewrite(rng: &mut ChaCha8Rng, sizes: &mut NodeSizes) {
    sizes.wal_prewrite_chunk_bytes = match rng.random_range(0..4) {
        0 => 0,
        1 => 512,
        2 => 4_096,
        _ => narad_core::constants::WAL_PREWRITE_CHUNK_BYTES,
    };
}

/// The hold of a lone producer's partition work for the next group commit, drawn after WAL
/// pre-writing (earlier draws stay what they were): a quarter of the seeds do not hold, the
/// others hold up to 200 µs, production's 1 ms, or 5 ms (longer than most simulated fsyncs, so
/// held work often goes with a group commit rather than at its deadline).
pub(crate) fn draw_flush_pairing(rng: &mut ChaCha8Rng, sizes: &mut NodeSizes) {
    sizes.flush_pairing_us = match rng.random_range(0..4) {
        0 => 0,
        1 => 200,
        2 => narad_core::constants::FLUSH_PAIRING_US,
        _ => 5_000,
    };
}

/// The dispatch linger rule, drawn after the flush-pairing hold (earlier draws stay what they
/// were): on for half the seeds (production's schedule: small batches wait 2-50 ms for company),
/// off for the others (every batch goes as soon as its destination is free).
pub(crate) fn draw_dispatch_linger(rng: &mut ChaCha8Rng, sizes: &mut NodeSizes) {
    sizes.dispatch_linger = rng.random_bool(0.5);
}

/// The WAL's lanes (`core/src/wal/staging.rs`), drawn after the linger (earlier draws stay what
/// they were). A run's requests take tens of bytes to a few KiB, never production's 64 KiB: a
/// quarter of the seeds keep production's bounds (every request small), the others make
/// requests past 128 B, 512 B or none (0: every request bulk) join group commits behind the
/// small ones, one bulk request per group or a few KiB of them (chunked at a quarter of that:
/// 1 B, 512 B, 1 KiB; with every request bulk, groups take four chunks).
pub(crate) fn draw_wal_lanes(rng: &mut ChaCha8Rng, sizes: &mut NodeSizes) {
    (sizes.wal_small_request_bytes, sizes.wal_group_bulk_bytes) = match rng.random_range(0..4) {
        0 => (
            narad_core::constants::WAL_SMALL_REQUEST_BYTES,
            narad_core::constants::WAL_GROUP_BULK_BYTES,
        ),
        1 => (128, 1),
        2 => (512, 2_048),
        _ => (0, 4_096),
    };
}

/// The produce quota (`core/src/quota.rs`), drawn after the WAL's lanes (earlier draws stay
/// what they were): none for three quarters of the seeds; for the others 2, 8 or 32 KiB/s per
/// payer per node. A run's producers send a few KiB/s to some tens of KiB/s, so the lower ones
/// refuse produces all the time and the highest now and then.
pub(crate) fn draw_produce_quota(
    rng: &mut ChaCha8Rng,
    workload: &mut WorkloadConfig,
    sizes: &mut NodeSizes,
) {
    sizes.produce_quota_bytes_per_sec = match rng.random_range(0..12) {
        0 => 2_048,
        1 => 8_192,
        2 => 32_768,
        _ => 0,
    };
    workload.produce_quota = sizes.produce_quota_bytes_per_sec > 0;
}

pub(crate) fn draw_sizes(rng: &mut ChaCha8Rng) -> NodeSizes {
    let mut sizes = NodeSizes::default();
    if rng.random_bool(0.5) {
        sizes.meta_snapshot_every_entries = rng.random_range(4..=64);
    }
    if rng.random_bool(0.5) {
        let segment_log2 = rng.random_range(10..=16u32);
        sizes.wal_segment_bytes = 1 << segment_log2;
        sizes.wal_rotate_dispatched_bytes = 1 << rng.random_range(9..=segment_log2);
    }
    if rng.random_bool(0.5) {
        sizes.partition_segment_bytes = 1 << rng.random_range(7..=14u32);
    }
    sizes
}

impl SwarmConfig {
    /// A healthy run with the given workload.
    pub fn quiet(workload: WorkloadConfig) -> SwarmConfig {
        SwarmConfig {
            nodes: 1,
            faults: FaultPlan::default(),
            net: NetPlan::default(),
            workload,
            horizon_ms: 2_000,
            idempotent_commits: true,
            sizes: NodeSizes::default(),
        }
    }

    /// The configuration of `seed` under `options`.
    pub fn for_seed(seed: u64, options: &RunOptions) -> SwarmConfig {
        let nodes = options.nodes.pick(seed);
        let mut cfg = if nodes == 1 { SwarmConfig::draw(seed) } else { cluster::draw(seed, nodes) };
        cfg.idempotent_commits = options.idempotent_commits;
        cfg.workload.access_ops = draw_access(seed);
        cfg
    }

    /// The configuration seed `seed` draws.
    pub fn draw(seed: u64) -> SwarmConfig {
        let mut rng = component_rng(seed, Component::Swarm);
        let mut workload = draw_workload(&mut rng);
        let mut faults = draw_faults(&mut rng);
        let horizon_ms = rng.random_range(300..2_500);
        draw_io_errors(&mut rng, &mut faults);
        let sizes = draw_sizes(&mut rng);
        draw_partition_failures(&mut rng, &mut faults);
        workload.update_prob = draw_update_prob(&mut rng);
        workload.think_max_us = think_for(&workload, horizon_ms);
        let mut sizes = sizes;
        draw_retention(&mut rng, &mut workload, &mut sizes);
        draw_queue(&mut rng, &mut workload, &mut sizes, &mut faults);
        draw_long_poll(&mut rng, &mut workload);
        draw_queue_settings(&mut rng, &mut workload, &mut sizes);
        draw_prewrite(&mut rng, &mut sizes);
        draw_flush_pairing(&mut rng, &mut sizes);
        draw_dispatch_linger(&mut rng, &mut sizes);
        draw_wal_lanes(&mut rng, &mut sizes);
        draw_produce_quota(&mut rng, &mut workload, &mut sizes);
        SwarmConfig {
            nodes: 1,
            faults,
            net: NetPlan::default(),
            workload,
            horizon_ms,
            idempotent_commits: true,
            sizes,
        }
    }
}

/// The access client runs on half the seeds, for 20 to 60 requests; drawn on its own stream so
/// the seeds' other draws are those of the build before it.
fn draw_access(seed: u64) -> u32 {
    let mut rng = component_rng(seed, Component::WorkloadAccess);
    if rng.random_bool(0.5) { rng.random_range(20..=60) } else { 0 }
}

/// Long-poll consumes on 60 % of seeds, for 30-100 % of a reader's consumes (a seed without
/// readers gets one). Drawn after everything else in the swarm stream.
pub(crate) fn draw_long_poll(rng: &mut ChaCha8Rng, w: &mut WorkloadConfig) {
    if rng.random_bool(0.6) {
        w.long_poll_prob = rng.random_range(0.3..=1.0);
        w.readers = w.readers.max(1);
    }
}

/// Topic updates on 40 % of seeds, at 5-30 % of the admin's wakes. Drawn after everything else
/// in the swarm stream, so every earlier draw of a seed stays what it was.
pub(crate) fn draw_update_prob(rng: &mut ChaCha8Rng) -> f64 {
    if rng.random_bool(0.4) { rng.random_range(0.05..0.3) } else { 0.0 }
}

/// Retention, drawn last of all: 35 % of seeds create their topics with a retention of 1 to 4
/// simulated seconds (a run lasts a few, so segments age out while clients still produce and
/// read, and during the final read), and 15 % with a size bound of 4 to 16 MiB, applied divided
/// by 1,024 (a run writes a few KiB per partition). Every seed runs the retention pass every
/// 100 ms to 1 s; PATCHes (`draw_update_prob`) change retention in other seeds too.
pub(crate) fn draw_retention(rng: &mut ChaCha8Rng, w: &mut WorkloadConfig, sizes: &mut NodeSizes) {
    use narad_core::constants::MIN_RETENTION_BYTES;
    if rng.random_bool(0.35) {
        w.create_retention_ms = Some(rng.random_range(1_000..=4_000));
    }
    if rng.random_bool(0.15) {
        w.create_retention_bytes =
            Some(rng.random_range(MIN_RETENTION_BYTES..=4 * MIN_RETENTION_BYTES));
    }
    sizes.retention_check_ms = rng.random_range(100..=1_000);
    sizes.retention_bytes_divisor = 1_024;
}

/// The longest think time that spreads the workload's requests over about `horizon_ms`, so
/// scheduled faults strike while clients are busy.
pub(crate) fn think_for(w: &WorkloadConfig, horizon_ms: u64) -> u64 {
    let per_request = 1.0 + w.batch_prob * f64::from(w.max_batch) / 2.0;
    let requests_per_producer = w.messages as f64 / per_request / f64::from(w.producers.max(1));
    (2.0 * horizon_ms as f64 * 1_000.0 / requests_per_producer.max(1.0)) as u64
}

pub(crate) fn draw_workload(rng: &mut ChaCha8Rng) -> WorkloadConfig {
    let big = rng.random_bool(0.1);
    WorkloadConfig {
        producers: rng.random_range(1..=4),
        readers: rng.random_range(0..=2),
        messages: rng.random_range(100..=500),
        initial_topics: rng.random_range(1..=3),
        min_partitions: 1,
        max_partitions: rng.random_range(1..=6),
        batch_prob: rng.random_range(0.0..0.4),
        max_batch: rng.random_range(2..=32),
        keyed_prob: rng.random_range(0.0..0.6),
        pinned_prob: rng.random_range(0.0..0.3),
        large_prob: if big { rng.random_range(0.05..0.3) } else { 0.0 },
        small_max: rng.random_range(16..=400),
        large_max: 64 * 1024,
        think_max_us: rng.random_range(0..=3_000),
        churn_prob: if rng.random_bool(0.2) { rng.random_range(0.05..0.3) } else { 0.0 },
        update_prob: 0.0, // drawn last (`draw_update_prob`)
        invalid_prob: if rng.random_bool(0.3) { 0.03 } else { 0.0 },
        request_timeout_ms: rng.random_range(1_000..=3_000),
        max_attempts: 8,
        create_retention_ms: None, // drawn last (`draw_retention`)
        create_retention_bytes: None,
        queue_workers: 0, // drawn last of all (`draw_queue`)
        queue_visibility_ms: narad_core::constants::DEFAULT_VISIBILITY_TIMEOUT_MS,
        queue_topic_lease: false, // drawn after everything (`draw_queue_settings`)
        queue_max_deliveries: None,
        long_poll_prob: 0.0,  // drawn after everything (`draw_long_poll`)
        access_ops: 0,        // drawn on its own stream (`draw_access`)
        produce_quota: false, // drawn last (`draw_produce_quota`)
    }
}

pub(crate) fn draw_faults(rng: &mut ChaCha8Rng) -> FaultPlan {
    let mut on = |p: f64| rng.random_bool(p);
    let (crash, power, precise, torn) = (on(0.5), on(0.5), on(0.3), on(0.6));
    let (fsync, read, read_corrupt, torn_live) = (on(0.3), on(0.25), on(0.2), on(0.2));
    let (dir, full, slow, pause) = (on(0.3), on(0.25), on(0.3), on(0.25));
    let corruption = on(0.08);
    let latch_restart = on(0.8);
    let final_loss = on(0.25);
    let mut plan = FaultPlan {
        process_crashes: if crash { rng.random_range(1..=3) } else { 0 },
        power_losses: if power { rng.random_range(1..=3) } else { 0 },
        precise_crashes: if precise { rng.random_range(1..=2) } else { 0 },
        torn_at_power_loss: torn,
        fsync_error_rate: if fsync { rng.random_range(0.002..0.03) } else { 0.0 },
        read_error_rate: if read { rng.random_range(0.005..0.05) } else { 0.0 },
        read_corruption_rate: if read_corrupt { rng.random_range(0.005..0.05) } else { 0.0 },
        torn_live_rate: if torn_live { rng.random_range(0.005..0.05) } else { 0.0 },
        missing_dir_fsync: dir,
        disk_full_windows: if full { rng.random_range(1..=3) } else { 0 },
        slow_windows: if slow { rng.random_range(1..=3) } else { 0 },
        pauses: if pause { rng.random_range(1..=3) } else { 0 },
        restart_on_latch: latch_restart,
        final_power_loss: final_loss,
        ..FaultPlan::default()
    };
    if corruption {
        match rng.random_range(0..3) {
            0 => plan.misdirect_rate = rng.random_range(0.002..0.02),
            1 => plan.lying_fsync_rate = rng.random_range(0.01..0.2),
            _ => plan.bit_flips = rng.random_range(1..=2),
        }
        if plan.bit_flips > 0 || plan.lying_fsync_rate > 0.0 {
            plan.power_losses = plan.power_losses.max(1);
        }
    }
    plan
}

/// The transient I/O errors of a seed. Drawn after everything else from the swarm stream, so
/// every other field of a seed is what it was before these faults existed.
pub(crate) fn draw_io_errors(rng: &mut ChaCha8Rng, plan: &mut FaultPlan) {
    if rng.random_bool(0.35) {
        let (rate, shots) = match rng.random_range(0..3) {
            0 => (true, false),
            1 => (false, true),
            _ => (true, true),
        };
        plan.write_error_rate = if rate { rng.random_range(0.001..0.01) } else { 0.0 };
        plan.write_error_shots = if shots { rng.random_range(1..=4) } else { 0 };
    }
    if rng.random_bool(0.25) {
        plan.start_read_error_rate = rng.random_range(0.1..0.5);
    }
}

/// Single node, drawn last of all: four seeds in ten aim 2 to 12 one-shot failures at partition
/// logs (`schedule::draw_partition_failures` places them), so a failed commit and the commit
/// after it on the same partition happen in most of those seeds rather than once in hundreds.
pub(crate) fn draw_partition_failures(rng: &mut ChaCha8Rng, plan: &mut FaultPlan) {
    if rng.random_bool(0.4) {
        plan.partition_failure_shots = rng.random_range(2..=12);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_counts_mix_and_a_fixed_count_draws_what_the_swarm_would() {
        let picks: Vec<u32> = (0..1000).map(|s| NodesChoice::Swarm.pick(s)).collect();
        for n in [1, 3, 5] {
            let count = picks.iter().filter(|&&p| p == n).count();
            assert!(count > 150, "{count} seeds of 1000 with {n} nodes");
        }
        let seed = (0..100).find(|&s| NodesChoice::Swarm.pick(s) == 3).expect("a 3-node seed");
        let a = SwarmConfig::for_seed(seed, &RunOptions::default());
        let b = SwarmConfig::for_seed(seed, &RunOptions::nodes(3));
        assert_eq!(
            (a.nodes, a.horizon_ms, a.faults.names()),
            (b.nodes, b.horizon_ms, b.faults.names())
        );
        assert_eq!(NodesChoice::parse("cluster"), Ok(NodesChoice::Cluster));
        assert!(NodesChoice::parse("0").is_err());
    }

    #[test]
    fn draws_are_deterministic_and_varied() {
        let a = SwarmConfig::draw(1);
        let b = SwarmConfig::draw(1);
        assert_eq!(a.faults.names(), b.faults.names());
        assert_eq!(a.workload.messages, b.workload.messages);
        let corrupt = (0..1000).filter(|&s| SwarmConfig::draw(s).faults.corruption_class()).count();
        assert!((30..200).contains(&corrupt), "{corrupt} of 1000 seeds with corruption faults");
    }

    #[test]
    fn io_errors_are_on_in_a_fraction_of_seeds() {
        let plans: Vec<FaultPlan> = (0..1000).map(|s| SwarmConfig::draw(s).faults).collect();
        let writes = plans.iter().filter(|p| p.names().contains(&"write_error")).count();
        let reads = plans.iter().filter(|p| p.start_read_error_rate > 0.0).count();
        assert!((250..450).contains(&writes), "{writes} of 1000 seeds with write errors");
        assert!((150..350).contains(&reads), "{reads} of 1000 seeds with start-up read errors");
        let shots = plans.iter().filter(|p| p.partition_failure_shots > 0).count();
        assert!((300..500).contains(&shots), "{shots} of 1000 seeds with partition failures");
    }

    #[test]
    fn half_the_seeds_have_tiny_wal_segments_that_still_rotate_below_their_size() {
        let sizes: Vec<NodeSizes> = (0..1000).map(|s| SwarmConfig::draw(s).sizes).collect();
        let tiny: Vec<&NodeSizes> =
            sizes.iter().filter(|s| s.wal_segment_bytes <= 64 * 1024).collect();
        assert!((400..600).contains(&tiny.len()), "{} of 1000 seeds", tiny.len());
        assert!(tiny.iter().all(|s| s.wal_rotate_dispatched_bytes <= s.wal_segment_bytes));
    }
}
