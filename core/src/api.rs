//! Client-facing requests and answers, independent of HTTP. The tokio runtime maps HTTP onto
//! `ClientOp` and `ClientReply` onto status codes and JSON; the simulator's workload uses them
//! directly. Validation lives in the core so both runtimes reject bad input identically.

mod queue_settings;

use bytes::Bytes;

pub use queue_settings::{
    DeadLetter, MAX_MAX_DELIVERIES, MAX_VISIBILITY_TIMEOUT_MS, MIN_VISIBILITY_TIMEOUT_MS,
    QueueSettings,
};

use crate::access::{Grant, PasswordHash, UserInfo};
use crate::constants::TOPIC_PAGE_MAX;
use crate::ids::TopicId;

/// A request from a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOp {
    /// Create a topic. `partitions` defaults to 3; without `retention_ms` the default retention
    /// (7 days) applies; `retention_bytes` (per partition) is off unless given; `queue` holds
    /// the lease and dead-letter settings of its queue consumers.
    CreateTopic {
        name: String,
        partitions: Option<u32>,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
        queue: QueueSettings,
    },
    /// Change a topic's retention (`PATCH /v1/topics/{t}`): only what `change` names changes.
    UpdateTopic { name: String, change: TopicChange },
    /// Delete a topic (records still in the WAL for it are discarded later).
    DeleteTopic { name: String },
    /// One page of the topic list: the next `limit` names after `after` (from the first without
    /// it), in name order, less those the caller may not see.
    ListTopics { after: Option<String>, limit: u32 },
    /// One topic with its partition statistics (of one `partition` if given).
    GetTopic { name: String, partition: Option<u32> },
    /// Produce messages. `batch` selects the batch form (errors name the message index).
    Produce { topic: String, messages: Vec<ProduceMessage>, batch: bool },
    /// Read committed records of one partition from `offset`, at most `max` of them. With
    /// `wait_ms` > 0 (a long-poll, at most `MAX_CONSUME_WAIT_MS`), a consume that finds
    /// nothing at `offset` waits until a record there becomes visible or the wait ends (then
    /// it is answered empty); 0 answers at once.
    Consume { topic: String, partition: u32, offset: u64, max: u32, wait_ms: u64 },
    /// The cluster's members as this node's metastore replica sees them.
    Members,
    /// Queue consume: lease up to `max` (1-100) available messages of the topic (of one
    /// `partition` if given) for the topic's visibility timeout. With `wait_ms` > 0 (at most
    /// `MAX_CONSUME_WAIT_MS`) a receive that finds nothing waits until a message becomes
    /// available or the wait ends (then it is answered empty).
    Receive { topic: String, partition: Option<u32>, max: u32, wait_ms: u64 },
    /// Settle the leases `handles` name (receipt handles as the client sent them). `batch`:
    /// the batch form (one result per handle); otherwise exactly one handle.
    Settle { topic: String, handles: Vec<String>, action: SettleAction, batch: bool },
    /// Create a user (`POST /v1/users`); `hash` is the password's KDF hash, made by the runtime.
    CreateUser { name: String, hash: PasswordHash, grants: Vec<Grant> },
    /// Every user (admins only).
    ListUsers,
    /// One user (an admin, or the user itself).
    GetUser { name: String },
    /// Delete a user (admins only).
    DeleteUser { name: String },
    /// Replace a user's grants (admins only).
    SetGrants { name: String, grants: Vec<Grant> },
    /// Replace a user's password hash (an admin, or the user itself).
    SetPassword { name: String, hash: PasswordHash },
}

impl ClientOp {
    /// The first page of the topic list, as large as a page may be.
    pub fn list_topics() -> Self {
        ClientOp::ListTopics { after: None, limit: TOPIC_PAGE_MAX }
    }
}

/// What a settle does to a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleAction {
    /// Done: never delivered again (204 once durable).
    Ack,
    /// Renew the lease for a full visibility timeout from now.
    Extend,
    /// Give it back: available again at once.
    Nack,
}

/// One message a queue receive leased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasedRecord {
    pub record: ConsumedRecord,
    /// `partition:offset:nonce`: what settles this delivery, and nothing else.
    pub receipt_handle: String,
    /// How many times the message was delivered, this delivery included.
    pub delivery_count: u32,
}

/// One message of a produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceMessage {
    /// Partition-affinity key; `fnv1a_32(key) % partitions` unless `partition` is given.
    pub key: Option<Bytes>,
    /// Explicit partition; wins over the key.
    pub partition: Option<u32>,
    /// The payload, 1 B to 1 MiB.
    pub payload: Bytes,
}

/// The answer to a `ClientOp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientReply {
    /// 201: the topic was created.
    TopicCreated(TopicInfo),
    /// 204: the topic was deleted.
    TopicDeleted,
    /// 200: the topic's retention was changed; the topic as it is now.
    TopicUpdated(TopicInfo),
    /// 200: one page of topics, in name order. `next`: the last name the page covered, to ask
    /// for the page after it; `None` when no topic follows.
    Topics { topics: Vec<TopicInfo>, next: Option<String> },
    /// 200: one topic with its partitions.
    Topic(TopicInfo, Vec<PartitionStats>),
    /// 202: every message is durable in the ingress WAL.
    Produced { accepted: usize },
    /// 200 (or 204 when empty): committed records, in offset order.
    Records(Vec<ConsumedRecord>),
    /// 200: cluster members.
    Members(Vec<MemberView>),
    /// 200 (or 204 when empty): messages leased by a queue receive.
    Leased(Vec<LeasedRecord>),
    /// A settle's outcome per handle, in request order: 204 / the error (single form), or
    /// 200 with every result (batch form).
    Settled(Vec<Result<(), ClientError>>),
    /// 201: the user was created.
    UserCreated(UserInfo),
    /// 200: the user's grants or password were replaced; the user as it is now.
    UserChanged(UserInfo),
    /// 204: the user was deleted.
    UserDeleted,
    /// 200: every user.
    Users(Vec<UserInfo>),
    /// 200: one user.
    User(UserInfo),
    /// The request failed and changed nothing (except `WalFailed`, which is ambiguous).
    Error(ClientError),
}

/// A topic as clients see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: TopicId,
    pub partitions: u32,
    /// `None`: never given, the build's default applies (`retention_ms_in_force`); `Some(0)`:
    /// records are kept forever.
    pub retention_ms: Option<u64>,
    /// Bytes each partition keeps at most; `None`: no size limit.
    pub retention_bytes: Option<u64>,
    pub created_ms: u64,
    /// Leases and dead letters of queue consumers (set at create).
    pub queue: QueueSettings,
}

impl TopicInfo {
    /// The retention that applies to this topic in milliseconds (`0`: forever), what the API
    /// shows: the stored value, or `DEFAULT_RETENTION_MS` for a topic never given one.
    pub fn retention_ms_in_force(&self) -> u64 {
        self.retention_ms.unwrap_or(crate::constants::DEFAULT_RETENTION_MS)
    }
}

/// What an update of a topic changes. A field left `None` keeps its value; `retention_bytes:
/// Some(None)` removes the size limit. An update that changes nothing is refused (400).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopicChange {
    pub retention_ms: Option<u64>,
    pub retention_bytes: Option<Option<u64>>,
}

impl TopicChange {
    /// True when the change names no field.
    pub fn is_empty(&self) -> bool {
        self.retention_ms.is_none() && self.retention_bytes.is_none()
    }

    /// `topic` with this change applied.
    pub fn applied_to(&self, topic: &TopicInfo) -> TopicInfo {
        TopicInfo {
            retention_ms: self.retention_ms.or(topic.retention_ms),
            retention_bytes: self.retention_bytes.unwrap_or(topic.retention_bytes),
            ..topic.clone()
        }
    }
}

/// Statistics of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStats {
    pub index: u32,
    pub owner_node: u32,
    /// Known when the owner is this node or answered in time; `None` while it is down (a
    /// partition that never received a record has numbers: zeros).
    pub numbers: Option<PartitionNumbers>,
}

/// What an owner reports of one partition log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionNumbers {
    /// The first offset still held (records below it were deleted by retention).
    pub log_start_offset: u64,
    /// Offsets below it are visible.
    pub high_watermark: u64,
    /// Segment files.
    pub segments: u64,
    /// Bytes of every segment together.
    pub size_bytes: u64,
    /// Queue consume: messages settled (acked, or below the ack frontier) from the log start,
    /// and messages leased now. Available = high watermark - log start - settled - leased.
    pub queue_settled: u64,
    pub queue_leased: u64,
    /// The timestamp (ms) of the oldest unsettled message, by offset: what its age is told
    /// from. `None` if every message is settled, or its owner has not read it yet (see
    /// `node/oldest.rs`).
    pub oldest_unsettled_ms: Option<u64>,
}

/// A cluster member as `GET /v1/cluster/members` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub id: u32,
    pub http_addr: String,
    pub cluster_addr: String,
    pub alive: bool,
    pub partitions_owned: u32,
    /// `leader`, `follower`, or `unknown` (as far as this replica knows).
    pub role: String,
    pub last_heartbeat_ms: u64,
}

/// One committed record as a consumer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub key: Option<Bytes>,
    pub payload: Bytes,
    /// Milliseconds since the Unix epoch at which the record was accepted.
    pub timestamp_ms: u64,
}

/// Why a request failed. `http_status` maps each to the status of the README's API table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("ingress WAL failed ({0}); this node acknowledges no produce until it restarts")]
    WalFailed(String),
    #[error("shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Unavailable(String),
    /// A bound of the node's internal queues is reached: the request was refused before it
    /// changed anything (a produce is refused before it is staged); retry after a pause.
    #[error("node overloaded: {0}; retry later")]
    Overloaded(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// A consume below the partition's log start offset: those records are gone (retention,
    /// or a disk that lost them). Answered 410 with the offset to read from instead.
    #[error("offset is below the log start offset {log_start_offset}: those records are gone")]
    Gone { log_start_offset: u64 },
    /// A receipt handle that names no live lease (expired, settled, redelivered under a new
    /// handle, or never ours): 410, do not retry.
    #[error("{0}")]
    StaleHandle(String),
    /// No credentials, wrong ones, or a user that no longer exists: 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// The user holds no grant for this: 403.
    #[error("{0}")]
    Forbidden(String),
    /// The principal's produce quota is spent (`quota.rs`): 429, nothing was staged; the
    /// node takes more from it `retry_after_us` after it refused this one.
    #[error("{message}")]
    QuotaExceeded { message: String, retry_after_us: u64 },
}

impl ClientError {
    /// HTTP status code for this error.
    pub fn http_status(&self) -> u16 {
        match self {
            ClientError::BadRequest(_) => 400,
            ClientError::NotFound(_) => 404,
            ClientError::Conflict(_) => 409,
            ClientError::TooLarge(_) => 413,
            ClientError::WalFailed(_) | ClientError::Internal(_) => 500,
            ClientError::ShuttingDown | ClientError::Unavailable(_) => 503,
            ClientError::Overloaded(_) => 503,
            ClientError::Gone { .. } | ClientError::StaleHandle(_) => 410,
            ClientError::Unauthenticated(_) => 401,
            ClientError::Forbidden(_) => 403,
            ClientError::QuotaExceeded { .. } => 429,
        }
    }
}

/// Counters and gauges of one node (exported at `/metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Produce requests answered 202.
    pub produce_requests_accepted: u64,
    /// Records acknowledged (a batch counts each of its messages).
    pub records_accepted: u64,
    /// Produce requests rejected (any status other than 202).
    pub produce_requests_rejected: u64,
    /// Requests refused by the grant check (401 for a user that no longer exists, 403), this
    /// node's clients' and those other nodes forwarded.
    pub requests_refused_access: u64,
    /// Produce requests refused 429 because their principal's produce quota was spent.
    pub produce_requests_throttled: u64,
    /// Group commits of the ingress WAL (one write + one fsync each).
    pub wal_group_commits: u64,
    /// fsyncs issued on the ingress WAL (segments and checkpoint).
    pub wal_fsyncs: u64,
    /// Records written by WAL group commits (divide by `wal_group_commits` for the mean batch).
    pub wal_records_synced: u64,
    /// Bytes written to the ingress WAL.
    pub wal_bytes_written: u64,
    /// 1 once the WAL latched after a failure.
    pub wal_failed: u64,
    /// WAL segments currently on disk.
    pub wal_segments: u64,
    /// Bytes of WAL segments currently on disk.
    pub wal_bytes_on_disk: u64,
    /// Records accepted but not yet committed or discarded (durable sequence - checkpoint).
    pub dispatch_backlog: u64,
    /// Durable WAL checkpoint.
    pub wal_checkpoint: u64,
    /// Commits to partition logs that succeeded / failed.
    pub commits_ok: u64,
    pub commits_failed: u64,
    /// Records made visible by commits.
    pub records_committed: u64,
    /// fsyncs issued on partition logs.
    pub partition_fsyncs: u64,
    /// Records rerouted to a sibling partition.
    pub records_rerouted: u64,
    /// Records discarded because their topic was deleted.
    pub records_discarded: u64,
    /// Acknowledged records found damaged at rest in the WAL before dispatch: lost (their only
    /// copy). Anything above zero means the disk corrupted data; see the error log.
    pub records_lost: u64,
    /// Records of bulk produces dropped at start-up because their last chunk never reached the
    /// WAL (never acknowledged; a crash or a disk failure ended the request).
    pub records_abandoned: u64,
    /// Per partition held here: (topic name, partition, its numbers).
    pub partitions: Vec<(String, u32, PartitionNumbers)>,
    /// Sealed segments deleted by retention, and the records and bytes they held.
    pub retention_segments_deleted: u64,
    pub retention_records_deleted: u64,
    pub retention_bytes_deleted: u64,
    /// 1 once recovery finished and the node serves requests.
    pub ready: u64,
    /// 1 while this node is the metastore leader.
    pub meta_leader: u64,
    /// Commits sent to other nodes: answered ok / failed or timed out.
    pub remote_commits_ok: u64,
    pub remote_commits_failed: u64,
    /// Peer messages that could not be decoded (refused).
    pub peer_messages_refused: u64,
    /// Metastore peer messages dropped: they did not decode, or were not for this node.
    pub meta_messages_dropped: u64,
    /// Metastore messages raft refused to step.
    pub meta_step_errors: u64,
    /// Committed metastore entries that did not decode as a command (applied as no-ops).
    pub meta_undecodable_entries: u64,
    /// Metastore snapshots taken locally / installed from the leader.
    pub meta_snapshots_taken: u64,
    pub meta_snapshots_installed: u64,
    /// Partition reads that found a damaged record at rest (a frame whose CRC or offset does
    /// not hold): answered 500, nothing from it served. Anything above zero means the disk
    /// corrupted data; the error log names the file and byte.
    pub partition_read_damaged: u64,
    /// Queue consume: deliveries made (a redelivery counts again), acks made durable, and
    /// syncs of the consumer journal (group commits and images).
    pub queue_deliveries: u64,
    pub queue_acks: u64,
    /// Messages moved to their topic's dead-letter topic (the original's ack durable).
    pub queue_dead_lettered: u64,
    pub consumer_journal_syncs: u64,
    /// Long-poll consumes parked on this node now (local clients' and peers'), at most
    /// `PARKED_MAX`.
    pub consumes_parked: u64,
}
