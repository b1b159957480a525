//! Messages between nodes and their wire codec. The runtime only moves opaque bytes (over QUIC in
//! production, through the simulated network in tests); encoding lives here so both runtimes
//! speak exactly the same protocol.
//!
//! Every message starts with a protocol version and a type tag. A decoder never panics on
//! untrusted bytes: an unknown version or tag, or a malformed body, is a clean `DecodeError` that
//! the receiver answers or drops. The sender's identity is established by the transport (an
//! authenticated connection), never by a field in the message.

use bytes::Bytes;

use crate::codec::{Reader, put_optional_bytes};
use crate::ids::{PartitionKey, TopicId};

/// Version of the node protocol. Bump it when a message's layout changes.
pub const PROTOCOL_VERSION: u8 = 1;

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
    /// The records are visible; `landed` lists the sequences newly written (the rest were
    /// already there).
    Committed {
        first_offset: u64,
        landed: Vec<u64>,
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
    CommitBatch {
        id: u64,
        origin_checkpoint: u64,
        target: PartitionKey,
        records: Vec<WireRecord>,
    },
    /// The answer to `CommitBatch { id, .. }`.
    CommitReply { id: u64, result: WireCommitResult },
    /// Asks the metastore leader whether a topic incarnation is gone for good.
    ConfirmGone { id: u64, topic: TopicId },
    /// The leader's answer (after its read barrier).
    ConfirmGoneReply { id: u64, topic: TopicId, gone: bool },
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
            PeerMessage::CommitBatch {
                id,
                origin_checkpoint,
                target,
                records,
            } => {
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
            TAG_COMMIT => decode_commit(&mut reader),
            TAG_COMMIT_REPLY => {
                let id = reader.u64();
                id.and_then(|id| {
                    Some(PeerMessage::CommitReply {
                        id,
                        result: decode_result(&mut reader)?,
                    })
                })
            }
            TAG_CONFIRM => (|| {
                Some(PeerMessage::ConfirmGone {
                    id: reader.u64()?,
                    topic: TopicId(reader.u64()?),
                })
            })(),
            TAG_CONFIRM_REPLY => (|| {
                let (id, topic) = (reader.u64()?, TopicId(reader.u64()?));
                let gone = match reader.take(1)?[0] {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                Some(PeerMessage::ConfirmGoneReply { id, topic, gone })
            })(),
            other => return Err(DecodeError::UnknownType(other)),
        };
        let message = message.ok_or(DecodeError::Malformed)?;
        if !matches!(message, PeerMessage::Raft(_)) && !reader.rest().is_empty() {
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
        }
    }
}

fn put_u64s(out: &mut Vec<u8>, values: &[u64]) {
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn decode_commit(reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let id = reader.u64()?;
    let origin_checkpoint = reader.u64()?;
    let topic = TopicId(reader.u64()?);
    let partition = reader.u32()?;
    let count = reader.u64()?;
    // Bound the allocation by what the bytes could possibly hold (≥ 24 bytes per record).
    let mut records = Vec::with_capacity(usize::try_from(count.min(4096)).ok()?);
    for _ in 0..count {
        let seq = reader.u64()?;
        let timestamp_ms = reader.u64()?;
        let key = reader.optional_bytes()?.map(Bytes::copy_from_slice);
        let payload = Bytes::copy_from_slice(reader.optional_bytes()??);
        records.push(WireRecord {
            seq,
            timestamp_ms,
            key,
            payload,
        });
    }
    let target = PartitionKey { topic, partition };
    Some(PeerMessage::CommitBatch {
        id,
        origin_checkpoint,
        target,
        records,
    })
}

fn encode_result(out: &mut Vec<u8>, result: &WireCommitResult) {
    match result {
        WireCommitResult::Committed {
            first_offset,
            landed,
        } => {
            out.push(RESULT_COMMITTED);
            put_u64s(out, &[*first_offset, landed.len() as u64]);
            put_u64s(out, landed);
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
        RESULT_COMMITTED => {
            let first_offset = reader.u64()?;
            let count = reader.u64()?;
            let mut landed = Vec::with_capacity(usize::try_from(count.min(65_536)).ok()?);
            for _ in 0..count {
                landed.push(reader.u64()?);
            }
            Some(WireCommitResult::Committed {
                first_offset,
                landed,
            })
        }
        RESULT_FAILED => {
            let reason = reader.optional_bytes()??;
            Some(WireCommitResult::Failed(
                String::from_utf8_lossy(reason).into_owned(),
            ))
        }
        RESULT_GONE => Some(WireCommitResult::TopicGone),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        let key = (any::<u64>(), any::<u32>()).prop_map(|(t, partition)| PartitionKey {
            topic: TopicId(t),
            partition,
        });
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..50)
                .prop_map(|b| PeerMessage::Raft(Bytes::from(b))),
            (
                any::<u64>(),
                any::<u64>(),
                key,
                prop::collection::vec(arb_record(), 0..5)
            )
                .prop_map(|(id, origin_checkpoint, target, records)| {
                    PeerMessage::CommitBatch {
                        id,
                        origin_checkpoint,
                        target,
                        records,
                    }
                }),
            (
                any::<u64>(),
                any::<u64>(),
                prop::collection::vec(any::<u64>(), 0..5)
            )
                .prop_map(|(id, first_offset, landed)| PeerMessage::CommitReply {
                    id,
                    result: WireCommitResult::Committed {
                        first_offset,
                        landed
                    }
                }),
            (any::<u64>(), ".{0,20}").prop_map(|(id, reason)| PeerMessage::CommitReply {
                id,
                result: WireCommitResult::Failed(reason)
            }),
            any::<u64>().prop_map(|id| PeerMessage::CommitReply {
                id,
                result: WireCommitResult::TopicGone
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(id, t)| PeerMessage::ConfirmGone {
                id,
                topic: TopicId(t)
            }),
            (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(id, t, gone)| {
                PeerMessage::ConfirmGoneReply {
                    id,
                    topic: TopicId(t),
                    gone,
                }
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
            if !matches!(message, PeerMessage::Raft(_)) {
                let cut = cut.index(bytes.len());
                prop_assert!(PeerMessage::decode(&bytes.slice(..cut)).is_err());
            }
        }
    }

    #[test]
    fn unknown_versions_and_types_are_refused_cleanly() {
        assert_eq!(
            PeerMessage::decode(&Bytes::from_static(&[9, 1])),
            Err(DecodeError::Version(9))
        );
        assert_eq!(
            PeerMessage::decode(&Bytes::from_static(&[1, 77])),
            Err(DecodeError::UnknownType(77))
        );
        assert_eq!(
            PeerMessage::decode(&Bytes::new()),
            Err(DecodeError::Malformed)
        );
    }
}
