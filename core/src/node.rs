//! `Node`: one broker node as a sans-IO state machine. It composes the ingress WAL, the Raft
//! metastore (topics, assignments, membership), the partition logs it owns and the dispatcher,
//! routes disk completions and peer messages to the component they belong to, and turns client
//! requests into replies. A single node is simply a cluster of one voter.
//!
//! Driving loop (both runtimes): feed an input with `handle_input` (or `handle_timeout` when the
//! deadline from `poll_timeout` passes), then drain `poll_effect` to `None`, execute each effect,
//! and re-arm the timer with `poll_timeout`.

mod authorize;
mod client;
mod cluster;
mod commit;
mod dead_letter;
mod discard;
mod flush_pairing;
mod invariants;
mod log_delete;
mod long_poll;
mod metastore;
mod oldest;
mod owner;
mod parked;
mod queue;
mod receive_watch;
mod recovery;
mod retention;
mod routing;
mod users;

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::accept::Resolver;
use crate::access::Principal;
use crate::api::{ClientError, ClientOp, ClientReply, Stats};
use crate::dispatch::{Dispatcher, Placement};
use crate::ids::{Instant, IoToken, NodeId, PartitionKey, RequestId, TopicId};
use crate::io::{DiskOp, Effect, FileId, Input, NodeEvent};
use crate::meta::{MetaConfig, MetaIo, Metastore};
use crate::partition::{CommitId, CommitPart, PartIo, PartitionLog, ReadPlan};
use crate::peer::PeerMessage;
use crate::quota::ProduceQuota;
pub use crate::recovery_error::RecoveryError;
use crate::wal::{self, Wal, WalIo};
use cluster::Remote;
pub use recovery::Recovery;

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's id.
    pub node_id: NodeId,
    /// Seed for every random choice the node makes (election timeouts, first keyless partition).
    pub seed: u64,
    /// The metastore's voters: every node of the cluster, the same list on every node.
    pub voters: Vec<NodeId>,
    /// Addresses this node announces in its membership heartbeats.
    pub http_addr: String,
    pub cluster_addr: String,
    /// Membership heartbeat period and the silence after which the leader marks a member dead.
    pub heartbeat_ms: u64,
    pub dead_after_ms: u64,
    /// Owners skip records a partition already holds (per origin node and WAL sequence). On by
    /// default; the simulator turns it off to measure the duplicates it prevents.
    pub idempotent_commits: bool,
    /// Bytes of partition log per in-memory index entry (`PARTITION_INDEX_INTERVAL_BYTES`);
    /// the simulator makes it small so that its short runs read across many entries.
    pub partition_index_interval_bytes: u64,
    /// Size past which a partition log's active segment is sealed (`PARTITION_SEGMENT_BYTES`);
    /// the simulator makes it tiny so that its short runs roll segments all the time.
    pub partition_segment_bytes: u64,
    /// Applied metastore entries between snapshots (`META_SNAPSHOT_EVERY_ENTRIES`); the
    /// simulator makes it small so that its short runs take snapshots and reset the Raft log.
    pub meta_snapshot_every_entries: u64,
    /// Size past which a WAL segment is sealed (`WAL_SEGMENT_BYTES`); the simulator makes it
    /// small so that its short runs hold several sealed segments with a backlog.
    pub wal_segment_bytes: u64,
    /// Size past which a fully dispatched WAL segment is rotated (`WAL_ROTATE_DISPATCHED_BYTES`).
    pub wal_rotate_dispatched_bytes: u64,
    /// Zeros pre-written past the active WAL segment's end at a time when idle
    /// (`WAL_PREWRITE_CHUNK_BYTES`; 0 turns pre-writing off).
    pub wal_prewrite_chunk_bytes: u64,
    /// A produce whose records take more than this waits behind the small ones staged with it
    /// (`WAL_SMALL_REQUEST_BYTES`; the simulator makes it tiny so its small records exercise it).
    pub wal_small_request_bytes: u64,
    /// Bulk bytes a group commit takes, at least one piece, while no small produce is about;
    /// bulk requests are written in chunks of a quarter of it, one per group while small
    /// produces are about (`WAL_GROUP_BULK_BYTES`).
    pub wal_group_bulk_bytes: u64,
    /// Period of the retention pass (`RETENTION_CHECK_MS`): how late a segment past its topic's
    /// retention may be deleted, at most.
    pub retention_check_ms: u64,
    /// Size bounds apply divided by this (1 in production). The simulator's runs write a few
    /// KiB per partition, far below the smallest `retention_bytes` a client may set (4 MiB), so
    /// it scales the bounds down instead of writing gigabytes; the metastore keeps the values
    /// clients set either way.
    pub retention_bytes_divisor: u64,
    /// Size past which the consumer journal is compacted into a new file
    /// (`CONSUMER_JOURNAL_COMPACT_BYTES`); the simulator makes it small.
    pub consumer_journal_compact_bytes: u64,
    /// A consumer-journal commit smaller than the last one waits briefly for more entries
    /// (`ConsumerJournal`'s linger rule). On by default; the simulator draws it both ways.
    pub consumer_journal_linger: bool,
    /// The lease a queue receive gives when its topic sets none
    /// (`DEFAULT_VISIBILITY_TIMEOUT_MS`); the simulator makes it short so that leases expire
    /// within a run.
    pub queue_visibility_ms: u64,
    /// Longest a lone producer's partition work waits for the next WAL group commit
    /// (`FLUSH_PAIRING_US`, `node/flush_pairing.rs`; 0 turns the hold off).
    pub flush_pairing_us: u64,
    /// A dispatch batch below its target waits for company up to max(2 × its destination's
    /// recent commit latency, `LINGER_FLOOR_MS`), never past `LINGER_CAP_MS` (`dispatch.rs`).
    /// On by default; the simulator draws it both ways.
    pub dispatch_linger: bool,
    /// Payload bytes per second each principal may have this node stage (`quota.rs`); 0, the
    /// default, sets no quota. The simulator draws it small in a share of its seeds.
    pub produce_quota_bytes_per_sec: u64,
}

impl Config {
    /// A single node: the only voter of its own metastore.
    pub fn single(node_id: NodeId, seed: u64) -> Config {
        Config::cluster(node_id, seed, vec![node_id])
    }

    /// A member of a cluster whose voters are `voters`, with the default timings (1 s
    /// heartbeats, dead after 5 s).
    pub fn cluster(node_id: NodeId, seed: u64, voters: Vec<NodeId>) -> Config {
        Config {
            node_id,
            seed,
            voters,
            http_addr: String::new(),
            cluster_addr: String::new(),
            heartbeat_ms: 1_000,
            dead_after_ms: 5_000,
            idempotent_commits: true,
            partition_index_interval_bytes: crate::constants::PARTITION_INDEX_INTERVAL_BYTES,
            partition_segment_bytes: crate::constants::PARTITION_SEGMENT_BYTES,
            meta_snapshot_every_entries: crate::constants::META_SNAPSHOT_EVERY_ENTRIES,
            wal_segment_bytes: crate::constants::WAL_SEGMENT_BYTES,
            wal_rotate_dispatched_bytes: crate::constants::WAL_ROTATE_DISPATCHED_BYTES,
            wal_prewrite_chunk_bytes: crate::constants::WAL_PREWRITE_CHUNK_BYTES,
            wal_small_request_bytes: crate::constants::WAL_SMALL_REQUEST_BYTES,
            wal_group_bulk_bytes: crate::constants::WAL_GROUP_BULK_BYTES,
            retention_check_ms: crate::constants::RETENTION_CHECK_MS,
            retention_bytes_divisor: 1,
            consumer_journal_compact_bytes: crate::constants::CONSUMER_JOURNAL_COMPACT_BYTES,
            consumer_journal_linger: true,
            queue_visibility_ms: crate::constants::DEFAULT_VISIBILITY_TIMEOUT_MS,
            flush_pairing_us: crate::constants::FLUSH_PAIRING_US,
            dispatch_linger: true,
            produce_quota_bytes_per_sec: 0,
        }
    }

    fn meta_config(&self) -> MetaConfig {
        let mut meta = MetaConfig::new(self.node_id, self.voters.clone(), self.seed);
        meta.http_addr.clone_from(&self.http_addr);
        meta.cluster_addr.clone_from(&self.cluster_addr);
        meta.heartbeat_ms = self.heartbeat_ms;
        meta.dead_after_ms = self.dead_after_ms;
        meta.snapshot_every_entries = self.meta_snapshot_every_entries;
        meta
    }

    fn wal_sizes(&self) -> wal::WalSizes {
        wal::WalSizes {
            segment_bytes: self.wal_segment_bytes,
            rotate_dispatched_bytes: self.wal_rotate_dispatched_bytes,
            prewrite_chunk_bytes: self.wal_prewrite_chunk_bytes,
            small_request_bytes: self.wal_small_request_bytes,
            group_bulk_bytes: self.wal_group_bulk_bytes,
        }
    }
}

/// What waits for a group commit of the ingress WAL.
#[derive(Clone, Copy, Debug)]
enum ProduceWaiter {
    /// A client's produce of `records` records.
    Client { request: RequestId, records: usize },
    /// The dead-letter copy of `key`@`offset`, one of our partitions' messages
    /// (`dead_letter.rs`).
    DeadLetter { key: PartitionKey, offset: u64 },
}

/// Who waits for a metastore proposal or read barrier.
#[derive(Clone, Debug, PartialEq, Eq)]
enum MetaWaiter {
    /// A client's topic create or delete on this node.
    Client(RequestId),
    /// A command a follower forwarded to us (the leader), to answer with `ProposeReply`.
    Peer { from: NodeId, id: u64 },
    /// This node's own membership heartbeat (nobody to answer).
    Heartbeat,
    /// A read barrier before confirming that a topic incarnation is gone, for our own
    /// dispatcher (`asker: None`) or for a follower's.
    Confirm { topic: TopicId, asker: Option<(NodeId, u64)> },
}

/// What a disk operation was for.
#[derive(Clone, Debug)]
enum IoPurpose {
    Wal(WalIo),
    Meta(MetaIo),
    Partition(PartitionKey, PartIo),
    Consume {
        key: PartitionKey,
        plan: ReadPlan,
        asker: ConsumeAsker,
    },
    /// A delete of a dropped partition's file (`node/log_delete.rs`).
    FileDelete(PartitionKey),
    /// Start-up sync of a file found on disk (see `Node::sync_found_files`).
    StartupSync(FileId),
    /// Start-up delete of a seal file recovery did not adopt (stale, damaged or orphaned),
    /// or of a stale consumer-journal file.
    StartupDelete(FileId),
    /// A consumer-journal operation.
    Journal(crate::queue::JournalIo),
    /// The read of a queue receive served by one of our partitions.
    QueueRead {
        id: u64,
        plan: ReadPlan,
    },
    /// The read of a partition's oldest unsettled record (`node/oldest.rs`).
    OldestProbe {
        key: PartitionKey,
        plan: ReadPlan,
    },
}

/// Who asked for a partition read: a local client, or another node on a client's behalf.
#[derive(Clone, Debug)]
enum ConsumeAsker {
    Client { request: RequestId, topic: String },
    Peer { from: NodeId, id: u64 },
}

/// An input held until the node serves (see `Node::deferred`).
#[derive(Debug)]
enum Deferred {
    Client(RequestId, ClientOp, Principal),
    Peer(NodeId, Bytes),
}

/// Most peer messages held during the start-up syncs.
const DEFERRED_PEER_MAX: usize = 4_096;

/// Most client requests held during the start-up syncs (the tokio driver's command queue holds
/// as many); past it a request is answered `Overloaded` at once.
const DEFERRED_CLIENT_MAX: usize = 4_096;

/// Most produces waiting for a group commit (staged or in flight), and most bytes staged for the
/// next one: past either, a produce is answered `Overloaded` before anything is staged.
pub(crate) const PRODUCE_WAITERS_MAX: usize = 16_384;
const STAGED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Most requests outstanding with peers (forwarded commands and consumes, answers settling,
/// topic statistics being gathered): past it a client request is answered `Overloaded`, and the
/// node's own heartbeat or confirmation is not sent (it is asked again next pass).
const PEER_REQUESTS_MAX: usize = 4_096;

/// Most commit jobs on our partitions before a peer's commit batch is refused ("overloaded": its
/// dispatcher backs off and retries). A dispatcher has at most `COMMIT_FANOUT` commits in flight,
/// so peers well within the bound never meet it; our own dispatcher's jobs are never refused.
const PEER_COMMIT_JOBS_MAX: usize = 1_024;

/// Bound on undrained events: the oldest are dropped past it.
const EVENT_QUEUE_MAX: usize = 65_536;

/// One broker node.
pub struct Node {
    config: Config,
    now: Instant,
    wal: Wal<ProduceWaiter>,
    meta: Metastore<MetaWaiter>,
    partitions: BTreeMap<PartitionKey, PartitionLog>,
    dispatcher: Dispatcher,
    resolver: Resolver,
    jobs: BTreeMap<CommitId, owner::Job>,
    commit_queue: BTreeMap<PartitionKey, Vec<CommitPart>>,
    next_job: u64,
    remote: Remote,
    io: BTreeMap<IoToken, IoPurpose>,
    next_token: u64,
    effects: VecDeque<Effect>,
    events: VecDeque<NodeEvent>,
    wal_read_retry_at: Option<Instant>,
    /// When we last asked whether the topic of leftover partition files is gone.
    orphan_files_asked: BTreeMap<TopicId, Instant>,
    /// When partition logs are next scanned for topics the replica does not know.
    next_orphan_scan: Instant,
    /// When the next retention pass runs.
    next_retention_at: Instant,
    /// Start-up syncs (then deletes of stale files) still running; nothing found on disk is
    /// used before they are done.
    startup_syncs_left: usize,
    /// Stale files start-up deletes once every start-up sync is done: an older consumer-journal
    /// file may be deleted only once the newer one that replaces it is durable (a crash between
    /// would leave neither).
    startup_deletes: Vec<FileId>,
    /// Partition segments recovery adopted from their seal files, and segments it scanned.
    recovered_segments: (u64, u64),
    /// Inputs that arrived during the start-up syncs: client requests, and peer messages (at
    /// most `DEFERRED_PEER_MAX`; Raft tolerates the loss of the rest, commits retry).
    deferred: VecDeque<Deferred>,
    /// Why the node cannot go on (a start-up sync failed); the runtime must stop it.
    fatal: Option<String>,
    shutting_down: bool,
    counters: NodeCounters,
    /// Queue consumers: partition queues, the consumer journal, requests in progress.
    consumers: queue::Consumers,
    /// Files of dropped partition logs still being deleted, in order.
    log_deletes: log_delete::LogDeletes,
    /// Long-poll consumes waiting for a record to become visible.
    parked: parked::Parked,
    /// Partition work held for the next WAL group commit (`node/flush_pairing.rs`).
    pairing: flush_pairing::FlushPairing,
    /// What each principal's produces were charged against its quota.
    quota: ProduceQuota,
}

#[derive(Clone, Copy, Debug, Default)]
struct NodeCounters {
    produce_requests_accepted: u64,
    produce_requests_rejected: u64,
    requests_refused_access: u64,
    produce_requests_throttled: u64,
    records_accepted: u64,
    remote_commits_ok: u64,
    remote_commits_failed: u64,
    peer_messages_refused: u64,
    retention_segments_deleted: u64,
    retention_records_deleted: u64,
    retention_bytes_deleted: u64,
    partition_read_damaged: u64,
}

/// Placement as the local metastore replica sees it.
struct ClusterPlacement<'a>(&'a Metastore<MetaWaiter>);

impl Placement for ClusterPlacement<'_> {
    fn partitions(&self, topic: TopicId) -> Option<u32> {
        self.0.topic_by_id(topic).map(|t| t.partitions)
    }

    fn owner_alive(&self, key: PartitionKey) -> bool {
        self.0.owner(key).is_some_and(|owner| self.0.is_alive(owner))
    }
}

impl Node {
    /// Rebuilds a node from the bytes of every file it owns (as found on disk at start-up).
    /// Nothing read is used before it has been synced (see `sync_found_files`); torn tails are
    /// truncated by the first effects; the node is ready once all that is durable and its
    /// metastore replica knows a leader and has caught up.
    pub fn recover(
        config: Config,
        now: Instant,
        files: BTreeMap<FileId, Bytes>,
    ) -> Result<Node, RecoveryError> {
        Node::recover_in_chunks(config, now, files, usize::MAX)
    }

    /// `recover`, feeding each partition log to its `PartitionScan` `chunk_bytes` at a time as a
    /// runtime reading large files does (the simulator uses small, odd chunks so that frames
    /// straddle them at every restart).
    pub fn recover_in_chunks(
        config: Config,
        now: Instant,
        files: BTreeMap<FileId, Bytes>,
        chunk_bytes: usize,
    ) -> Result<Node, RecoveryError> {
        let mut logs: BTreeMap<PartitionKey, Vec<(u64, Bytes)>> = BTreeMap::new();
        let mut others = BTreeMap::new();
        for (file, bytes) in files {
            match file {
                FileId::PartitionSegment { key, base } => {
                    logs.entry(key).or_default().push((base, bytes));
                }
                file => {
                    others.insert(file, bytes);
                }
            }
        }
        let mut recovery = Node::begin_recovery(config, now, others)?;
        let mut partitions = Vec::with_capacity(logs.len());
        // `files` iterates in `FileId` order: by partition, then by first offset.
        for (key, segments) in logs {
            let mut scan = recovery.partition_scan(key);
            let mut rest: &[u8] = &[];
            for (base, bytes) in &segments {
                // Sealing the segment before refuses it if it ended in a bad frame; a segment
                // with a trusted seal file is adopted from it, not read.
                rest = &[];
                if scan.open_segment(*base, bytes.len() as u64)? {
                    continue;
                }
                for chunk in bytes.chunks(chunk_bytes.max(1)) {
                    if scan.stopped() {
                        break;
                    }
                    scan.feed(chunk)?;
                }
                let fed = usize::try_from(scan.fed()).expect("invariant: fed bytes are in memory");
                rest = &bytes[fed..];
            }
            partitions.push(scan.finish(rest)?);
        }
        Ok(recovery.finish(partitions))
    }

    /// The first half of `recover`, for a runtime that reads partition logs a chunk at a time
    /// (so that none has to fit in memory): rebuilds the metastore and the WAL from `files`
    /// (every file but the partition segments; seal files included, read whole: they are
    /// small); then open each log with `Recovery::partition_scan` (segments with a trusted seal
    /// are adopted, the others fed) and hand them all to `Recovery::finish`.
    pub fn begin_recovery(
        config: Config,
        now: Instant,
        files: BTreeMap<FileId, Bytes>,
    ) -> Result<Recovery, RecoveryError> {
        assert!(
            !files.keys().any(|file| matches!(file, FileId::PartitionSegment { .. })),
            "partition logs are scanned, not passed whole"
        );
        let meta = Metastore::recover(
            config.meta_config(),
            now,
            files.get(&FileId::MetaRaftLog),
            files.get(&FileId::MetaSnapshot),
        )?;
        let segments: BTreeMap<u64, Bytes> = files
            .iter()
            .filter_map(|(file, bytes)| match file {
                FileId::WalSegment { first_seq } => Some((*first_seq, bytes.clone())),
                _ => None,
            })
            .collect();
        let recovered = wal::recover(&segments, files.get(&FileId::WalCheckpoint))?;
        tracing::info!(
            next_seq = recovered.next_seq,
            checkpoint = recovered.checkpoint,
            backlog = recovered.backlog,
            segments = recovered.segments.len(),
            "recovered ingress WAL"
        );
        let consumers = queue::Consumers::recover(&files, &config, now)?;
        let (files, seals) = split_seals(files);
        let id_base = incarnation_id_base(config.seed, now);
        let checkpoint = recovered.checkpoint;
        warn_abandoned(&recovered.abandoned);
        let dispatcher = Dispatcher::with_first_commit_id(checkpoint, id_base)
            .with_linger(config.dispatch_linger)
            .with_abandoned(recovered.abandoned.keys().copied());
        let wal = Wal::from_recovered(recovered).with_sizes(config.wal_sizes());
        let node = Node {
            resolver: Resolver::new(config.seed),
            quota: ProduceQuota::new(config.produce_quota_bytes_per_sec),
            config,
            now,
            dispatcher,
            wal,
            meta,
            partitions: BTreeMap::new(),
            jobs: BTreeMap::new(),
            commit_queue: BTreeMap::new(),
            next_job: 1,
            remote: Remote::starting_at(id_base),
            io: BTreeMap::new(),
            next_token: 1,
            effects: VecDeque::new(),
            events: VecDeque::new(),
            wal_read_retry_at: None,
            orphan_files_asked: BTreeMap::new(),
            next_orphan_scan: now,
            next_retention_at: now,
            startup_syncs_left: 0,
            startup_deletes: Vec::new(),
            recovered_segments: (0, 0),
            deferred: VecDeque::new(),
            fatal: None,
            shutting_down: false,
            counters: NodeCounters::default(),
            consumers,
            log_deletes: log_delete::LogDeletes::default(),
            parked: parked::Parked::default(),
            pairing: flush_pairing::FlushPairing::default(),
        };
        Ok(Recovery::new(node, files.into_keys().collect(), seals))
    }

    /// A file found at start-up may hold bytes that only ever reached the page cache (the
    /// previous process crashed before syncing them). We may trust them only once they are
    /// durable, so every file read is synced before the node uses anything in it: otherwise a
    /// later power loss could take back a record we already dispatched, committed or served.
    /// (A segment adopted from its seal was not read, and was durable before its seal existed:
    /// see `PartitionLog::startup_sync_files`.)
    fn sync_found_files<'a>(&mut self, files: impl Iterator<Item = &'a FileId>) {
        for file in files {
            self.startup_syncs_left += 1;
            self.emit(IoPurpose::StartupSync(*file), DiskOp::Sync { file: *file });
        }
    }

    /// Feeds one input.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        self.now = self.now.max(now);
        match input {
            Input::Client { request, op, who } if self.startup_syncs_left > 0 => {
                self.defer_client(request, op, who);
            }
            Input::Peer { from, bytes } if self.startup_syncs_left > 0 => {
                let peers =
                    self.deferred.iter().filter(|d| matches!(d, Deferred::Peer(..))).count();
                if peers < DEFERRED_PEER_MAX {
                    self.deferred.push_back(Deferred::Peer(from, bytes));
                }
            }
            Input::Client { request, op, who } => self.handle_client(request, op, &who),
            Input::Disk { token, result } => self.handle_disk(token, result),
            Input::Peer { from, bytes } => self.handle_peer(from, &bytes),
            Input::PeerUnreachable { to } => self.on_peer_unreachable(to),
            Input::BeginShutdown => {
                tracing::info!("shutdown requested: no new produces; flushing");
                self.shutting_down = true;
                self.dispatcher.stop_lingering();
                self.release_held_partition_work();
                self.release_parked_for_shutdown();
            }
        }
        self.pump();
    }

    /// Holds a client request until the start-up syncs are done, or refuses it past the bound.
    fn defer_client(&mut self, request: RequestId, op: ClientOp, who: Principal) {
        let clients = self.deferred.iter().filter(|d| matches!(d, Deferred::Client(..))).count();
        if clients < DEFERRED_CLIENT_MAX {
            self.deferred.push_back(Deferred::Client(request, op, who));
        } else {
            let error = ClientError::Overloaded("too many requests held during start-up".into());
            self.reply(request, ClientReply::Error(error));
        }
    }

    /// Called when the deadline from `poll_timeout` has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.wal_read_retry_at.is_some_and(|at| at <= self.now) {
            self.wal_read_retry_at = None;
        }
        if self.is_serving() && self.meta.next_tick() <= self.now {
            self.tick_metastore();
        }
        self.expire_remote();
        self.expire_parked();
        self.run_retention_if_due();
        self.pump();
    }

    /// Next effect to execute; drain to `None` after every input.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Next event for checkers and logs; optional to drain (the oldest are dropped past 65,536).
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let meta_tick = self.is_serving().then(|| self.meta.next_tick());
        [
            self.wal.checkpoint_deadline(),
            self.dispatcher.next_deadline(),
            self.wal_read_retry_at,
            self.remote.next_deadline(),
            self.parked.next_deadline(),
            self.consumers.journal.linger_until(),
            self.pairing.deadline(),
            (self.is_serving() && !self.partitions.is_empty()).then_some(self.next_retention_at),
        ]
        .into_iter()
        .flatten()
        .filter(|&at| at > self.now)
        .chain(meta_tick)
        .min()
    }

    /// The users as this node's metastore replica knows them, hashes included: the runtime
    /// verifies passwords against them (docs/design.md §8).
    pub fn users(&self) -> &crate::meta::users::Users {
        self.meta.users()
    }

    /// Changes whenever `users()` may have changed since it was last read.
    pub fn users_epoch(&self) -> u64 {
        self.meta.users_epoch()
    }

    /// True once recovery's syncs and repairs are durable, the metastore replica knows a leader
    /// and has caught up with it, and it lists this node as a live member (its heartbeat went
    /// through): the node is fully part of the cluster.
    pub fn is_ready(&self) -> bool {
        self.is_serving()
            && self.wal.is_repaired()
            && self.meta.is_ready()
            && self.meta.leader().is_some()
            && self.meta.caught_up()
            && self.meta.is_alive(self.config.node_id)
    }

    /// True once the start-up syncs are done: from then on the node serves what it recovered
    /// (client requests that arrived earlier were held until now).
    pub fn is_serving(&self) -> bool {
        self.startup_syncs_left == 0 && self.fatal.is_none()
    }

    /// Set when the node cannot safely go on (a start-up sync failed, so what it read from disk
    /// may not be durable). The runtime must stop the process; a restart recovers.
    pub fn fatal_error(&self) -> Option<&str> {
        self.fatal.as_deref()
    }

    /// True once, after `Input::BeginShutdown`, no disk operation is outstanding: every group
    /// commit has answered, the dispatcher committed what it could (a clean restart re-dispatches
    /// nothing unless a destination was failing), and the checkpoint is durable.
    /// Each partition's active segment then has its seal file written (the clean-shutdown
    /// marker: the next start-up adopts it without a scan).
    pub fn is_shut_down(&self) -> bool {
        let sealed =
            !self.is_serving() || self.partitions.values().all(|log| !log.wants_shutdown_seal());
        self.shutting_down && self.io.is_empty() && sealed
    }

    /// Partition segments the start-up adopted from their seal files, and segments it scanned.
    pub fn recovered_segments(&self) -> (u64, u64) {
        self.recovered_segments
    }

    /// At shutdown, once nothing but seal writes is in flight: write the seal file of every
    /// partition's active segment not sealed in its current state (a commit that lands later
    /// makes it stale, and the next quiet moment writes it again).
    fn seal_for_shutdown(&mut self) {
        let quiet =
            self.io.values().all(|p| matches!(p, IoPurpose::Partition(_, PartIo::Seal { .. })));
        if self.shutting_down && quiet {
            for log in self.partitions.values_mut() {
                log.write_shutdown_seal();
            }
        }
    }

    /// The numbers of every partition log this node holds, whether or not its replica knows the
    /// topic yet (for checkers: where each log starts and ends after a restart).
    pub fn partition_numbers(&self) -> Vec<(PartitionKey, crate::api::PartitionNumbers)> {
        self.partitions.keys().map(|key| (*key, self.numbers_of(*key))).collect()
    }

    /// The node's clock as of its latest input.
    pub fn clock(&self) -> Instant {
        self.now
    }

    /// Counters and gauges.
    pub fn stats(&self) -> Stats {
        let wal = self.wal.counters();
        let dispatch = self.dispatcher.counters();
        let meta = self.meta.counters();
        let (wal_segments, wal_bytes_on_disk) = self.wal.disk_usage();
        let partitions = self
            .partitions
            .keys()
            .filter_map(|key| {
                let topic = self.meta.topic_by_id(key.topic)?;
                Some((topic.name.clone(), key.partition, self.numbers_of(*key)))
            })
            .collect();
        Stats {
            produce_requests_accepted: self.counters.produce_requests_accepted,
            records_accepted: self.counters.records_accepted,
            produce_requests_rejected: self.counters.produce_requests_rejected,
            requests_refused_access: self.counters.requests_refused_access,
            produce_requests_throttled: self.counters.produce_requests_throttled,
            wal_group_commits: wal.group_commits,
            wal_fsyncs: wal.fsyncs,
            wal_records_synced: wal.records_synced,
            wal_bytes_written: wal.bytes_written,
            wal_failed: u64::from(self.wal.latched().is_some()),
            wal_segments,
            wal_bytes_on_disk,
            dispatch_backlog: self.wal.durable_seq() - self.dispatcher.checkpoint(),
            wal_checkpoint: self.wal.durable_checkpoint(),
            commits_ok: dispatch.commits_ok,
            commits_failed: dispatch.commits_failed,
            records_committed: dispatch.records_committed,
            partition_fsyncs: self.partitions.values().map(|p| p.fsyncs).sum(),
            records_rerouted: dispatch.records_rerouted,
            records_discarded: dispatch.records_discarded,
            records_lost: dispatch.records_lost,
            records_abandoned: dispatch.records_abandoned,
            partitions,
            retention_segments_deleted: self.counters.retention_segments_deleted,
            retention_records_deleted: self.counters.retention_records_deleted,
            retention_bytes_deleted: self.counters.retention_bytes_deleted,
            ready: u64::from(self.is_ready()),
            meta_leader: u64::from(self.meta.is_leader()),
            remote_commits_ok: self.counters.remote_commits_ok,
            remote_commits_failed: self.counters.remote_commits_failed,
            peer_messages_refused: self.counters.peer_messages_refused,
            meta_messages_dropped: meta.messages_dropped,
            meta_step_errors: meta.step_errors,
            meta_undecodable_entries: meta.undecodable_entries,
            meta_snapshots_taken: meta.snapshots_taken,
            meta_snapshots_installed: meta.snapshots_installed,
            partition_read_damaged: self.counters.partition_read_damaged,
            queue_deliveries: self.consumers.counters.deliveries,
            queue_acks: self.consumers.counters.acks,
            queue_dead_lettered: self.consumers.counters.dead_lettered,
            consumer_journal_syncs: self.consumers.counters.journal_syncs,
            consumes_parked: self.parked.len() as u64,
        }
    }

    /// Moves every component forward: metastore outputs, group commit, checkpoint, dispatch
    /// reads, commits, discard confirmations; then turns disk requests into effects.
    fn pump(&mut self) {
        self.expire_flush_pairing();
        if !self.is_serving() {
            // The metastore stays quiet too: an append emitted beside the start-up sync of its
            // log would still land if that sync failed and dropped the pages before it, leaving
            // valid frames after a hole (simulator finding M2). Raft keeps its outputs until then.
            self.collect_io();
            return;
        }
        self.drain_metastore();
        self.wake_available_receives();
        self.wal.pump(self.now, self.shutting_down);
        if self.wal_read_retry_at.is_none() {
            let room = self.dispatcher.room() as u64;
            let limit = self.dispatcher.read_limit().min(self.dispatcher.read_upto() + room);
            self.wal.poll_read(limit);
        }
        self.start_commits();
        self.confirm_discards();
        self.answer_settled_admin();
        self.drain_metastore();
        self.advance_checkpoint();
        self.pump_journal();
        self.collect_io();
        self.seal_for_shutdown();
        self.collect_io();
    }

    fn advance_checkpoint(&mut self) {
        self.wal.set_checkpoint_target(self.dispatcher.checkpoint(), self.now);
        self.wal.pump(self.now, self.shutting_down);
    }

    fn collect_io(&mut self) {
        while let Some((io, op)) = self.wal.poll_io() {
            self.emit(IoPurpose::Wal(io), op);
        }
        let mut ops = Vec::new();
        for (key, log) in &mut self.partitions {
            while let Some((io, op)) = log.poll_io() {
                ops.push((IoPurpose::Partition(*key, io), op));
            }
        }
        for (purpose, op) in ops {
            self.emit(purpose, op);
        }
    }

    fn emit(&mut self, purpose: IoPurpose, op: DiskOp) {
        let token = IoToken(self.next_token);
        self.next_token += 1;
        self.push_disk_effect(&purpose, Effect::Disk { token, op });
        self.io.insert(token, purpose);
    }

    fn send(&mut self, to: NodeId, message: &PeerMessage) {
        if to == self.config.node_id {
            tracing::error!(kind = message.kind(), "refusing to send a message to ourselves");
            return;
        }
        self.effects.push_back(Effect::Send { to, bytes: message.encode() });
    }

    fn reply(&mut self, request: RequestId, reply: ClientReply) {
        self.effects.push_back(Effect::Reply { request, reply });
    }

    fn push_event(&mut self, event: NodeEvent) {
        if self.events.len() >= EVENT_QUEUE_MAX {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }
}

/// The seal files among `files`, by partition and base, and the rest.
type Seals = BTreeMap<PartitionKey, BTreeMap<u64, Bytes>>;

fn split_seals(files: BTreeMap<FileId, Bytes>) -> (BTreeMap<FileId, Bytes>, Seals) {
    let mut seals = Seals::new();
    let mut others = BTreeMap::new();
    for (file, bytes) in files {
        if let FileId::PartitionSeal { key, base } = file {
            seals.entry(key).or_default().insert(base, bytes);
        } else {
            others.insert(file, bytes);
        }
    }
    (others, seals)
}

/// The first id of this incarnation's commits and peer requests: the high 32 bits differ from
/// one start to the next (they mix the seed with the start time), so answers meant for an
/// earlier incarnation of this node never match a request of this one.
fn incarnation_id_base(seed: u64, now: Instant) -> u64 {
    let mixed = (now.0 ^ seed.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed & !0xFFFF_FFFF) | 1
}

/// One warning per chunked bulk request recovery found without its final record.
fn warn_abandoned(abandoned: &BTreeMap<u64, u64>) {
    for (request, records) in abandoned {
        tracing::warn!(
            request,
            records,
            "dropping a bulk produce whose last chunk never reached the WAL (a crash or disk \
             failure ended it before its 202): none of it will be visible"
        );
    }
}
