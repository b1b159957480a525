//! `Node`: one broker node as a sans-IO state machine. It composes the ingress WAL, the topic
//! catalogue, the partition logs and the dispatcher, routes disk completions back to the
//! component that asked, and turns client requests into replies.
//!
//! Driving loop (both runtimes): feed an input with `handle_input` (or `handle_timeout` when the
//! deadline from `poll_timeout` passes), then drain `poll_effect` to `None`, execute each effect,
//! and re-arm the timer with `poll_timeout`.

mod client;
mod commit;
mod owner;
mod routing;

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::accept::Resolver;
use crate::api::{ClientReply, Stats};
use crate::catalog::Catalog;
use crate::dispatch::{Dispatcher, Placement};
use crate::ids::{Instant, IoToken, NodeId, PartitionKey, RequestId, TopicId};
use crate::io::{DiskOp, Effect, FileId, Input, NodeEvent};
use crate::partition::{CommitId, PartIo, PartitionLog, ReadPlan};
use crate::wal::{self, Wal, WalIo};

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's id (1 for a single node).
    pub node_id: NodeId,
    /// Seed for every random choice the node makes (e.g. the first keyless partition per topic).
    pub seed: u64,
}

/// Recovery found damage it must not repair silently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    #[error(
        "{file}: corrupt frame at byte {bad_pos} followed by valid data at byte {next_valid_pos}; \
         refusing to truncate acknowledged records"
    )]
    CorruptLog {
        file: String,
        bad_pos: u64,
        next_valid_pos: u64,
    },
    #[error("{file}: {what}")]
    Inconsistent { file: String, what: String },
}

/// A produce waiting for its group commit.
#[derive(Clone, Copy, Debug)]
struct ProduceWaiter {
    request: RequestId,
    records: usize,
}

/// What a disk operation was for.
#[derive(Clone, Debug)]
enum IoPurpose {
    Wal(WalIo),
    Catalog,
    Partition(PartitionKey, PartIo),
    Consume {
        request: RequestId,
        key: PartitionKey,
        plan: ReadPlan,
        topic: String,
    },
    FileDelete,
    /// Start-up sync of a file found on disk (see `Node::sync_found_files`).
    StartupSync(FileId),
}

/// Bound on undrained events: the oldest are dropped past it.
const EVENT_QUEUE_MAX: usize = 65_536;

/// One broker node.
pub struct Node {
    config: Config,
    now: Instant,
    wal: Wal<ProduceWaiter>,
    catalog: Catalog<RequestId>,
    partitions: BTreeMap<PartitionKey, PartitionLog>,
    dispatcher: Dispatcher,
    resolver: Resolver,
    jobs: BTreeMap<CommitId, owner::Job>,
    commit_queue: BTreeMap<PartitionKey, Vec<crate::partition::CommitPart>>,
    next_job: u64,
    io: BTreeMap<IoToken, IoPurpose>,
    next_token: u64,
    effects: VecDeque<Effect>,
    events: VecDeque<NodeEvent>,
    wal_read_retry_at: Option<Instant>,
    /// Start-up syncs still running; nothing found on disk is used before they are done.
    startup_syncs_left: usize,
    /// Client requests that arrived during the start-up syncs.
    deferred: VecDeque<(RequestId, crate::api::ClientOp)>,
    /// Why the node cannot go on (a start-up sync failed); the runtime must stop it.
    fatal: Option<String>,
    shutting_down: bool,
    counters: NodeCounters,
}

#[derive(Clone, Copy, Debug, Default)]
struct NodeCounters {
    produce_requests_accepted: u64,
    produce_requests_rejected: u64,
    records_accepted: u64,
}

/// The single-node view of placement: every partition is ours and we are alive.
struct LocalPlacement<'a>(&'a Catalog<RequestId>);

impl Placement for LocalPlacement<'_> {
    fn partitions(&self, topic: TopicId) -> Option<u32> {
        self.0.topic_by_id(topic).map(|t| t.partitions)
    }

    fn owner_alive(&self, _key: PartitionKey) -> bool {
        true
    }
}

impl Node {
    /// Rebuilds a node from the bytes of every file it owns (as found on disk at start-up).
    /// Torn tails are truncated by the first effects the node emits; it is ready once they are done.
    pub fn recover(
        config: Config,
        now: Instant,
        files: BTreeMap<FileId, Bytes>,
    ) -> Result<Node, RecoveryError> {
        let catalog = Catalog::recover(files.get(&FileId::Catalog))?;
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
        let dispatcher = Dispatcher::new(recovered.checkpoint);
        let mut node = Node {
            resolver: Resolver::new(config.seed),
            config,
            now,
            wal: Wal::from_recovered(recovered),
            catalog,
            partitions: BTreeMap::new(),
            dispatcher,
            jobs: BTreeMap::new(),
            commit_queue: BTreeMap::new(),
            next_job: 1,
            io: BTreeMap::new(),
            next_token: 1,
            effects: VecDeque::new(),
            events: VecDeque::new(),
            wal_read_retry_at: None,
            startup_syncs_left: 0,
            deferred: VecDeque::new(),
            fatal: None,
            shutting_down: false,
            counters: NodeCounters::default(),
        };
        node.recover_partitions(&files)?;
        node.sync_found_files(&files);
        node.pump();
        Ok(node)
    }

    /// A file found at start-up may hold bytes that only ever reached the page cache (the
    /// previous process crashed before syncing them). We may trust them only once they are
    /// durable, so every file is synced before the node uses anything it read: otherwise a later
    /// power loss could take back a record we already dispatched, committed or served.
    fn sync_found_files(&mut self, files: &BTreeMap<FileId, Bytes>) {
        for file in files.keys() {
            let orphan = matches!(file, FileId::PartitionLog(key) if !self.partitions.contains_key(key));
            let ours = !matches!(file, FileId::MetaRaftLog | FileId::MetaSnapshot);
            if ours && !orphan {
                self.startup_syncs_left += 1;
                self.emit(IoPurpose::StartupSync(*file), DiskOp::Sync { file: *file });
            }
        }
    }

    /// Opens every partition log of a live topic; deletes the files of dead incarnations.
    fn recover_partitions(&mut self, files: &BTreeMap<FileId, Bytes>) -> Result<(), RecoveryError> {
        for (file, bytes) in files {
            let FileId::PartitionLog(key) = file else {
                continue;
            };
            let live = self
                .catalog
                .topic_by_id(key.topic)
                .is_some_and(|t| key.partition < t.partitions);
            if live {
                self.partitions
                    .insert(*key, PartitionLog::recover(*key, bytes)?);
            } else {
                tracing::info!(file = %file.relative_path(), "deleting log of a deleted topic");
                self.emit(IoPurpose::FileDelete, DiskOp::Delete { file: *file });
            }
        }
        Ok(())
    }

    /// Feeds one input.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        self.now = self.now.max(now);
        match input {
            Input::Client { request, op } if self.startup_syncs_left > 0 => {
                self.deferred.push_back((request, op));
            }
            Input::Client { request, op } => self.handle_client(request, op),
            Input::Disk { token, result } => self.handle_disk(token, result),
            Input::BeginShutdown => {
                tracing::info!("shutdown requested: no new produces; flushing");
                self.shutting_down = true;
            }
        }
        self.pump();
    }

    /// Called when the deadline from `poll_timeout` has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.wal_read_retry_at.is_some_and(|at| at <= self.now) {
            self.wal_read_retry_at = None;
        }
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
        [
            self.wal.checkpoint_deadline(),
            self.dispatcher.next_deadline(),
            self.wal_read_retry_at,
        ]
        .into_iter()
        .flatten()
        .filter(|&at| at > self.now)
        .min()
    }

    /// True once recovery's syncs and repairs are durable and the node serves requests.
    pub fn is_ready(&self) -> bool {
        self.startup_syncs_left == 0
            && self.fatal.is_none()
            && self.wal.is_repaired()
            && self.catalog.is_repaired()
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
    pub fn is_shut_down(&self) -> bool {
        self.shutting_down && self.io.is_empty()
    }

    /// Counters and gauges.
    pub fn stats(&self) -> Stats {
        let wal = self.wal.counters();
        let dispatch = self.dispatcher.counters();
        let (wal_segments, wal_bytes_on_disk) = self.wal.disk_usage();
        let partitions = self
            .catalog
            .topics()
            .flat_map(|topic| (0..topic.partitions).map(move |index| (topic, index)))
            .map(|(topic, index)| {
                let key = PartitionKey {
                    topic: topic.id,
                    partition: index,
                };
                let log = self.partitions.get(&key);
                let hwm = log.map_or(0, PartitionLog::high_watermark);
                (
                    topic.name.clone(),
                    index,
                    hwm,
                    log.map_or(0, PartitionLog::size_bytes),
                )
            })
            .collect();
        Stats {
            produce_requests_accepted: self.counters.produce_requests_accepted,
            records_accepted: self.counters.records_accepted,
            produce_requests_rejected: self.counters.produce_requests_rejected,
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
            partitions,
            ready: u64::from(self.is_ready()),
        }
    }

    /// Moves every component forward: group commit, checkpoint, dispatch reads, commits,
    /// discard confirmations; then turns their disk requests into effects.
    fn pump(&mut self) {
        if self.startup_syncs_left > 0 || self.fatal.is_some() {
            self.collect_io();
            return;
        }
        let now = self.now;
        self.wal.pump(now, self.shutting_down);
        for (waiter, result) in self.catalog.pump() {
            self.reply_catalog(waiter, result);
        }
        if self.wal_read_retry_at.is_none() {
            self.wal.poll_read(
                self.dispatcher
                    .read_limit()
                    .min(self.dispatcher.read_upto() + self.dispatcher.room() as u64),
            );
        }
        self.start_commits();
        self.confirm_discards();
        self.advance_checkpoint();
        self.collect_io();
    }

    fn advance_checkpoint(&mut self) {
        self.wal
            .set_checkpoint_target(self.dispatcher.checkpoint(), self.now);
        self.wal.pump(self.now, self.shutting_down);
    }

    /// Asks the authority (here: the local catalogue) about topics with orphaned records.
    fn confirm_discards(&mut self) {
        let placement = LocalPlacement(&self.catalog);
        self.dispatcher.requeue_live_orphans(self.now, &placement);
        for topic in self.dispatcher.poll_confirmations(self.now) {
            let gone = self.catalog.confirm_gone(topic);
            for seq in self.dispatcher.on_confirmation(topic, gone) {
                tracing::debug!(seq, topic = topic.0, "discarded record of a deleted topic");
                self.push_event(NodeEvent::Discarded { seq, topic });
            }
        }
    }

    fn collect_io(&mut self) {
        while let Some((io, op)) = self.wal.poll_io() {
            self.emit(IoPurpose::Wal(io), op);
        }
        while let Some(op) = self.catalog.poll_io() {
            self.emit(IoPurpose::Catalog, op);
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
        self.io.insert(token, purpose);
        self.effects.push_back(Effect::Disk { token, op });
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
