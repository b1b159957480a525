//! The metastore: the cluster's control plane (topics, partition owners, members) as a
//! replicated state machine over tikv's raft-rs, driven sans-IO like everything in the core.
//!
//! Inputs are stamped with `now`; outputs are drained with `poll_output` after every input:
//! disk operations (each completion goes back through `on_disk` with its `MetaIo`), raft
//! messages to peers (`Send`, raft's protobuf encoding), applied commands with their waiter, read
//! barrier results and liveness changes. The caller drives time: `handle_tick` whenever
//! `next_tick` has passed.
//!
//! Determinism: raft-rs draws its election timeout from a thread RNG, so the range is pinned to
//! one value (`max_election_tick = min_election_tick + 1`, the value drawn per node from the
//! seed), and the spread between repeated campaigns comes from our own seeded stream instead
//! (`driver.rs` withholds a seeded number of ticks after each campaign). raft-rs's maps use a
//! fixed hasher and its logger is a discard logger, so its outputs are a function of its inputs.

mod command;
mod driver;
mod names;
mod persist;
mod recovery;
mod retention;
#[doc(hidden)] // public for the fuzz targets (fuzz/) only
pub mod state;
#[doc(hidden)] // public for the fuzz targets (fuzz/) only
pub mod storage;
mod tombstones;
pub mod users;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use raft::eraftpb::Entry;
use raft::{RawNode, ReadOnlyOption, StateRole};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::api::{ClientError, TopicInfo};
use crate::ids::{Instant, NodeId, PartitionKey, TopicId};
use crate::io::{DiskDone, DiskError, DiskOp};
use crate::recovery_error::RecoveryError;

pub use command::{Applied, MetaCommand, decode_command, encode_command};
pub use names::validate_name;
pub use persist::MetaIo;
pub use retention::{validate_change, validate_requested};
pub use state::MemberInfo;

use persist::Persister;
use state::MetaState;
use storage::LogStore;

/// Largest encoded command accepted by `propose` (names and addresses are small).
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// Static configuration of one metastore replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaConfig {
    pub node_id: NodeId,
    /// The initial voters (every node's configuration must list the same set).
    pub voters: Vec<NodeId>,
    /// Seed of this node's stream (election timeout spread).
    pub seed: u64,
    /// This node's HTTP and cluster addresses, carried by its heartbeats.
    pub http_addr: String,
    pub cluster_addr: String,
    /// Length of one Raft tick.
    pub tick_ms: u64,
    /// Ticks without a leader before a follower campaigns (the per-node timeout lies in
    /// `election_ticks..2 * election_ticks`).
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats (less than `election_ticks`).
    pub heartbeat_ticks: usize,
    /// How often `poll_heartbeat` asks for this node's membership heartbeat.
    pub heartbeat_ms: u64,
    /// A member whose heartbeat the leader has not seen for this long is marked dead.
    pub dead_after_ms: u64,
    /// Proposals and read barriers still undecided after this long fail (503).
    pub request_timeout_ms: u64,
    /// Take a snapshot (and reset the log) after this many applied entries.
    pub snapshot_every_entries: u64,
    /// ... or once the log file holds this many bytes.
    pub log_bytes_max: u64,
}

impl MetaConfig {
    /// A configuration with the defaults of docs/design.md §6 (100 ms ticks, 1 s election timeout,
    /// 1 s heartbeats, 5 s dead timeout, 5 s request timeout, a snapshot every 1,024 entries).
    pub fn new(node_id: NodeId, voters: Vec<NodeId>, seed: u64) -> MetaConfig {
        MetaConfig {
            node_id,
            voters,
            seed,
            http_addr: String::new(),
            cluster_addr: String::new(),
            tick_ms: 100,
            election_ticks: 10,
            heartbeat_ticks: 2,
            heartbeat_ms: 1_000,
            dead_after_ms: 5_000,
            request_timeout_ms: 5_000,
            snapshot_every_entries: crate::constants::META_SNAPSHOT_EVERY_ENTRIES,
            log_bytes_max: 8 * 1024 * 1024,
        }
    }
}

/// Why `propose` refused a command. Validation errors (400/404/409) come back applied instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Only the leader proposes: forward to `leader` (unknown during an election).
    #[error("not the metastore leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    /// raft refused it (leadership transfer, too much uncommitted data).
    #[error("the metastore dropped the proposal")]
    Dropped,
    /// The encoded command exceeds `MAX_COMMAND_BYTES`.
    #[error("metastore command of {0} bytes is too large")]
    TooLarge(usize),
    /// The metastore's disk failed; it acknowledges nothing until a restart.
    #[error("metastore disk failed: {0}")]
    Failed(DiskError),
}

/// What the metastore asks its driver to do or tells it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaOutput<W> {
    /// Perform a disk operation, then call `on_disk(io, result)`.
    Disk { io: MetaIo, op: DiskOp },
    /// Send raft message bytes to a peer (best effort: loss is fine).
    Send { to: NodeId, bytes: Bytes },
    /// A committed command was applied on this replica. `waiter` is set on the replica that
    /// proposed it; a waiter whose proposal was lost or timed out gets `Unavailable`. `index`:
    /// the entry's Raft log index (`None` for a failed waiter, or a change a snapshot made).
    Applied { waiter: Option<W>, index: Option<u64>, result: Result<Applied, ClientError> },
    /// A read barrier finished: `ok` means this replica has applied everything the leader had
    /// committed when it confirmed its leadership with a quorum, after the barrier was asked.
    Barrier { ctx: W, ok: bool },
    /// A member's liveness changed in the replicated state.
    MembershipChanged { node: NodeId, alive: bool },
    /// The users were replaced wholesale: they are now as the log's first `index` entries left
    /// them (recovery from the snapshot, or a snapshot installed from the leader).
    UsersReplaced { index: u64 },
}

/// Counters for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaCounters {
    /// Peer messages that did not decode, or were not for us.
    pub messages_dropped: u64,
    /// Messages raft refused to step.
    pub step_errors: u64,
    /// Committed entries that did not decode as a command (applied as no-ops).
    pub undecodable_entries: u64,
    /// Snapshots taken locally / installed from the leader.
    pub snapshots_taken: u64,
    pub snapshots_installed: u64,
}

struct Proposal<W> {
    term: u64,
    /// The entry's bytes, checked again when the entry at this index commits.
    data: Vec<u8>,
    waiter: Option<W>,
    deadline: Instant,
}

struct Barrier<W> {
    ctx: W,
    deadline: Instant,
    retry_at: Instant,
    read_index: Option<u64>,
}

/// One metastore replica. `W` identifies whoever waits for a proposal or a read barrier.
pub struct Metastore<W> {
    config: MetaConfig,
    raw: RawNode<LogStore>,
    state: MetaState,
    applied: u64,
    /// Highest commit index durable on this node's disk (a hard state frame or the snapshot).
    durable_commit: u64,
    /// Committed entries handed out by raft, applied once `durable_commit` covers them, so that
    /// whatever this replica applied (and answered) is applied again after any restart.
    unapplied: VecDeque<Entry>,
    snapshot_seq: u64,
    persist: Persister,
    now: Instant,
    next_tick: Instant,
    rng: ChaCha8Rng,
    skip_ticks: usize,
    role: StateRole,
    role_term: u64,
    proposals: BTreeMap<u64, Proposal<W>>,
    barriers: BTreeMap<u64, Barrier<W>>,
    next_barrier: u64,
    /// Leader only: when this leader last saw each member's heartbeat applied (its own clock).
    seen: BTreeMap<NodeId, Instant>,
    /// Leader only: `MarkDead` proposals in flight, by member, with when they were made.
    marking: BTreeMap<NodeId, Instant>,
    last_heartbeat: Option<Instant>,
    outputs: VecDeque<MetaOutput<W>>,
    counters: MetaCounters,
    /// Bumped whenever the users may have changed (a user command applied, a snapshot
    /// installed): what a runtime's copy of the users is refreshed by.
    users_epoch: u64,
}

impl<W> Metastore<W> {
    /// Rebuilds a replica from its files' bytes (`None`: no such file). Repairs (a torn log
    /// tail, a stale log) are the first outputs; `is_ready` turns true once they are durable.
    pub fn recover(
        config: MetaConfig,
        now: Instant,
        raft_log: Option<&Bytes>,
        snapshot: Option<&Bytes>,
    ) -> Result<Metastore<W>, RecoveryError> {
        if !config.voters.contains(&config.node_id) {
            return Err(RecoveryError::Inconsistent {
                file: "metastore configuration".into(),
                what: format!("node {} is not among the voters", config.node_id.0),
            });
        }
        let recovered = recovery::recover(&config.voters, raft_log, snapshot)?;
        let mut rng = ChaCha8Rng::seed_from_u64(
            config.seed ^ u64::from(config.node_id.0).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let applied = recovered.store.snapshot_index();
        let durable_commit = recovered.store.hard_state().commit;
        let raft_config = raft_config(&config, applied, &mut rng);
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&raft_config, recovered.store, &logger).map_err(|e| {
            RecoveryError::Inconsistent {
                file: "metastore".into(),
                what: format!("raft refused the recovered state: {e}"),
            }
        })?;
        let single = config.voters.len() == 1;
        let mut meta = Metastore {
            next_tick: now.plus_millis(config.tick_ms),
            config,
            raw,
            state: recovered.state,
            applied,
            durable_commit,
            unapplied: VecDeque::new(),
            snapshot_seq: recovered.snapshot_seq,
            persist: recovered.persister,
            now,
            rng,
            skip_ticks: 0,
            role: StateRole::Follower,
            role_term: 0,
            proposals: BTreeMap::new(),
            barriers: BTreeMap::new(),
            next_barrier: now.0.max(1),
            seen: BTreeMap::new(),
            marking: BTreeMap::new(),
            last_heartbeat: None,
            outputs: VecDeque::new(),
            counters: MetaCounters::default(),
            users_epoch: 0,
        };
        meta.outputs.push_back(MetaOutput::UsersReplaced { index: applied });
        if single {
            // Nobody else can be leader: do not wait for an election timeout.
            let _ = meta.raw.campaign();
        }
        meta.after_input();
        Ok(meta)
    }

    /// Advances raft's clock: call whenever `next_tick` has passed.
    pub fn handle_tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.run_ticks();
        self.leader_duties();
        self.expire_requests();
        self.after_input();
    }

    /// When `handle_tick` should next be called.
    pub fn next_tick(&self) -> Instant {
        self.next_tick
    }

    /// A raft message from peer `from`. Undecodable or misaddressed bytes are dropped and counted.
    pub fn handle_message(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        self.now = self.now.max(now);
        self.step_message(from, bytes);
        self.after_input();
    }

    /// Proposes a command (leader only). Its outcome comes back as `MetaOutput::Applied` with
    /// `waiter`, including validation errors, or `Unavailable` if it is lost or times out.
    pub fn propose(
        &mut self,
        now: Instant,
        command: MetaCommand,
        waiter: W,
    ) -> Result<(), ProposeError> {
        self.now = self.now.max(now);
        let result = self.propose_internal(&command, Some(waiter));
        self.after_input();
        result
    }

    /// Asks for a read barrier (raft ReadIndex). `ctx` comes back in `MetaOutput::Barrier`:
    /// `ok` once this replica applied the leader's confirmed commit index; not ok when there is
    /// no leader or no confirmation within `request_timeout_ms`.
    pub fn read_barrier(&mut self, now: Instant, ctx: W) {
        self.now = self.now.max(now);
        self.start_barrier(ctx);
        self.after_input();
    }

    /// Completion of a disk operation this metastore emitted.
    pub fn on_disk(&mut self, io: MetaIo, result: Result<DiskDone, DiskError>) {
        if let Some(durable) = self.persist.on_disk(io, result) {
            self.on_durable(durable);
        }
        self.after_input();
    }

    /// Next output; drain to `None` after every input.
    pub fn poll_output(&mut self) -> Option<MetaOutput<W>> {
        self.outputs.pop_front()
    }

    /// This node's membership heartbeat when one is due (every `heartbeat_ms`, and at once after
    /// start-up): propose it here if leader, else forward it to the leader.
    pub fn poll_heartbeat(&mut self, now: Instant) -> Option<MetaCommand> {
        let due =
            self.last_heartbeat.is_none_or(|at| now >= at.plus_millis(self.config.heartbeat_ms));
        if !due {
            return None;
        }
        self.last_heartbeat = Some(now);
        Some(MetaCommand::Heartbeat {
            node: self.config.node_id,
            http_addr: self.config.http_addr.clone(),
            cluster_addr: self.config.cluster_addr.clone(),
            now_ms: now.as_millis(),
        })
    }

    // ---- Local reads (any replica; see `caught_up` and `read_barrier` for freshness) ----

    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.state.topic(name)
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<&TopicInfo> {
        self.state.topic_by_id(id)
    }

    /// The id the next topic created will get, as far as this replica knows.
    pub fn next_topic_id(&self) -> u64 {
        self.state.next_topic_id()
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicInfo> {
        self.state.topics()
    }

    /// Topics whose names sort after `after` (every topic without it), in name order.
    pub fn topics_after(&self, after: Option<&str>) -> impl Iterator<Item = &TopicInfo> {
        self.state.topics_after(after)
    }

    /// The user `name` as this replica knows it.
    pub fn user(&self, name: &str) -> Option<&users::UserInfo> {
        self.state.users().get(name).map(|(info, _)| info)
    }

    /// The users (docs/design.md §8), hashes included (for the runtime's password checks).
    pub fn users(&self) -> &users::Users {
        self.state.users()
    }

    /// Changes whenever `users()` may have changed since it was last read.
    pub fn users_epoch(&self) -> u64 {
        self.users_epoch
    }

    /// Owner of a partition (sticky: a dead owner keeps its partitions).
    pub fn owner(&self, key: PartitionKey) -> Option<NodeId> {
        self.state.owner(key)
    }

    pub fn is_alive(&self, node: NodeId) -> bool {
        self.state.is_alive(node)
    }

    pub fn members(&self) -> Vec<MemberInfo> {
        self.state.members()
    }

    /// The leader this replica believes in.
    pub fn leader(&self) -> Option<NodeId> {
        let id = self.raw.raft.leader_id;
        (id != raft::INVALID_ID).then_some(NodeId(id as u32))
    }

    /// The raft term this replica is in.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// "leader", "follower", "candidate" or "pre-candidate".
    pub fn role(&self) -> &'static str {
        match self.raw.raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre-candidate",
        }
    }

    /// Knows a leader and holds everything it knows to be committed (no disk failure): applied,
    /// or handed out and waiting only for this node's own write of the commit index. A leader
    /// must first have committed an entry of its own term: until then entries of earlier terms
    /// in its log may be committed without it knowing (a restarted single voter elects itself
    /// before its commit index catches up with its log).
    pub fn caught_up(&self) -> bool {
        let leader_settled = !self.is_leader() || self.raw.raft.commit_to_current_term();
        let received = self.unapplied.back().map_or(self.applied, |entry| entry.index);
        self.leader().is_some()
            && leader_settled
            && self.persist.failed().is_none()
            && received >= self.raw.raft.raft_log.committed
    }

    /// Incarnation `id` was issued and is absent from this replica. Leader confirmation is a
    /// successful `read_barrier` followed by this.
    pub fn confirm_gone_locally(&self, id: TopicId) -> bool {
        self.state.is_gone(id)
    }

    /// True once start-up repairs are durable.
    pub fn is_ready(&self) -> bool {
        self.persist.is_repaired()
    }

    /// The latched disk error, if the metastore's disk failed (restart to recover).
    pub fn failed(&self) -> Option<&DiskError> {
        self.persist.failed()
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// White-box checks (run by `Node::check_invariants`): the entries waiting to be applied
    /// follow the applied index without a gap, and each waits for a commit index not yet durable.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (expected, entry) in (self.applied + 1..).zip(&self.unapplied) {
            if entry.index != expected {
                return Err(format!(
                    "metastore: unapplied entry {} where {expected} was due",
                    entry.index
                ));
            }
        }
        if let Some(first) = self.unapplied.front()
            && first.index <= self.durable_commit
        {
            return Err(format!(
                "metastore: entry {} unapplied though commit {} is durable",
                first.index, self.durable_commit
            ));
        }
        Ok(())
    }

    pub fn counters(&self) -> MetaCounters {
        self.counters
    }
}

fn raft_config(config: &MetaConfig, applied: u64, rng: &mut ChaCha8Rng) -> raft::Config {
    let election = config.election_ticks.max(2);
    let timeout = election + rng.random_range(0..election);
    raft::Config {
        id: u64::from(config.node_id.0),
        election_tick: election,
        heartbeat_tick: config.heartbeat_ticks.clamp(1, election - 1),
        // A range of one value: raft-rs's thread RNG then has nothing to choose.
        min_election_tick: timeout,
        max_election_tick: timeout + 1,
        applied,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        read_only_option: ReadOnlyOption::Safe,
        max_uncommitted_size: 16 * 1024 * 1024,
        max_committed_size_per_ready: 4 * 1024 * 1024,
        ..raft::Config::default()
    }
}
