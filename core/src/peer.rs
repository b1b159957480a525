//! Messages between nodes and their wire codec. The runtime only moves opaque bytes (over QUIC in
//! production, through the simulated network in tests); encoding lives here so both runtimes
//! speak exactly the same protocol.
//!
//! Every message starts with a protocol version and a type tag. A decoder never panics on
//! untrusted bytes: an unknown version or tag, or a malformed body, is a clean `DecodeError` that
//! the receiver answers or drops. The sender's identity is established by the transport (an
//! authenticated connection), never by a field in the message.

use bytes::Bytes;

use crate::access::{Principal, UserId, UserInfo, validate_user_name};
use crate::api::{ClientError, PartitionNumbers, QueueSettings, SettleAction, TopicInfo};
use crate::codec::{Reader, put_optional_bytes};
use crate::ids::{PartitionKey, TopicId};
use crate::meta::users::{decode_user_info, encode_user_info};
use crate::queue::ReceiptHandle;

mod queue_wire;
pub use queue_wire::WireLeased;

/// Version of the node protocol. Bump it when a message's layout changes (3: a topic in an
/// admin result carries its queue settings, and a queue receive its wait; 5: forwarded requests
/// carry their principal, and an admin result may be a user).
pub const PROTOCOL_VERSION: u8 = 5;

/// One record in a commit batch sent to a partition's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireRecord {
    /// Sequence number in the origin node's WAL (the idempotency key with the origin).
    pub seq: u64,
    pub timestamp_ms: u64,
    pub key: Option<Bytes>,
    pub payload: Bytes,
}

/// How a remote commit ended (mirrors the dispatcher's `CommitResult`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireCommitResult {
    /// The records are visible (newly written, or already there from an earlier attempt).
    Committed {
        first_offset: u64,
    },
    Failed(String),
    TopicGone,
}

/// A message between two nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    /// A Raft message of the metastore (raft-rs protobuf bytes).
    Raft(Bytes),
    /// Commit these records on `target` (the receiver must own it).
    CommitBatch { id: u64, origin_checkpoint: u64, target: PartitionKey, records: Vec<WireRecord> },
    /// The answer to `CommitBatch { id, .. }`.
    CommitReply { id: u64, result: WireCommitResult },
    /// Asks the metastore leader whether a topic incarnation is gone for good.
    ConfirmGone { id: u64, topic: TopicId },
    /// The leader's answer (after its read barrier).
    ConfirmGoneReply { id: u64, topic: TopicId, gone: bool },
    /// A follower forwards a metastore command (`meta::encode_command`) to the leader, for
    /// `who` (the leader checks the grant again).
    Propose { id: u64, who: Principal, command: Bytes },
    /// The leader's answer once the command was applied (or refused).
    ProposeReply { id: u64, result: WireAdminResult },
    /// Read committed records of a partition the receiver owns; with `wait_ms` > 0 (a
    /// long-poll), an owner that has nothing at `offset` answers once a record there is visible
    /// or the wait ended (empty). A consume without a wait keeps the earlier layout (tag 8);
    /// one with a wait has its own tag, so the encoding stays canonical.
    Consume { id: u64, who: Principal, target: PartitionKey, offset: u64, max: u32, wait_ms: u64 },
    /// The owner's answer.
    ConsumeReply { id: u64, result: Result<Vec<WireConsumed>, WireError> },
    /// Watermark and size of the receiver's partitions of `topic` (for `GET /v1/topics/{t}`).
    TopicStats { id: u64, topic: TopicId },
    /// The numbers of each partition of the topic the sender owns or holds.
    TopicStatsReply { id: u64, partitions: Vec<(u32, PartitionNumbers)> },
    /// Queue receive on a partition the receiver owns: lease up to `max` messages, waiting up
    /// to `wait_ms` (parked on the owner) if none is available.
    Receive { id: u64, who: Principal, target: PartitionKey, max: u32, wait_ms: u64 },
    /// The owner's answer: what it leased (empty: nothing available).
    ReceiveReply { id: u64, result: Result<Vec<WireLeased>, WireError> },
    /// Settle these leases of the receiver's partitions of `topic`.
    Settle {
        id: u64,
        who: Principal,
        topic: TopicId,
        action: SettleAction,
        handles: Vec<ReceiptHandle>,
    },
    /// One result per handle of `Settle { id, .. }`, in order.
    SettleReply { id: u64, results: Vec<Result<(), WireError>> },
    /// A topic-wide queue receive waits: answer once a message may be available on one of the
    /// receiver's partitions of `topic` (at once if one is), or after `wait_ms`. Nothing is
    /// leased: the sender asks again.
    ReceiveWatch { id: u64, topic: TopicId, wait_ms: u64 },
    /// The answer to `ReceiveWatch { id, .. }`: look again.
    ReceiveWatchReply { id: u64 },
}

/// The outcome of a forwarded metastore command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireAdminResult {
    Created(TopicInfo),
    /// A user created or changed: the user as it is now.
    User(UserInfo),
    /// A topic update applied: the topic as it is now.
    Updated(TopicInfo),
    Done,
    Error(WireError),
}

/// A client-visible error carried between nodes: the HTTP status and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub status: u16,
    pub message: String,
}

impl WireError {
    /// The error as a client sees it. A 410 carries the log start offset, in decimal, as its
    /// message (what the asking node needs to answer its own client).
    pub fn from_client(error: &ClientError) -> WireError {
        let message = match error {
            ClientError::Gone { log_start_offset } => log_start_offset.to_string(),
            other => other.to_string(),
        };
        WireError { status: error.http_status(), message }
    }

    /// Back to a `ClientError` with the same status.
    pub fn into_client(self) -> ClientError {
        match self.status {
            400 => ClientError::BadRequest(self.message),
            401 => ClientError::Unauthenticated(self.message),
            403 => ClientError::Forbidden(self.message),
            404 => ClientError::NotFound(self.message),
            409 => ClientError::Conflict(self.message),
            413 => ClientError::TooLarge(self.message),
            503 => ClientError::Unavailable(self.message),
            410 => match self.message.parse() {
                Ok(log_start_offset) => ClientError::Gone { log_start_offset },
                Err(_) => ClientError::StaleHandle(self.message),
            },
            _ => ClientError::Internal(self.message),
        }
    }
}

/// One committed record read on its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireConsumed {
    pub offset: u64,
    pub timestamp_ms: u64,
    pub key: Option<Bytes>,
    pub payload: Bytes,
}

/// Why bytes could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unsupported protocol version {0} (this node speaks {PROTOCOL_VERSION})")]
    Version(u8),
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("malformed message")]
    Malformed,
}

const TAG_RAFT: u8 = 1;
const TAG_COMMIT: u8 = 2;
const TAG_COMMIT_REPLY: u8 = 3;
const TAG_CONFIRM: u8 = 4;
const TAG_CONFIRM_REPLY: u8 = 5;
const TAG_PROPOSE: u8 = 6;
const TAG_PROPOSE_REPLY: u8 = 7;
const TAG_CONSUME: u8 = 8;
const TAG_CONSUME_REPLY: u8 = 9;
const TAG_TOPIC_STATS: u8 = 10;
const TAG_TOPIC_STATS_REPLY: u8 = 11;
const TAG_RECEIVE: u8 = 12;
const TAG_RECEIVE_REPLY: u8 = 13;
const TAG_SETTLE: u8 = 14;
const TAG_SETTLE_REPLY: u8 = 15;
/// A consume with a wait: the layout of `TAG_CONSUME` followed by `wait_ms` (never 0).
const TAG_CONSUME_WAIT: u8 = 16;
pub(crate) const TAG_RECEIVE_WATCH: u8 = 17;
pub(crate) const TAG_RECEIVE_WATCH_REPLY: u8 = 18;

const RESULT_COMMITTED: u8 = 0;
const RESULT_FAILED: u8 = 1;
const RESULT_GONE: u8 = 2;

impl PeerMessage {
    /// Encodes the message for the wire.
    pub fn encode(&self) -> Bytes {
        let mut out = vec![PROTOCOL_VERSION];
        match self {
            PeerMessage::Raft(bytes) => {
                out.push(TAG_RAFT);
                out.extend_from_slice(bytes);
            }
            PeerMessage::CommitBatch { id, origin_checkpoint, target, records } => {
                out.push(TAG_COMMIT);
                put_u64s(&mut out, &[*id, *origin_checkpoint, target.topic.0]);
                out.extend_from_slice(&target.partition.to_le_bytes());
                put_u64s(&mut out, &[records.len() as u64]);
                for record in records {
                    put_u64s(&mut out, &[record.seq, record.timestamp_ms]);
                    put_optional_bytes(&mut out, record.key.as_deref());
                    put_optional_bytes(&mut out, Some(&record.payload));
                }
            }
            PeerMessage::CommitReply { id, result } => {
                out.push(TAG_COMMIT_REPLY);
                put_u64s(&mut out, &[*id]);
                encode_result(&mut out, result);
            }
            PeerMessage::ConfirmGone { id, topic } => {
                out.push(TAG_CONFIRM);
                put_u64s(&mut out, &[*id, topic.0]);
            }
            PeerMessage::ConfirmGoneReply { id, topic, gone } => {
                out.push(TAG_CONFIRM_REPLY);
                put_u64s(&mut out, &[*id, topic.0]);
                out.push(u8::from(*gone));
            }
            PeerMessage::Propose { id, who, command } => {
                out.push(TAG_PROPOSE);
                put_u64s(&mut out, &[*id]);
                put_principal(&mut out, who);
                out.extend_from_slice(command);
            }
            PeerMessage::ProposeReply { id, result } => {
                out.push(TAG_PROPOSE_REPLY);
                put_u64s(&mut out, &[*id]);
                encode_admin_result(&mut out, result);
            }
            PeerMessage::Consume { id, who, target, offset, max, wait_ms } => {
                out.push(if *wait_ms == 0 { TAG_CONSUME } else { TAG_CONSUME_WAIT });
                put_u64s(&mut out, &[*id]);
                put_principal(&mut out, who);
                put_u64s(&mut out, &[target.topic.0, *offset]);
                out.extend_from_slice(&target.partition.to_le_bytes());
                out.extend_from_slice(&max.to_le_bytes());
                if *wait_ms != 0 {
                    put_u64s(&mut out, &[*wait_ms]);
                }
            }
            PeerMessage::ConsumeReply { id, result } => {
                out.push(TAG_CONSUME_REPLY);
                put_u64s(&mut out, &[*id]);
                encode_consume_result(&mut out, result);
            }
            PeerMessage::TopicStats { id, topic } => {
                out.push(TAG_TOPIC_STATS);
                put_u64s(&mut out, &[*id, topic.0]);
            }
            PeerMessage::TopicStatsReply { id, partitions } => {
                out.push(TAG_TOPIC_STATS_REPLY);
                encode_topic_stats_reply(&mut out, *id, partitions);
            }
            // Receives, watches and settles (queue consume).
            _ => queue_wire::encode(self, &mut out),
        }
        Bytes::from(out)
    }

    /// Decodes a message from the wire.
    pub fn decode(bytes: &Bytes) -> Result<PeerMessage, DecodeError> {
        let mut reader = Reader::new(bytes);
        let version = reader.take(1).ok_or(DecodeError::Malformed)?[0];
        if version != PROTOCOL_VERSION {
            return Err(DecodeError::Version(version));
        }
        let tag = reader.take(1).ok_or(DecodeError::Malformed)?[0];
        let message = match tag {
            TAG_RAFT => Some(PeerMessage::Raft(bytes.slice(2..))),
            TAG_PROPOSE => decode_propose(bytes, &mut reader),
            TAG_COMMIT => decode_commit(&mut reader),
            TAG_COMMIT_REPLY | TAG_CONFIRM | TAG_CONFIRM_REPLY => decode_small(tag, &mut reader),
            TAG_PROPOSE_REPLY | TAG_CONSUME | TAG_CONSUME_REPLY => decode_small(tag, &mut reader),
            TAG_TOPIC_STATS | TAG_TOPIC_STATS_REPLY => decode_small(tag, &mut reader),
            TAG_CONSUME_WAIT => decode_small(tag, &mut reader),
            TAG_RECEIVE_WATCH | TAG_RECEIVE_WATCH_REPLY => decode_small(tag, &mut reader),
            TAG_RECEIVE => queue_wire::decode_receive(&mut reader),
            TAG_RECEIVE_REPLY => queue_wire::decode_receive_reply(&mut reader),
            TAG_SETTLE => queue_wire::decode_settle(&mut reader),
            TAG_SETTLE_REPLY => queue_wire::decode_settle_reply(&mut reader),
            other => return Err(DecodeError::UnknownType(other)),
        };
        let message = message.ok_or(DecodeError::Malformed)?;
        let opaque_tail = matches!(message, PeerMessage::Raft(_) | PeerMessage::Propose { .. });
        if !opaque_tail && !reader.rest().is_empty() {
            return Err(DecodeError::Malformed);
        }
        Ok(message)
    }

    /// Short name of the message type, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerMessage::Raft(_) => "raft",
            PeerMessage::CommitBatch { .. } => "commit",
            PeerMessage::CommitReply { .. } => "commit-reply",
            PeerMessage::ConfirmGone { .. } => "confirm-gone",
            PeerMessage::ConfirmGoneReply { .. } => "confirm-gone-reply",
            PeerMessage::Propose { .. } => "propose",
            PeerMessage::ProposeReply { .. } => "propose-reply",
            PeerMessage::Consume { .. } => "consume",
            PeerMessage::ConsumeReply { .. } => "consume-reply",
            PeerMessage::TopicStats { .. } => "topic-stats",
            PeerMessage::TopicStatsReply { .. } => "topic-stats-reply",
            PeerMessage::Receive { .. } => "receive",
            PeerMessage::ReceiveReply { .. } => "receive-reply",
            PeerMessage::Settle { .. } => "settle",
            PeerMessage::SettleReply { .. } => "settle-reply",
            PeerMessage::ReceiveWatch { .. } => "receive-watch",
            PeerMessage::ReceiveWatchReply { .. } => "receive-watch-reply",
        }
    }
}

/// Per partition: its number, then `PartitionNumbers` in field order (`u64::MAX`: no oldest
/// unsettled message).
fn encode_topic_stats_reply(out: &mut Vec<u8>, id: u64, partitions: &[(u32, PartitionNumbers)]) {
    put_u64s(out, &[id, partitions.len() as u64]);
    for (partition, n) in partitions {
        out.extend_from_slice(&partition.to_le_bytes());
        let oldest = n.oldest_unsettled_ms.unwrap_or(u64::MAX);
        let queue = [n.queue_settled, n.queue_leased, oldest];
        put_u64s(out, &[n.log_start_offset, n.high_watermark, n.segments, n.size_bytes]);
        put_u64s(out, &queue);
    }
}

/// A forwarded command: its id, its principal, then the command's bytes to the end.
fn decode_propose(bytes: &Bytes, reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let id = reader.u64()?;
    let who = get_principal(reader)?;
    let command = bytes.slice(bytes.len() - reader.remaining()..);
    Some(PeerMessage::Propose { id, who, command })
}

const PRINCIPAL_TRUSTED: u8 = 0;
const PRINCIPAL_USER: u8 = 1;

/// Who a forwarded request is for: a tag, and for a user its name and incarnation.
pub(crate) fn put_principal(out: &mut Vec<u8>, who: &Principal) {
    match who {
        Principal::Trusted => out.push(PRINCIPAL_TRUSTED),
        Principal::User { name, id } => {
            out.push(PRINCIPAL_USER);
            put_optional_bytes(out, Some(name.as_bytes()));
            put_u64s(out, &[id.0]);
        }
    }
}

/// Inverse of `put_principal`; `None` for an unknown tag or a name no user could have.
pub(crate) fn get_principal(reader: &mut Reader<'_>) -> Option<Principal> {
    match reader.take(1)?[0] {
        PRINCIPAL_TRUSTED => Some(Principal::Trusted),
        PRINCIPAL_USER => {
            let name = std::str::from_utf8(reader.optional_bytes()??).ok()?;
            validate_user_name(name).ok()?;
            Some(Principal::User { name: name.to_string(), id: UserId(reader.u64()?) })
        }
        _ => None,
    }
}

fn put_u64s(out: &mut Vec<u8>, values: &[u64]) {
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// Decodes the body of every message with a fixed, small layout after its id.
fn decode_small(tag: u8, reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let id = reader.u64()?;
    Some(match tag {
        TAG_COMMIT_REPLY => PeerMessage::CommitReply { id, result: decode_result(reader)? },
        TAG_CONFIRM => PeerMessage::ConfirmGone { id, topic: TopicId(reader.u64()?) },
        TAG_CONFIRM_REPLY => {
            let topic = TopicId(reader.u64()?);
            let gone = match reader.take(1)?[0] {
                0 => false,
                1 => true,
                _ => return None,
            };
            PeerMessage::ConfirmGoneReply { id, topic, gone }
        }
        TAG_PROPOSE_REPLY => PeerMessage::ProposeReply { id, result: decode_admin_result(reader)? },
        TAG_CONSUME | TAG_CONSUME_WAIT => {
            let who = get_principal(reader)?;
            let (topic, offset) = (TopicId(reader.u64()?), reader.u64()?);
            let target = PartitionKey { topic, partition: reader.u32()? };
            let max = reader.u32()?;
            // A wait of 0 has exactly one spelling: the tag without a wait.
            let wait_ms = if tag == TAG_CONSUME { 0 } else { reader.u64().filter(|&w| w != 0)? };
            PeerMessage::Consume { id, who, target, offset, max, wait_ms }
        }
        TAG_TOPIC_STATS => PeerMessage::TopicStats { id, topic: TopicId(reader.u64()?) },
        TAG_RECEIVE_WATCH => {
            PeerMessage::ReceiveWatch { id, topic: TopicId(reader.u64()?), wait_ms: reader.u64()? }
        }
        TAG_RECEIVE_WATCH_REPLY => PeerMessage::ReceiveWatchReply { id },
        TAG_TOPIC_STATS_REPLY => {
            let count = reader.u64()?;
            let mut partitions = Vec::with_capacity(capacity_for(count, reader, 60));
            for _ in 0..count {
                let partition = reader.u32()?;
                let numbers = PartitionNumbers {
                    log_start_offset: reader.u64()?,
                    high_watermark: reader.u64()?,
                    segments: reader.u64()?,
                    size_bytes: reader.u64()?,
                    queue_settled: reader.u64()?,
                    queue_leased: reader.u64()?,
                    oldest_unsettled_ms: Some(reader.u64()?).filter(|&ms| ms != u64::MAX),
                };
                partitions.push((partition, numbers));
            }
            PeerMessage::TopicStatsReply { id, partitions }
        }
        TAG_CONSUME_REPLY => {
            PeerMessage::ConsumeReply { id, result: decode_consume_result(reader)? }
        }
        _ => return None,
    })
}

/// Room to reserve for `count` entries of at least `min_entry_bytes` each: no more than the bytes
/// left could hold, so a short message claiming a huge count cannot make us allocate much.
fn capacity_for(count: u64, reader: &Reader<'_>, min_entry_bytes: usize) -> usize {
    let fits = reader.remaining() / min_entry_bytes;
    usize::try_from(count).map_or(fits, |count| count.min(fits))
}

fn decode_commit(reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let id = reader.u64()?;
    let origin_checkpoint = reader.u64()?;
    let topic = TopicId(reader.u64()?);
    let partition = reader.u32()?;
    let count = reader.u64()?;
    let mut records = Vec::with_capacity(capacity_for(count, reader, 24));
    for _ in 0..count {
        let seq = reader.u64()?;
        let timestamp_ms = reader.u64()?;
        let key = reader.optional_bytes()?.map(Bytes::copy_from_slice);
        let payload = Bytes::copy_from_slice(reader.optional_bytes()??);
        records.push(WireRecord { seq, timestamp_ms, key, payload });
    }
    let target = PartitionKey { topic, partition };
    Some(PeerMessage::CommitBatch { id, origin_checkpoint, target, records })
}

fn encode_result(out: &mut Vec<u8>, result: &WireCommitResult) {
    match result {
        WireCommitResult::Committed { first_offset } => {
            out.push(RESULT_COMMITTED);
            put_u64s(out, &[*first_offset]);
        }
        WireCommitResult::Failed(reason) => {
            out.push(RESULT_FAILED);
            put_optional_bytes(out, Some(reason.as_bytes()));
        }
        WireCommitResult::TopicGone => out.push(RESULT_GONE),
    }
}

fn decode_result(reader: &mut Reader<'_>) -> Option<WireCommitResult> {
    match reader.take(1)?[0] {
        RESULT_COMMITTED => Some(WireCommitResult::Committed { first_offset: reader.u64()? }),
        RESULT_FAILED => Some(WireCommitResult::Failed(read_text(reader)?)),
        RESULT_GONE => Some(WireCommitResult::TopicGone),
        _ => None,
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_optional_bytes(out, Some(text.as_bytes()));
}

fn read_text(reader: &mut Reader<'_>) -> Option<String> {
    String::from_utf8(reader.optional_bytes()??.to_vec()).ok()
}

fn encode_error(out: &mut Vec<u8>, error: &WireError) {
    out.extend_from_slice(&error.status.to_le_bytes());
    put_text(out, &error.message);
}

fn decode_error(reader: &mut Reader<'_>) -> Option<WireError> {
    Some(WireError { status: reader.u16()?, message: read_text(reader)? })
}

const ADMIN_CREATED: u8 = 0;
const ADMIN_DONE: u8 = 1;
const ADMIN_ERROR: u8 = 2;
/// A created topic with a `retention_bytes`: `ADMIN_CREATED`'s layout, then the limit (a create
/// without one keeps the old layout, so peers of the build before still understand it).
const ADMIN_CREATED_BYTES: u8 = 3;
/// An updated topic: `ADMIN_CREATED`'s layout, then `retention_bytes` (`u64::MAX`: none).
const ADMIN_UPDATED: u8 = 4;
/// A created or changed user (`meta::users::encode_user_info`).
const ADMIN_USER: u8 = 5;

fn encode_admin_result(out: &mut Vec<u8>, result: &WireAdminResult) {
    match result {
        WireAdminResult::Created(topic) if topic.retention_bytes.is_some() => {
            out.push(ADMIN_CREATED_BYTES);
            encode_topic(out, topic);
            put_u64s(out, &[topic.retention_bytes.unwrap_or(u64::MAX)]);
        }
        WireAdminResult::Created(topic) => {
            out.push(ADMIN_CREATED);
            encode_topic(out, topic);
        }
        WireAdminResult::Updated(topic) => {
            out.push(ADMIN_UPDATED);
            encode_topic(out, topic);
            put_u64s(out, &[topic.retention_bytes.unwrap_or(u64::MAX)]);
        }
        WireAdminResult::User(user) => {
            out.push(ADMIN_USER);
            encode_user_info(out, user);
        }
        WireAdminResult::Done => out.push(ADMIN_DONE),
        WireAdminResult::Error(error) => {
            out.push(ADMIN_ERROR);
            encode_error(out, error);
        }
    }
}

/// A topic's fields other than `retention_bytes`.
fn encode_topic(out: &mut Vec<u8>, topic: &TopicInfo) {
    let retention = topic.retention_ms.unwrap_or(u64::MAX);
    put_u64s(out, &[topic.id.0, retention, topic.created_ms]);
    out.extend_from_slice(&topic.partitions.to_le_bytes());
    put_text(out, &topic.name);
    topic.queue.encode(out);
}

/// Inverse of `encode_topic` (the topic has no `retention_bytes` yet).
fn decode_topic(reader: &mut Reader<'_>) -> Option<TopicInfo> {
    let (id, retention, created_ms) = (TopicId(reader.u64()?), reader.u64()?, reader.u64()?);
    let partitions = reader.u32()?;
    let name = read_text(reader)?;
    let queue = QueueSettings::decode(reader)?;
    let retention_ms = (retention != u64::MAX).then_some(retention);
    Some(TopicInfo { name, id, partitions, retention_ms, retention_bytes: None, created_ms, queue })
}

fn decode_admin_result(reader: &mut Reader<'_>) -> Option<WireAdminResult> {
    match reader.take(1)?[0] {
        ADMIN_CREATED => Some(WireAdminResult::Created(decode_topic(reader)?)),
        ADMIN_USER => Some(WireAdminResult::User(decode_user_info(reader)?)),
        ADMIN_CREATED_BYTES => {
            let topic = decode_topic(reader)?;
            // Present: a create without a limit has its own layout (one spelling per value).
            let bytes = Some(reader.u64()?).filter(|&b| b != u64::MAX)?;
            Some(WireAdminResult::Created(TopicInfo { retention_bytes: Some(bytes), ..topic }))
        }
        ADMIN_UPDATED => {
            let topic = decode_topic(reader)?;
            let retention_bytes = Some(reader.u64()?).filter(|&b| b != u64::MAX);
            Some(WireAdminResult::Updated(TopicInfo { retention_bytes, ..topic }))
        }
        ADMIN_DONE => Some(WireAdminResult::Done),
        ADMIN_ERROR => Some(WireAdminResult::Error(decode_error(reader)?)),
        _ => None,
    }
}

fn encode_consume_result(out: &mut Vec<u8>, result: &Result<Vec<WireConsumed>, WireError>) {
    match result {
        Ok(records) => {
            out.push(0);
            put_u64s(out, &[records.len() as u64]);
            for record in records {
                put_u64s(out, &[record.offset, record.timestamp_ms]);
                put_optional_bytes(out, record.key.as_deref());
                put_optional_bytes(out, Some(&record.payload));
            }
        }
        Err(error) => {
            out.push(1);
            encode_error(out, error);
        }
    }
}

fn decode_consume_result(reader: &mut Reader<'_>) -> Option<Result<Vec<WireConsumed>, WireError>> {
    match reader.take(1)?[0] {
        0 => {
            let count = reader.u64()?;
            let mut records = Vec::with_capacity(capacity_for(count, reader, 24));
            for _ in 0..count {
                let (offset, timestamp_ms) = (reader.u64()?, reader.u64()?);
                let key = reader.optional_bytes()?.map(Bytes::copy_from_slice);
                let payload = Bytes::copy_from_slice(reader.optional_bytes()??);
                records.push(WireConsumed { offset, timestamp_ms, key, payload });
            }
            Some(Ok(records))
        }
        1 => Some(Err(decode_error(reader)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A peer's 410 reaches the asking node's client with the log start offset intact.
    #[test]
    fn a_gone_answer_crosses_the_wire_with_its_log_start() {
        let gone = ClientError::Gone { log_start_offset: 1_234 };
        let wire = WireError::from_client(&gone);
        assert_eq!(wire.status, 410);
        assert_eq!(wire.clone().into_client(), gone);
        let stale = ClientError::StaleHandle("receipt handle matches no lease".into());
        assert_eq!(WireError::from_client(&stale).into_client(), stale, "a stale handle's 410");
    }

    fn arb_record() -> impl Strategy<Value = WireRecord> {
        (
            any::<u64>(),
            any::<u64>(),
            proptest::option::of(prop::collection::vec(any::<u8>(), 0..20)),
            prop::collection::vec(any::<u8>(), 1..100),
        )
            .prop_map(|(seq, timestamp_ms, key, payload)| WireRecord {
                seq,
                timestamp_ms,
                key: key.map(Bytes::from),
                payload: Bytes::from(payload),
            })
    }

    fn arb_message() -> impl Strategy<Value = PeerMessage> {
        let key = (any::<u64>(), any::<u32>())
            .prop_map(|(t, partition)| PartitionKey { topic: TopicId(t), partition });
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..50)
                .prop_map(|b| PeerMessage::Raft(Bytes::from(b))),
            (any::<u64>(), any::<u64>(), key.clone(), prop::collection::vec(arb_record(), 0..5))
                .prop_map(|(id, origin_checkpoint, target, records)| {
                    PeerMessage::CommitBatch { id, origin_checkpoint, target, records }
                }),
            (any::<u64>(), any::<u64>()).prop_map(|(id, first_offset)| PeerMessage::CommitReply {
                id,
                result: WireCommitResult::Committed { first_offset }
            }),
            (any::<u64>(), ".{0,20}").prop_map(|(id, reason)| PeerMessage::CommitReply {
                id,
                result: WireCommitResult::Failed(reason)
            }),
            any::<u64>().prop_map(|id| PeerMessage::CommitReply {
                id,
                result: WireCommitResult::TopicGone
            }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(id, t)| PeerMessage::ConfirmGone { id, topic: TopicId(t) }),
            (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(id, t, gone)| {
                PeerMessage::ConfirmGoneReply { id, topic: TopicId(t), gone }
            }),
            (
                (any::<u64>(), arb_principal()),
                key,
                any::<u64>(),
                any::<u32>(),
                prop_oneof![Just(0u64), any::<u64>()]
            )
                .prop_map(|((id, who), target, offset, max, wait_ms)| {
                    PeerMessage::Consume { id, who, target, offset, max, wait_ms }
                }),
            arb_queue_message(),
        ]
    }

    fn arb_principal() -> impl Strategy<Value = Principal> {
        prop_oneof![
            Just(Principal::Trusted),
            ("[a-z0-9._@-]{1,64}", any::<u64>())
                .prop_map(|(name, id)| Principal::User { name, id: UserId(id) }),
        ]
    }

    fn arb_settle() -> impl Strategy<Value = PeerMessage> {
        (
            (any::<u64>(), arb_principal()),
            any::<u64>(),
            0u8..3,
            prop::collection::vec((any::<u32>(), any::<u64>(), any::<u64>()), 0..5),
        )
            .prop_map(|((id, who), t, action, handles)| PeerMessage::Settle {
                id,
                who,
                topic: TopicId(t),
                action: [SettleAction::Ack, SettleAction::Extend, SettleAction::Nack]
                    [usize::from(action)],
                handles: handles
                    .into_iter()
                    .map(|(partition, offset, nonce)| ReceiptHandle { partition, offset, nonce })
                    .collect(),
            })
    }

    fn arb_queue_message() -> impl Strategy<Value = PeerMessage> {
        prop_oneof![
            (
                (any::<u64>(), arb_principal()),
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
                any::<u64>()
            )
                .prop_map(|((id, who), t, partition, max, wait_ms)| {
                    PeerMessage::Receive {
                        id,
                        who,
                        target: PartitionKey { topic: TopicId(t), partition },
                        max,
                        wait_ms,
                    }
                }),
            (any::<u64>(), prop::collection::vec((any::<u64>(), any::<u32>(), arb_record()), 0..4))
                .prop_map(|(id, leased)| PeerMessage::ReceiveReply {
                    id,
                    result: Ok(leased
                        .into_iter()
                        .map(|(nonce, delivery_count, r)| WireLeased {
                            record: WireConsumed {
                                offset: r.seq,
                                timestamp_ms: r.timestamp_ms,
                                key: r.key,
                                payload: r.payload,
                            },
                            nonce,
                            delivery_count,
                        })
                        .collect()),
                }),
            (any::<u64>(), any::<u16>(), ".{0,20}").prop_map(|(id, status, message)| {
                PeerMessage::ReceiveReply { id, result: Err(WireError { status, message }) }
            }),
            arb_settle(),
            (
                any::<u64>(),
                prop::collection::vec(proptest::option::of((any::<u16>(), ".{0,9}")), 0..5)
            )
                .prop_map(|(id, results)| PeerMessage::SettleReply {
                    id,
                    results: results
                        .into_iter()
                        .map(|r| match r {
                            None => Ok(()),
                            Some((status, message)) => Err(WireError { status, message }),
                        })
                        .collect(),
                }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(message in arb_message()) {
            prop_assert_eq!(PeerMessage::decode(&message.encode()), Ok(message));
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = PeerMessage::decode(&Bytes::from(bytes));
        }

        #[test]
        fn truncated_messages_are_refused(message in arb_message(), cut in any::<prop::sample::Index>()) {
            let bytes = message.encode();
            if !matches!(message, PeerMessage::Raft(_) | PeerMessage::Propose { .. }) {
                let cut = cut.index(bytes.len());
                prop_assert!(PeerMessage::decode(&bytes.slice(..cut)).is_err());
            }
        }
    }

    /// Issue 9, defect 6: the reason of a failed commit decoded lossily (invalid UTF-8 became
    /// U+FFFD), so decode∘encode was not the identity; it is strict like every other text field.
    /// A leader's answer to a forwarded create or update round-trips with its retention; a
    /// create without a size limit keeps the layout peers of the earlier build read, and the
    /// layout with a limit refuses a second spelling of "none".
    #[test]
    fn admin_results_carry_retention_and_keep_the_earlier_layout() {
        let topic = TopicInfo {
            name: "t".into(),
            id: TopicId(4),
            partitions: 2,
            retention_ms: Some(0),
            retention_bytes: None,
            created_ms: 9,
            queue: QueueSettings::default(),
        };
        let limited = TopicInfo { retention_bytes: Some(1 << 30), ..topic.clone() };
        let queued = TopicInfo {
            queue: QueueSettings {
                visibility_timeout_ms: Some(1_500),
                dead_letter: Some(crate::api::DeadLetter { max_deliveries: 4, topic: "d".into() }),
            },
            ..limited.clone()
        };
        for result in [
            WireAdminResult::Created(topic.clone()),
            WireAdminResult::Created(limited.clone()),
            WireAdminResult::Updated(topic.clone()),
            WireAdminResult::Updated(limited),
            WireAdminResult::Created(queued),
        ] {
            let message = PeerMessage::ProposeReply { id: 3, result };
            assert_eq!(PeerMessage::decode(&message.encode()), Ok(message));
        }
        let plain = PeerMessage::ProposeReply { id: 3, result: WireAdminResult::Created(topic) };
        let mut bytes = plain.encode().to_vec();
        assert_eq!(bytes[10], ADMIN_CREATED, "version, tag, id, then the result's tag");
        bytes[10] = ADMIN_CREATED_BYTES;
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(PeerMessage::decode(&Bytes::from(bytes)), Err(DecodeError::Malformed));
    }

    /// A consume without a wait has its own layout (tag 8); a wait has its own tag and never
    /// spells 0, so each message has one encoding.
    #[test]
    fn a_consume_wait_has_its_own_tag_and_one_spelling() {
        let target = PartitionKey { topic: TopicId(3), partition: 1 };
        let plain = PeerMessage::Consume {
            id: 9,
            who: Principal::Trusted,
            target,
            offset: 4,
            max: 10,
            wait_ms: 0,
        };
        let bytes = plain.encode();
        // Version, tag, id, the principal (one byte: trusted), topic, offset, partition, max.
        assert_eq!((bytes[1], bytes.len()), (TAG_CONSUME, 2 + 8 + 1 + 16 + 8), "the layout");
        let waiting = PeerMessage::Consume {
            id: 9,
            who: Principal::Trusted,
            target,
            offset: 4,
            max: 10,
            wait_ms: 5_000,
        };
        let long = waiting.encode();
        assert_eq!(long[1], TAG_CONSUME_WAIT);
        assert_eq!(&long[2..long.len() - 8], &bytes[2..], "the same body, then the wait");
        assert_eq!(PeerMessage::decode(&long), Ok(waiting));
        let mut zero = long.to_vec();
        let at = zero.len() - 8;
        zero[at..].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(PeerMessage::decode(&Bytes::from(zero)), Err(DecodeError::Malformed));
    }

    #[test]
    fn a_failed_commit_reason_is_strict_utf8() {
        let message = PeerMessage::CommitReply {
            id: 9,
            result: WireCommitResult::Failed("disk é full".into()),
        };
        let bytes = message.encode();
        assert_eq!(PeerMessage::decode(&bytes), Ok(message));
        let mut bad = bytes.to_vec();
        let at = bad.len() - 2; // inside "full"
        bad[at] = 0xff;
        assert_eq!(PeerMessage::decode(&Bytes::from(bad)), Err(DecodeError::Malformed));
    }

    /// Found by reading (issue 9): a 50-byte message claiming thousands of entries reserved room
    /// for up to 4,096 of them (about 320 KB); the reservation is bounded by the bytes present.
    #[test]
    fn a_huge_claimed_count_reserves_only_what_the_bytes_can_hold() {
        let bytes = [0u8; 50];
        let reader = Reader::new(&bytes);
        assert_eq!(capacity_for(u64::MAX, &reader, 24), 2);
        assert_eq!(capacity_for(1, &reader, 24), 1);
        let mut claim = vec![PROTOCOL_VERSION, TAG_TOPIC_STATS_REPLY];
        put_u64s(&mut claim, &[1, 1 << 40]);
        claim.extend_from_slice(&[0; 40]);
        assert_eq!(PeerMessage::decode(&Bytes::from(claim)), Err(DecodeError::Malformed));
    }

    #[test]
    fn unknown_versions_and_types_are_refused_cleanly() {
        assert_eq!(PeerMessage::decode(&Bytes::from_static(&[9, 1])), Err(DecodeError::Version(9)));
        let unknown = Bytes::from(vec![PROTOCOL_VERSION, 77]);
        assert_eq!(PeerMessage::decode(&unknown), Err(DecodeError::UnknownType(77)));
        let older = Bytes::from(vec![PROTOCOL_VERSION - 1, TAG_TOPIC_STATS]);
        assert_eq!(PeerMessage::decode(&older), Err(DecodeError::Version(PROTOCOL_VERSION - 1)));
        assert_eq!(PeerMessage::decode(&Bytes::new()), Err(DecodeError::Malformed));
    }
}
