//! Commands of the metastore: what a proposal asks for, what applying it did, and the bytes a
//! command travels as inside a Raft entry. Decoders never panic: a committed entry that does not
//! decode is applied as a no-op (identically on every replica) and counted.

use super::users::{CMD_USER_FIRST, CMD_USER_LAST, UserCommand, UserInfo};
use crate::api::{QueueSettings, TopicChange, TopicInfo};
use crate::codec::Reader;
use crate::ids::{NodeId, TopicId};

/// A change to the replicated state, proposed through Raft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaCommand {
    /// Create a topic; its partitions are assigned round-robin over the live members.
    /// `seen_next_id` is the next incarnation id on the replica of the node that received the
    /// client's request, when it did: an incarnation of `name` deleted since (id ≥ it) means the
    /// command reached the log late (a held or duplicated forward) or that replica was behind,
    /// and it is refused rather than bringing back a name the client may have deleted since.
    CreateTopic {
        name: String,
        partitions: Option<u32>,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
        queue: QueueSettings,
        now_ms: u64,
        seen_next_id: u64,
    },
    /// Change the retention of incarnation `id` of topic `name`. Like a delete, it names the
    /// incarnation the receiving node resolved, and is applied only while `id` is still the
    /// name's current incarnation: a late or duplicated update never touches a later one.
    UpdateTopic { name: String, id: TopicId, change: TopicChange },
    /// Delete incarnation `id` of topic `name` (ids are never reused). The node that received
    /// the client's request resolved the name to `id` on its replica; the command is applied
    /// only while `id` is still the name's current incarnation, so a delete that reaches the log
    /// late (a held or duplicated forward) cannot remove a later incarnation of the same name.
    DeleteTopic { name: String, id: TopicId },
    /// A member says it is alive (and where it listens). Makes it alive if it was dead.
    Heartbeat { node: NodeId, http_addr: String, cluster_addr: String, now_ms: u64 },
    /// Proposed by the leader: the member stopped heartbeating. Applied only if no heartbeat of
    /// `node` was applied since the leader counted `seen_heartbeats` (a heartbeat racing the
    /// verdict in the log wins).
    MarkDead { node: NodeId, seen_heartbeats: u64 },
    /// Mark a member alive again (heartbeats do this by themselves; kept for operators).
    MarkAlive { node: NodeId },
    /// A change to the users (docs/design.md §8).
    User(UserCommand),
}

/// What applying a command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A topic was created.
    Created(TopicInfo),
    /// A topic was deleted.
    Deleted(TopicInfo),
    /// A topic's retention was changed: the topic as it is now.
    Updated(TopicInfo),
    /// A heartbeat was recorded.
    Heartbeat { node: NodeId },
    /// A member's liveness changed.
    Liveness { node: NodeId, alive: bool },
    /// The command was valid but changed nothing (e.g. a stale `MarkDead`).
    Unchanged,
    /// A user was created.
    UserCreated(UserInfo),
    /// A user's grants or password changed: the user as it is now.
    UserChanged(UserInfo),
    /// A user was deleted.
    UserDeleted(UserInfo),
}

// ---- Encoding -----------------------------------------------------------------------------

const CMD_CREATE: u8 = 1;
const CMD_DELETE: u8 = 2;
const CMD_HEARTBEAT: u8 = 3;
const CMD_MARK_DEAD: u8 = 4;
const CMD_MARK_ALIVE: u8 = 5;
/// A create with a `retention_bytes`: `CMD_CREATE`'s fields, then the limit. A create without
/// one keeps `CMD_CREATE`'s layout, so logs stay readable by the build before the field existed
/// for as long as nobody uses it (and every encoding stays canonical: one tag per value).
const CMD_CREATE_BYTES: u8 = 6;
const CMD_UPDATE: u8 = 7;
/// A create with queue settings: `CMD_CREATE`'s fields, then `retention_bytes` (`NONE_U64` for
/// none) and the settings. Only a create with some queue setting is written so (one tag per
/// value, and logs stay readable by builds before queue settings while nobody uses them).
pub(super) const CMD_CREATE_QUEUE: u8 = 8;
/// The three states of an update's `retention_bytes`: keep, remove the limit, set it.
const BYTES_KEEP: u8 = 0;
const BYTES_CLEAR: u8 = 1;
const BYTES_SET: u8 = 2;
/// Marks an absent optional `u64` (and `u32`, widened) in encodings.
pub(super) const NONE_U64: u64 = u64::MAX;

pub(super) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A string as `u32` length then UTF-8 bytes.
pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, u32::try_from(s.len()).expect("invariant: strings are small"));
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn get_str(reader: &mut Reader<'_>) -> Option<String> {
    let len = reader.u32()? as usize;
    Some(std::str::from_utf8(reader.take(len)?).ok()?.to_string())
}

pub(super) fn get_u8(reader: &mut Reader<'_>) -> Option<u8> {
    Some(reader.take(1)?[0])
}

/// Bytes of a command as carried in a Raft entry. Retention values are at most 2^53 - 1 (they
/// are validated before a command is proposed): `u64::MAX` is the encoding of "none".
pub fn encode_command(command: &MetaCommand) -> Vec<u8> {
    let mut out = Vec::new();
    match command {
        MetaCommand::CreateTopic {
            name,
            partitions,
            retention_ms,
            retention_bytes,
            queue,
            now_ms,
            seen_next_id,
        } => {
            let tag = match (queue.is_default(), retention_bytes) {
                (false, _) => CMD_CREATE_QUEUE,
                (true, Some(_)) => CMD_CREATE_BYTES,
                (true, None) => CMD_CREATE,
            };
            out.push(tag);
            put_str(&mut out, name);
            put_u64(&mut out, partitions.map_or(NONE_U64, u64::from));
            put_u64(&mut out, retention_ms.unwrap_or(NONE_U64));
            put_u64(&mut out, *now_ms);
            put_u64(&mut out, *seen_next_id);
            match tag {
                CMD_CREATE_QUEUE => {
                    put_u64(&mut out, retention_bytes.unwrap_or(NONE_U64));
                    queue.encode(&mut out);
                }
                CMD_CREATE_BYTES => put_u64(&mut out, retention_bytes.unwrap_or(NONE_U64)),
                _ => {}
            }
        }
        MetaCommand::UpdateTopic { name, id, change } => {
            out.push(CMD_UPDATE);
            put_str(&mut out, name);
            put_u64(&mut out, id.0);
            put_u64(&mut out, change.retention_ms.unwrap_or(NONE_U64));
            match change.retention_bytes {
                None => out.push(BYTES_KEEP),
                Some(None) => out.push(BYTES_CLEAR),
                Some(Some(bytes)) => {
                    out.push(BYTES_SET);
                    put_u64(&mut out, bytes);
                }
            }
        }
        MetaCommand::DeleteTopic { name, id } => {
            out.push(CMD_DELETE);
            put_str(&mut out, name);
            put_u64(&mut out, id.0);
        }
        MetaCommand::Heartbeat { node, http_addr, cluster_addr, now_ms } => {
            out.push(CMD_HEARTBEAT);
            put_u32(&mut out, node.0);
            put_str(&mut out, http_addr);
            put_str(&mut out, cluster_addr);
            put_u64(&mut out, *now_ms);
        }
        MetaCommand::MarkDead { node, seen_heartbeats } => {
            out.push(CMD_MARK_DEAD);
            put_u32(&mut out, node.0);
            put_u64(&mut out, *seen_heartbeats);
        }
        MetaCommand::MarkAlive { node } => {
            out.push(CMD_MARK_ALIVE);
            put_u32(&mut out, node.0);
        }
        MetaCommand::User(command) => command.encode(&mut out),
    }
    out
}

/// Inverse of `encode_command`; `None` for bytes it did not produce.
pub fn decode_command(bytes: &[u8]) -> Option<MetaCommand> {
    let mut r = Reader::new(bytes);
    let command = match get_u8(&mut r)? {
        tag @ (CMD_CREATE | CMD_CREATE_BYTES | CMD_CREATE_QUEUE) => decode_create(&mut r, tag)?,
        CMD_UPDATE => MetaCommand::UpdateTopic {
            name: get_str(&mut r)?,
            id: TopicId(r.u64()?),
            change: TopicChange {
                retention_ms: optional_u64(&mut r)?,
                retention_bytes: match get_u8(&mut r)? {
                    BYTES_KEEP => None,
                    BYTES_CLEAR => Some(None),
                    BYTES_SET => Some(Some(present_u64(&mut r)?)),
                    _ => return None,
                },
            },
        },
        CMD_DELETE => MetaCommand::DeleteTopic { name: get_str(&mut r)?, id: TopicId(r.u64()?) },
        CMD_HEARTBEAT => MetaCommand::Heartbeat {
            node: NodeId(r.u32()?),
            http_addr: get_str(&mut r)?,
            cluster_addr: get_str(&mut r)?,
            now_ms: r.u64()?,
        },
        CMD_MARK_DEAD => {
            MetaCommand::MarkDead { node: NodeId(r.u32()?), seen_heartbeats: r.u64()? }
        }
        CMD_MARK_ALIVE => MetaCommand::MarkAlive { node: NodeId(r.u32()?) },
        tag @ CMD_USER_FIRST..=CMD_USER_LAST => {
            MetaCommand::User(UserCommand::decode(&mut r, tag)?)
        }
        _ => return None,
    };
    r.rest().is_empty().then_some(command)
}

/// A create's fields after its tag (`CMD_CREATE`, `CMD_CREATE_BYTES` or `CMD_CREATE_QUEUE`).
fn decode_create(r: &mut Reader<'_>, tag: u8) -> Option<MetaCommand> {
    let name = get_str(r)?;
    let partitions = match r.u64()? {
        NONE_U64 => None,
        n => Some(u32::try_from(n).ok()?),
    };
    let (retention_ms, now_ms, seen_next_id) = (optional_u64(r)?, r.u64()?, r.u64()?);
    let (retention_bytes, queue) = match tag {
        CMD_CREATE => (None, QueueSettings::default()),
        CMD_CREATE_BYTES => (Some(present_u64(r)?), QueueSettings::default()),
        _ => {
            let bytes = optional_u64(r)?;
            // Default settings have their own layouts: this one must carry some.
            (bytes, Some(QueueSettings::decode(r)?).filter(|q| !q.is_default())?)
        }
    };
    Some(MetaCommand::CreateTopic {
        name,
        partitions,
        retention_ms,
        retention_bytes,
        queue,
        now_ms,
        seen_next_id,
    })
}

/// A `u64` where `NONE_U64` stands for `None`.
pub(super) fn optional_u64(r: &mut Reader<'_>) -> Option<Option<u64>> {
    Some(Some(r.u64()?).filter(|&v| v != NONE_U64))
}

/// A `u64` that must be present: `NONE_U64` is refused (it is never the encoding of a value, and
/// a value that has its own "absent" layout must not have a second spelling).
pub(super) fn present_u64(r: &mut Reader<'_>) -> Option<u64> {
    Some(r.u64()?).filter(|&v| v != NONE_U64)
}
