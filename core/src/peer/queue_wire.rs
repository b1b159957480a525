//! The wire layout of the queue-consume messages between nodes (`PeerMessage::Receive`,
//! `ReceiveReply`, `Settle`, `SettleReply`): a node that took a client's receive or settle asks
//! each partition's owner, which holds the partition's queue.

use bytes::Bytes;

use super::{
    PeerMessage, WireConsumed, WireError, capacity_for, decode_error, encode_error, get_principal,
    put_principal, put_u64s,
};
use crate::access::Principal;
use crate::api::SettleAction;
use crate::codec::{Reader, put_optional_bytes};
use crate::ids::{PartitionKey, TopicId};
use crate::queue::ReceiptHandle;

/// One message an owner leased, as it crosses the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireLeased {
    pub record: WireConsumed,
    pub nonce: u64,
    pub delivery_count: u32,
}

/// Appends the tag and body of a queue message (`Receive`, `ReceiveReply`, `Settle`,
/// `SettleReply`) to `out`.
pub(super) fn encode(message: &PeerMessage, out: &mut Vec<u8>) {
    match message {
        PeerMessage::ReceiveWatch { id, topic, wait_ms } => {
            out.push(super::TAG_RECEIVE_WATCH);
            put_u64s(out, &[*id, topic.0, *wait_ms]);
        }
        PeerMessage::ReceiveWatchReply { id } => {
            out.push(super::TAG_RECEIVE_WATCH_REPLY);
            put_u64s(out, &[*id]);
        }
        PeerMessage::Receive { id, who, target, max, wait_ms } => {
            out.push(super::TAG_RECEIVE);
            encode_receive(out, *id, who, *target, *max);
            put_u64s(out, &[*wait_ms]);
        }
        PeerMessage::ReceiveReply { id, result } => {
            out.push(super::TAG_RECEIVE_REPLY);
            encode_receive_reply(out, *id, result);
        }
        PeerMessage::Settle { id, who, topic, action, handles } => {
            out.push(super::TAG_SETTLE);
            put_u64s(out, &[*id]);
            put_principal(out, who);
            encode_settle(out, *topic, *action, handles);
        }
        PeerMessage::SettleReply { id, results } => {
            out.push(super::TAG_SETTLE_REPLY);
            encode_settle_reply(out, *id, results);
        }
        other => unreachable!("not a queue message: {}", other.kind()),
    }
}

fn encode_receive(out: &mut Vec<u8>, id: u64, who: &Principal, target: PartitionKey, max: u32) {
    put_u64s(out, &[id]);
    put_principal(out, who);
    put_u64s(out, &[target.topic.0]);
    out.extend_from_slice(&target.partition.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
}

pub(super) fn decode_receive(reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let (id, who) = (reader.u64()?, get_principal(reader)?);
    let target = PartitionKey { topic: TopicId(reader.u64()?), partition: reader.u32()? };
    Some(PeerMessage::Receive { id, who, target, max: reader.u32()?, wait_ms: reader.u64()? })
}

fn encode_receive_reply(out: &mut Vec<u8>, id: u64, result: &Result<Vec<WireLeased>, WireError>) {
    put_u64s(out, &[id]);
    match result {
        Ok(leased) => {
            out.push(0);
            put_u64s(out, &[leased.len() as u64]);
            for lease in leased {
                let record = &lease.record;
                put_u64s(out, &[record.offset, record.timestamp_ms, lease.nonce]);
                out.extend_from_slice(&lease.delivery_count.to_le_bytes());
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

pub(super) fn decode_receive_reply(reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let id = reader.u64()?;
    let result = match reader.take(1)?[0] {
        0 => {
            let count = reader.u64()?;
            let mut leased = Vec::with_capacity(capacity_for(count, reader, 36));
            for _ in 0..count {
                let (offset, timestamp_ms, nonce) = (reader.u64()?, reader.u64()?, reader.u64()?);
                let delivery_count = reader.u32()?;
                let key = reader.optional_bytes()?.map(Bytes::copy_from_slice);
                let payload = Bytes::copy_from_slice(reader.optional_bytes()??);
                let record = WireConsumed { offset, timestamp_ms, key, payload };
                leased.push(WireLeased { record, nonce, delivery_count });
            }
            Ok(leased)
        }
        1 => Err(decode_error(reader)?),
        _ => return None,
    };
    Some(PeerMessage::ReceiveReply { id, result })
}

fn action_byte(action: SettleAction) -> u8 {
    match action {
        SettleAction::Ack => 0,
        SettleAction::Extend => 1,
        SettleAction::Nack => 2,
    }
}

fn encode_settle(
    out: &mut Vec<u8>,
    topic: TopicId,
    action: SettleAction,
    handles: &[ReceiptHandle],
) {
    put_u64s(out, &[topic.0]);
    out.push(action_byte(action));
    put_u64s(out, &[handles.len() as u64]);
    for handle in handles {
        out.extend_from_slice(&handle.partition.to_le_bytes());
        put_u64s(out, &[handle.offset, handle.nonce]);
    }
}

pub(super) fn decode_settle(reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let (id, who) = (reader.u64()?, get_principal(reader)?);
    let topic = TopicId(reader.u64()?);
    let action = match reader.take(1)?[0] {
        0 => SettleAction::Ack,
        1 => SettleAction::Extend,
        2 => SettleAction::Nack,
        _ => return None,
    };
    let count = reader.u64()?;
    let mut handles = Vec::with_capacity(capacity_for(count, reader, 20));
    for _ in 0..count {
        let partition = reader.u32()?;
        handles.push(ReceiptHandle { partition, offset: reader.u64()?, nonce: reader.u64()? });
    }
    Some(PeerMessage::Settle { id, who, topic, action, handles })
}

fn encode_settle_reply(out: &mut Vec<u8>, id: u64, results: &[Result<(), WireError>]) {
    put_u64s(out, &[id, results.len() as u64]);
    for result in results {
        match result {
            Ok(()) => out.push(0),
            Err(error) => {
                out.push(1);
                encode_error(out, error);
            }
        }
    }
}

pub(super) fn decode_settle_reply(reader: &mut Reader<'_>) -> Option<PeerMessage> {
    let (id, count) = (reader.u64()?, reader.u64()?);
    let mut results = Vec::with_capacity(capacity_for(count, reader, 1));
    for _ in 0..count {
        results.push(match reader.take(1)?[0] {
            0 => Ok(()),
            1 => Err(decode_error(reader)?),
            _ => return None,
        });
    }
    Some(PeerMessage::SettleReply { id, results })
}
