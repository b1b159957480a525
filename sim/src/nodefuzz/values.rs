//! From selectors to concrete values: topic names, keys, payloads, client requests and peer
//! messages. Payload bytes are budgeted per run (`PAYLOAD_BUDGET_BYTES`): once the budget is
//! spent, sizes shrink to a few bytes, so one input cannot make a run slow. Every payload is
//! generated from a run-wide counter, so distinct records are almost always distinct bytes.

use bytes::Bytes;
use narad_core::api::PartitionNumbers;
use narad_core::codec::MAX_FRAME_BODY_BYTES;
use narad_core::constants::{MAX_KEY_BYTES, MAX_MESSAGE_BYTES};
use narad_core::meta::{MetaCommand, decode_command, encode_command};
use narad_core::peer::{PeerMessage, WireAdminResult, WireCommitResult, WireError, WireRecord};
use narad_core::{ClientOp, NodeId, PartitionKey, ProduceMessage, TopicId};

use super::input::{
    ClientCmd, CommandSel, Count, KeySel, MessageSpec, Offset, PeerCmd, PeerSel, RecordSpec, Size,
    Target, TopicIdSel, TopicSel,
};
use super::{MAX_MESSAGES, PAYLOAD_BUDGET_BYTES, skip_known_defects};

/// The node under test.
pub const NODE: NodeId = NodeId(1);

/// Payload sizes around the client limits (1 B – 1 MiB).
const CLIENT_EDGES: [usize; 8] =
    [0, 1, 4_095, 4_096, 65_536, MAX_MESSAGE_BYTES - 1, MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES + 1];
/// Payload sizes around the 2 MiB frame limit (a peer's commit batch is not size-checked).
const FRAME_EDGES: [usize; 6] = [
    MAX_FRAME_BODY_BYTES - 40,
    MAX_FRAME_BODY_BYTES - 33,
    MAX_FRAME_BODY_BYTES - 32,
    MAX_FRAME_BODY_BYTES - 28,
    MAX_FRAME_BODY_BYTES,
    MAX_FRAME_BODY_BYTES + 1,
];
/// Offsets and sequence numbers at the edges of `u64`.
const OFFSET_EDGES: [u64; 6] = [0, 1, 1 << 32, 1 << 63, u64::MAX - 1, u64::MAX];

/// Generates the concrete values of one run.
#[derive(Debug)]
pub struct Values {
    budget: usize,
    counter: u64,
    /// Topic incarnations the node has shown (in replies), for `TopicIdSel::Known`.
    pub seen_topics: Vec<TopicId>,
}

impl Default for Values {
    fn default() -> Self {
        Values { budget: PAYLOAD_BUDGET_BYTES, counter: 0, seen_topics: Vec::new() }
    }
}

impl Values {
    /// Payload bytes still available to this run.
    pub fn budget_left(&self) -> usize {
        self.budget
    }

    /// A size within the budget: past it, at most 16 bytes (a zero stays zero: still invalid).
    fn take(&mut self, want: usize) -> usize {
        if want <= self.budget {
            self.budget -= want;
            want
        } else {
            want.min(16)
        }
    }

    /// `len` bytes of a pattern unique to this call (the counter, repeated). Built by doubling
    /// copies, not byte by byte: under coverage instrumentation a per-byte loop over megabytes
    /// would cost more than the node's whole run.
    pub fn payload(&mut self, len: usize) -> Bytes {
        self.counter += 1;
        let mut bytes = Vec::with_capacity(len.max(8));
        bytes.extend_from_slice(&self.counter.to_le_bytes());
        while bytes.len() < len {
            let more = bytes.len().min(len - bytes.len());
            bytes.extend_from_within(..more);
        }
        bytes.truncate(len);
        Bytes::from(bytes)
    }

    fn sized_payload(&mut self, size: Size, peer: bool) -> Bytes {
        let want = match size {
            Size::Tiny(n) => usize::from(n),
            Size::Medium(n) => usize::from(n % 8_192),
            Size::Edge(n) if peer && !skip_known_defects() => {
                let n = usize::from(n) % (CLIENT_EDGES.len() + FRAME_EDGES.len());
                CLIENT_EDGES.get(n).copied().unwrap_or_else(|| FRAME_EDGES[n - CLIENT_EDGES.len()])
            }
            Size::Edge(n) => CLIENT_EDGES[usize::from(n) % CLIENT_EDGES.len()],
        };
        let len = self.take(want);
        self.payload(len)
    }

    /// A client request for `cmd`, with the topic name it concerns (for the probe before it).
    pub fn client_op(&mut self, cmd: &ClientCmd) -> ClientOp {
        match cmd {
            ClientCmd::Create { topic, partitions, retention } => ClientOp::CreateTopic {
                name: topic_name(*topic),
                partitions: count(*partitions),
                retention_ms: retention.map(u64::from),
                retention_bytes: None,
                queue: Default::default(),
            },
            ClientCmd::Delete { topic } => ClientOp::DeleteTopic { name: topic_name(*topic) },
            ClientCmd::List { page } => ClientOp::ListTopics {
                // 0 asks for the first page of the most; otherwise a small page after a name.
                after: (*page % 4 != 0).then(|| topic_name(TopicSel(*page / 4))),
                limit: if *page % 4 == 0 { u32::MAX } else { u32::from(*page % 4) },
            },
            ClientCmd::Get { topic } => {
                ClientOp::GetTopic { name: topic_name(*topic), partition: None }
            }
            ClientCmd::Produce { topic, messages, batch } => {
                let messages = messages.iter().take(MAX_MESSAGES).map(|m| self.message(m));
                let messages = messages.collect();
                ClientOp::Produce { topic: topic_name(*topic), messages, batch: *batch }
            }
            ClientCmd::ProduceMany { topic, count } => {
                let count = usize::from(*count) % 1_003;
                let messages = (0..count)
                    .map(|_| ProduceMessage {
                        key: None,
                        partition: None,
                        payload: self.payload(1),
                    })
                    .collect();
                ClientOp::Produce { topic: topic_name(*topic), messages, batch: true }
            }
            ClientCmd::Consume { topic, partition, offset, max } => ClientOp::Consume {
                topic: topic_name(*topic),
                partition: u32::from(*partition % 6),
                offset: offset_value(*offset),
                max: u32::from(*max),
                wait_ms: 0,
            },
            ClientCmd::Members => ClientOp::Members,
        }
    }

    fn message(&mut self, spec: &MessageSpec) -> ProduceMessage {
        ProduceMessage {
            key: key(spec.key),
            partition: spec.partition.map(|p| u32::from(p % 6)),
            payload: self.sized_payload(spec.size, false),
        }
    }

    /// The sender and the encoded bytes of `cmd`.
    pub fn peer_message(&mut self, cmd: &PeerCmd) -> Option<(NodeId, Bytes)> {
        let from = match cmd.from % 4 {
            0 | 1 => NodeId(2),
            2 => NodeId(3),
            _ => NodeId(u32::MAX),
        };
        let bytes = match &cmd.message {
            PeerSel::Raw(bytes) => Bytes::copy_from_slice(bytes),
            PeerSel::Tagged { tag, body } => {
                let mut out = vec![narad_core::peer::PROTOCOL_VERSION, *tag];
                out.extend_from_slice(body);
                Bytes::from(out)
            }
            PeerSel::RaftMessage(sel) => {
                let commands: Vec<Vec<u8>> = sel
                    .entries
                    .iter()
                    .map(|(_, command)| self.command(0, command).to_vec())
                    .collect();
                let raft = super::raft::encode_message(sel, from, NODE, &commands);
                PeerMessage::Raft(Bytes::from(raft)).encode()
            }
            other => self.well_formed(other)?.encode(),
        };
        Some((from, bytes))
    }

    fn well_formed(&mut self, sel: &PeerSel) -> Option<PeerMessage> {
        Some(match sel {
            PeerSel::Raw(_) | PeerSel::Tagged { .. } | PeerSel::RaftMessage(_) => {
                unreachable!("encoded by the caller")
            }
            PeerSel::CommitBatch { id, checkpoint, target, records } => PeerMessage::CommitBatch {
                id: *id,
                origin_checkpoint: offset_value(*checkpoint),
                target: self.target(*target),
                records: records.iter().take(MAX_MESSAGES).map(|r| self.record(r)).collect(),
            },
            PeerSel::CommitReply { id, result, offset } => {
                let result = match result % 3 {
                    0 => WireCommitResult::Committed { first_offset: *offset },
                    1 => WireCommitResult::Failed("fake peer says no".into()),
                    _ => WireCommitResult::TopicGone,
                };
                PeerMessage::CommitReply { id: *id, result }
            }
            PeerSel::ConfirmGone { id, topic } => {
                PeerMessage::ConfirmGone { id: *id, topic: self.topic_id(*topic) }
            }
            PeerSel::ConfirmGoneReply { id, topic, gone } => {
                PeerMessage::ConfirmGoneReply { id: *id, topic: self.topic_id(*topic), gone: *gone }
            }
            PeerSel::Propose { id, command } => PeerMessage::Propose {
                id: *id,
                who: narad_core::access::Principal::Trusted,
                command: self.command(*id, command),
            },
            PeerSel::ProposeReply { id, ok } => {
                let result =
                    if *ok { WireAdminResult::Done } else { WireAdminResult::Error(wire_error()) };
                PeerMessage::ProposeReply { id: *id, result }
            }
            PeerSel::Consume { id, target, offset, max } => PeerMessage::Consume {
                id: *id,
                who: narad_core::access::Principal::Trusted,
                target: self.target(*target),
                offset: offset_value(*offset),
                max: *max,
                wait_ms: 0,
            },
            PeerSel::ConsumeReply { id, ok } => {
                let result = if *ok { Ok(Vec::new()) } else { Err(wire_error()) };
                PeerMessage::ConsumeReply { id: *id, result }
            }
            PeerSel::TopicStats { id, topic } => {
                PeerMessage::TopicStats { id: *id, topic: self.topic_id(*topic) }
            }
            PeerSel::TopicStatsReply { id, partitions } => {
                let numbers = |&(
                    partition,
                    [log_start_offset, high_watermark, segments, size_bytes],
                ): &(u32, [u64; 4])| {
                    let numbers = PartitionNumbers {
                        log_start_offset,
                        high_watermark,
                        segments,
                        size_bytes,
                        ..PartitionNumbers::default()
                    };
                    (partition, numbers)
                };
                let partitions = partitions.iter().take(MAX_MESSAGES).map(numbers).collect();
                PeerMessage::TopicStatsReply { id: *id, partitions }
            }
            PeerSel::Raft(bytes) => PeerMessage::Raft(Bytes::copy_from_slice(bytes)),
        })
    }

    fn record(&mut self, spec: &RecordSpec) -> WireRecord {
        WireRecord {
            seq: offset_value(spec.seq),
            timestamp_ms: spec.timestamp_ms,
            key: key(spec.key),
            payload: self.sized_payload(spec.size, true),
        }
    }

    fn target(&self, target: Target) -> PartitionKey {
        PartitionKey {
            topic: self.topic_id(target.topic),
            partition: u32::from(target.partition % 5),
        }
    }

    fn topic_id(&self, sel: TopicIdSel) -> TopicId {
        match sel {
            TopicIdSel::Known(n) if !self.seen_topics.is_empty() => {
                self.seen_topics[usize::from(n) % self.seen_topics.len()]
            }
            TopicIdSel::Known(n) => TopicId(u64::from(n)),
            TopicIdSel::Raw(id) => TopicId(id),
        }
    }

    fn command(&self, id: u64, sel: &CommandSel) -> Bytes {
        let bytes = match sel {
            CommandSel::Create { topic, partitions } => encode_command(&MetaCommand::CreateTopic {
                name: topic_name(*topic),
                partitions: count(*partitions),
                retention_ms: None,
                retention_bytes: None,
                now_ms: 0,
                seen_next_id: 1 + id % 8,
                queue: Default::default(),
            }),
            CommandSel::Delete { topic, id } => encode_command(&MetaCommand::DeleteTopic {
                name: topic_name(*topic),
                id: self.topic_id(*id),
            }),
            CommandSel::Raw(bytes) => bytes.clone(),
        };
        Bytes::from(bytes)
    }
}

/// False for a forwarded command that would make a node other than ours a live member: the
/// fake peer never heartbeats or answers commits, so partitions assigned to it would park
/// records for good, a liveness "failure" of the harness's own making. (Raft messages are not
/// filtered: the final phase checks the membership instead.)
pub fn allowed_message(message: &PeerMessage) -> bool {
    let PeerMessage::Propose { command, .. } = message else {
        return true;
    };
    match decode_command(command) {
        Some(MetaCommand::Heartbeat { node, .. } | MetaCommand::MarkAlive { node }) => node == NODE,
        _ => true,
    }
}

fn wire_error() -> WireError {
    WireError { status: 503, message: "fake peer error".into() }
}

/// The topic name `sel` stands for: mostly `t0`–`t2`, sometimes an edge of the naming rules.
pub fn topic_name(sel: TopicSel) -> String {
    match sel.0 % 16 {
        n @ 0..=9 => format!("t{}", n % 3),
        10 => String::new(),
        11 => ".".into(),
        12 => "..".into(),
        13 => "x".repeat(200),
        14 => "y".repeat(201),
        _ => "bad/name".into(),
    }
}

fn count(sel: Count) -> Option<u32> {
    match sel {
        Count::Default => None,
        Count::Small(n) => Some(u32::from(n % 8)),
        // The 4,096-partition maximum is rare: every pump visits each partition log a run
        // fills, so a topic that big makes the whole run slow.
        Count::Edge(n) if n >= 250 => Some(4_096),
        Count::Edge(n) => Some([0, 1, 64, 4_097, u32::MAX][usize::from(n) % 5]),
    }
}

fn key(sel: KeySel) -> Option<Bytes> {
    match sel {
        KeySel::None => None,
        KeySel::Small(n) => Some(Bytes::from(format!("k{}", n % 4))),
        KeySel::Edge(n) => {
            let len = [0, 1, MAX_KEY_BYTES, MAX_KEY_BYTES + 1][usize::from(n) % 4];
            Some(Bytes::from(vec![b'k'; len]))
        }
    }
}

fn offset_value(sel: Offset) -> u64 {
    match sel {
        Offset::Small(n) => u64::from(n),
        Offset::Raw(v) => v,
        Offset::Edge(n) => OFFSET_EDGES[usize::from(n) % OFFSET_EDGES.len()],
    }
}
