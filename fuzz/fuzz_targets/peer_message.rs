//! Fuzzes the node RPC message codec (`core/src/peer.rs`): bytes that decode are the canonical
//! encoding of the message they decode to (`encode(decode(b)) == b`), the message survives
//! another round trip, a message built from the input round-trips, and decoding allocates in
//! proportion to the input (a length field must not size a buffer by itself).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad_core::api::{PartitionNumbers, SettleAction, TopicInfo};
use narad_core::peer::{
    PeerMessage, WireAdminResult, WireCommitResult, WireConsumed, WireError, WireLeased, WireRecord,
};
use narad_core::queue::ReceiptHandle;
use narad_core::{PartitionKey, TopicId};
use narad_fuzz::alloc::{Counting, measure};
use narad_fuzz::values::{principal, retention, retention_bytes, user_info};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Decoding `n` bytes may allocate at most this many bytes per input byte (plus a constant): a
/// decoded record costs ~80 bytes of struct for at least 24 bytes of input, doubled by growth.
const ALLOC_PER_INPUT_BYTE: usize = 16;
const ALLOC_SLACK: usize = 1024;

fuzz_target!(|data: &[u8]| {
    decoded_bytes_are_canonical(data);
    if let Ok(message) = arbitrary_message(&mut Unstructured::new(data)) {
        let encoded = message.encode();
        assert_eq!(PeerMessage::decode(&encoded).as_ref(), Ok(&message), "round trip");
    }
});

fn decoded_bytes_are_canonical(data: &[u8]) {
    let bytes = Bytes::copy_from_slice(data);
    let (decoded, allocated) = measure(|| PeerMessage::decode(&bytes));
    let bound = ALLOC_PER_INPUT_BYTE * data.len() + ALLOC_SLACK;
    assert!(allocated <= bound, "decoding {} bytes allocated {allocated} bytes", data.len());
    let Ok(message) = decoded else { return };
    let encoded = message.encode();
    assert_eq!(&encoded[..], data, "decode accepted non-canonical bytes as {message:?}");
    assert_eq!(PeerMessage::decode(&encoded).as_ref(), Ok(&message));
}

/// A message of any kind with fields from the input.
fn arbitrary_message(u: &mut Unstructured<'_>) -> arbitrary::Result<PeerMessage> {
    let id = u64::arbitrary(u)?;
    Ok(match u.int_in_range(0..=16u8)? {
        0 => PeerMessage::Raft(bytes(u)?),
        1 => PeerMessage::CommitBatch {
            id,
            origin_checkpoint: u.arbitrary()?,
            target: target(u)?,
            records: many(u, record)?,
        },
        2 => PeerMessage::CommitReply { id, result: commit_result(u)? },
        3 => PeerMessage::ConfirmGone { id, topic: TopicId(u.arbitrary()?) },
        4 => PeerMessage::ConfirmGoneReply {
            id,
            topic: TopicId(u.arbitrary()?),
            gone: u.arbitrary()?,
        },
        5 => PeerMessage::Propose { id, who: principal(u)?, command: bytes(u)? },
        6 => PeerMessage::ProposeReply { id, result: admin_result(u)? },
        7 => PeerMessage::Consume {
            id,
            who: principal(u)?,
            target: target(u)?,
            offset: u.arbitrary()?,
            max: u.arbitrary()?,
            wait_ms: u.arbitrary()?,
        },
        8 => PeerMessage::ConsumeReply { id, result: consume_result(u)? },
        9 => PeerMessage::TopicStats { id, topic: TopicId(u.arbitrary()?) },
        10 => PeerMessage::Receive {
            id,
            who: principal(u)?,
            target: target(u)?,
            max: u.arbitrary()?,
            wait_ms: u.arbitrary()?,
        },
        11 => PeerMessage::ReceiveReply { id, result: receive_result(u)? },
        12 => PeerMessage::Settle {
            id,
            who: principal(u)?,
            topic: TopicId(u.arbitrary()?),
            action: *u.choose(&[SettleAction::Ack, SettleAction::Extend, SettleAction::Nack])?,
            handles: many(u, handle)?,
        },
        13 => PeerMessage::SettleReply { id, results: many(u, settle_result)? },
        14 => PeerMessage::ReceiveWatch {
            id,
            topic: TopicId(u.arbitrary()?),
            wait_ms: u.arbitrary()?,
        },
        15 => PeerMessage::ReceiveWatchReply { id },
        _ => PeerMessage::TopicStatsReply { id, partitions: stats(u)? },
    })
}

fn stats(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<(u32, PartitionNumbers)>> {
    let raw: Vec<(u32, [u64; 7])> = u.arbitrary()?;
    let numbers = |(partition, [a, b, c, d, e, f, g]): (u32, [u64; 7])| {
        let numbers = PartitionNumbers {
            log_start_offset: a,
            high_watermark: b,
            segments: c,
            size_bytes: d,
            queue_settled: e,
            queue_leased: f,
            // `u64::MAX` is the wire's spelling of none.
            oldest_unsettled_ms: (g != u64::MAX).then_some(g),
        };
        (partition, numbers)
    };
    Ok(raw.into_iter().map(numbers).collect())
}

fn bytes(u: &mut Unstructured<'_>) -> arbitrary::Result<Bytes> {
    Ok(Bytes::from(Vec::<u8>::arbitrary(u)?))
}

fn optional_bytes(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<Bytes>> {
    Ok(Option::<Vec<u8>>::arbitrary(u)?.map(Bytes::from))
}

fn many<T>(
    u: &mut Unstructured<'_>,
    one: fn(&mut Unstructured<'_>) -> arbitrary::Result<T>,
) -> arbitrary::Result<Vec<T>> {
    let count = u.int_in_range(0..=8u8)?;
    (0..count).map(|_| one(u)).collect()
}

fn target(u: &mut Unstructured<'_>) -> arbitrary::Result<PartitionKey> {
    Ok(PartitionKey { topic: TopicId(u.arbitrary()?), partition: u.arbitrary()? })
}

fn record(u: &mut Unstructured<'_>) -> arbitrary::Result<WireRecord> {
    Ok(WireRecord {
        seq: u.arbitrary()?,
        timestamp_ms: u.arbitrary()?,
        key: optional_bytes(u)?,
        payload: bytes(u)?,
    })
}

fn consumed(u: &mut Unstructured<'_>) -> arbitrary::Result<WireConsumed> {
    Ok(WireConsumed {
        offset: u.arbitrary()?,
        timestamp_ms: u.arbitrary()?,
        key: optional_bytes(u)?,
        payload: bytes(u)?,
    })
}

fn leased(u: &mut Unstructured<'_>) -> arbitrary::Result<WireLeased> {
    Ok(WireLeased { record: consumed(u)?, nonce: u.arbitrary()?, delivery_count: u.arbitrary()? })
}

fn receive_result(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Result<Vec<WireLeased>, WireError>> {
    Ok(if u.arbitrary()? { Ok(many(u, leased)?) } else { Err(wire_error(u)?) })
}

fn handle(u: &mut Unstructured<'_>) -> arbitrary::Result<ReceiptHandle> {
    Ok(ReceiptHandle { partition: u.arbitrary()?, offset: u.arbitrary()?, nonce: u.arbitrary()? })
}

fn settle_result(u: &mut Unstructured<'_>) -> arbitrary::Result<Result<(), WireError>> {
    Ok(if u.arbitrary()? { Ok(()) } else { Err(wire_error(u)?) })
}

fn commit_result(u: &mut Unstructured<'_>) -> arbitrary::Result<WireCommitResult> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => WireCommitResult::Committed { first_offset: u.arbitrary()? },
        1 => WireCommitResult::Failed(u.arbitrary()?),
        _ => WireCommitResult::TopicGone,
    })
}

fn wire_error(u: &mut Unstructured<'_>) -> arbitrary::Result<WireError> {
    Ok(WireError { status: u.arbitrary()?, message: u.arbitrary()? })
}

fn admin_result(u: &mut Unstructured<'_>) -> arbitrary::Result<WireAdminResult> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => WireAdminResult::Created(topic_info(u)?),
        3 => WireAdminResult::User(user_info(u)?),
        1 => WireAdminResult::Done,
        2 => WireAdminResult::Error(wire_error(u)?),
        _ => WireAdminResult::Updated(topic_info(u)?),
    })
}

fn topic_info(u: &mut Unstructured<'_>) -> arbitrary::Result<TopicInfo> {
    Ok(TopicInfo {
        name: u.arbitrary()?,
        id: TopicId(u.arbitrary()?),
        partitions: u.arbitrary()?,
        retention_ms: retention(u)?,
        retention_bytes: retention_bytes(u)?,
        created_ms: u.arbitrary()?,
        queue: Default::default(),
    })
}

fn consume_result(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Result<Vec<WireConsumed>, WireError>> {
    Ok(if u.arbitrary()? { Ok(many(u, consumed)?) } else { Err(wire_error(u)?) })
}
