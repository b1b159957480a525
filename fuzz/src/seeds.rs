//! The seed corpus: a few small valid inputs per target (encoded records, messages, files,
//! request bodies), so the fuzzer starts from the formats instead of discovering magics and CRCs
//! by itself. `cargo test --lib -- --ignored write_seed_corpus` in `fuzz/` writes them to
//! `corpus/<target>/seed-<n>`; `scripts/fuzz.sh` minimises the corpus after runs.

use bytes::Bytes;
use narad_core::access::{Principal, UserId};
use narad_core::api::TopicInfo;
use narad_core::meta::state::MetaState;
use narad_core::meta::storage::{SnapRecord, encode_snap_record, put_entries, put_header};
use narad_core::meta::{MetaCommand, encode_command};
use narad_core::partition::PartitionRecord;
use narad_core::peer::{PeerMessage, WireAdminResult, WireCommitResult, WireRecord};
use narad_core::wal::{Chunk, WalRecord, checkpoint};
use narad_core::{FileId, NodeId, PartitionKey, TopicId};
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};

use crate::chunks;

/// Seed inputs of every target that has some, by target name.
pub fn all() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    vec![
        ("wal_record", wal_bodies()),
        ("wal_scan", vec![wal_log()]),
        ("wal_checkpoint", vec![checkpoint_file(7, 9)]),
        ("partition_frame", partition_bodies()),
        ("partition_recovery", vec![chunks::encode(&[7, 300], &partition_log(20))]),
        ("partition_seal", seals()),
        ("peer_message", peer_messages()),
        ("meta_command", commands()),
        ("meta_state", vec![state_image()]),
        ("meta_storage", vec![meta_files()]),
        ("file_id", file_names()),
        ("transport_frame", vec![b"\0\0\0\x05hello".to_vec()]),
        ("transport_auth", vec![[&b"NRDC\x01\0\0\0\x01\0\0\0\x02"[..], &[7; 32]].concat()]),
        ("http_query", queries()),
        ("http_batch", batch_bodies()),
        ("http_body", vec![[&[4u8, 2, 3, 0, 1, 0][..], b"hello world"].concat()]),
        ("payload_json", payloads()),
    ]
}

fn wal_record(seq: u64, key: Option<&'static [u8]>, payload: &'static [u8]) -> WalRecord {
    WalRecord {
        seq,
        timestamp_ms: 1_700_000_000_000,
        topic: "orders".into(),
        topic_id: TopicId(3),
        partition: 1,
        key: key.map(Bytes::from_static),
        payload: Bytes::from_static(payload),
        chunk: None,
    }
}

/// Frame bodies (the decoders take bodies, not frames).
fn bodies(frames: &[u8]) -> Vec<Vec<u8>> {
    narad_core::codec::scan(frames).frames.iter().map(|f| f.body(frames).to_vec()).collect()
}

fn wal_bodies() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    wal_record(1, Some(b"k"), b"{\"a\":1}").encode_into(&mut out);
    wal_record(2, None, b"\x00\xff").encode_into(&mut out);
    let chunked = |seq, last| WalRecord { chunk: Some(Chunk { request: 2, last }), ..wal_record(seq, None, b"c") };
    chunked(3, false).encode_into(&mut out);
    chunked(4, true).encode_into(&mut out);
    bodies(&out)
}

fn wal_log() -> Vec<u8> {
    let mut out = vec![0, 0];
    for seq in 0..4 {
        wal_record(seq, None, b"payload").encode_into(&mut out);
    }
    // A chunked bulk request (4..=6) with a small record between its chunks.
    for (seq, chunk) in [(4, Some(false)), (5, None), (6, Some(true))] {
        let chunk = chunk.map(|last| Chunk { request: 4, last });
        WalRecord { chunk, ..wal_record(seq, None, b"bulk") }.encode_into(&mut out);
    }
    out
}

fn checkpoint_file(first: u64, second: u64) -> Vec<u8> {
    let mut file = vec![0u8; 1024];
    file[..checkpoint::SLOT_BYTES].copy_from_slice(&checkpoint::encode_slot(first));
    file[512..512 + checkpoint::SLOT_BYTES].copy_from_slice(&checkpoint::encode_slot(second));
    file
}

fn partition_record(offset: u64, key: Option<&'static [u8]>) -> PartitionRecord {
    PartitionRecord {
        offset,
        timestamp_ms: 5,
        origin_node: NodeId(2),
        origin_seq: offset + 10,
        key: key.map(Bytes::from_static),
        payload: Bytes::from(vec![b'x'; 1 + offset as usize % 5]),
    }
}

fn partition_log(count: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for offset in 0..count {
        partition_record(offset, None).encode_into(&mut out);
    }
    out
}

fn partition_bodies() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    partition_record(0, Some(b"key")).encode_into(&mut out);
    partition_record(1, None).encode_into(&mut out);
    bodies(&out)
}

fn peer_messages() -> Vec<Vec<u8>> {
    let target = PartitionKey { topic: TopicId(4), partition: 2 };
    let record =
        WireRecord { seq: 9, timestamp_ms: 1, key: None, payload: Bytes::from_static(b"p") };
    let topic = TopicInfo {
        name: "orders".into(),
        id: TopicId(4),
        partitions: 3,
        retention_ms: Some(60_000),
        retention_bytes: None,
        created_ms: 1,
        queue: Default::default(),
    };
    [
        PeerMessage::Raft(Bytes::from_static(b"\x08\x01")),
        PeerMessage::CommitBatch { id: 1, origin_checkpoint: 0, target, records: vec![record] },
        PeerMessage::CommitReply { id: 1, result: WireCommitResult::Failed("disk".into()) },
        PeerMessage::ConfirmGoneReply { id: 2, topic: TopicId(4), gone: true },
        PeerMessage::ProposeReply { id: 3, result: WireAdminResult::Created(topic) },
        PeerMessage::Consume {
            id: 4,
            who: Principal::Trusted,
            target,
            offset: 0,
            max: 10,
            wait_ms: 0,
        },
        PeerMessage::Consume {
            id: 5,
            who: Principal::User { name: "ann".into(), id: UserId(2) },
            target,
            offset: 3,
            max: 10,
            wait_ms: 5_000,
        },
        PeerMessage::ConsumeReply { id: 4, result: Ok(Vec::new()) },
        PeerMessage::TopicStatsReply {
            id: 5,
            partitions: vec![(
                0,
                narad_core::api::PartitionNumbers {
                    log_start_offset: 2,
                    high_watermark: 10,
                    segments: 2,
                    size_bytes: 300,
                    queue_settled: 4,
                    queue_leased: 1,
                    oldest_unsettled_ms: Some(1_764_000_000_000),
                },
            )],
        },
    ]
    .iter()
    .map(|m| m.encode().to_vec())
    .collect()
}

fn commands() -> Vec<Vec<u8>> {
    [
        create("orders"),
        MetaCommand::DeleteTopic { name: "orders".into(), id: TopicId(0) },
        heartbeat(),
        MetaCommand::MarkDead { node: NodeId(2), seen_heartbeats: 3 },
    ]
    .iter()
    .map(encode_command)
    .collect()
}

/// A state with a member and two topics, as its snapshot image.
fn state_image() -> Vec<u8> {
    let mut state = MetaState::new();
    let _ = state.apply(heartbeat());
    for name in ["orders", "t.1"] {
        let _ = state.apply(create(name));
    }
    state.encode()
}

fn heartbeat() -> MetaCommand {
    MetaCommand::Heartbeat {
        node: NodeId(1),
        http_addr: "127.0.0.1:7942".into(),
        cluster_addr: "127.0.0.1:7943".into(),
        now_ms: 5,
    }
}

fn create(name: &str) -> MetaCommand {
    MetaCommand::CreateTopic {
        name: name.into(),
        partitions: Some(3),
        retention_ms: None,
        retention_bytes: None,
        now_ms: 1,
        seen_next_id: 0,
        queue: Default::default(),
    }
}

/// `[log length: u16 LE][raft log][snapshot]`: a log of three entries and a hard state, and a
/// snapshot file holding one record at index 0 (what `meta_storage` splits its input into).
fn meta_files() -> Vec<u8> {
    let mut log = Vec::new();
    put_header(&mut log, 1);
    let entries: Vec<Entry> = [heartbeat(), create("orders"), create("b")]
        .iter()
        .zip(1..)
        .map(|(c, index)| Entry {
            index,
            term: 1,
            data: encode_command(c).into(),
            ..Entry::default()
        })
        .collect();
    let hard_state = HardState { term: 1, vote: 1, commit: 3, ..HardState::default() };
    put_entries(&mut log, &entries, Some(&hard_state));
    let mut metadata = SnapshotMetadata::default();
    metadata.set_conf_state(ConfState { voters: vec![1], ..ConfState::default() });
    let record = SnapRecord {
        seq: 1,
        metadata,
        hard_state: HardState::default(),
        image: MetaState::new().encode().into(),
        entries: Vec::new(),
    };
    let len = u16::try_from(log.len()).expect("a small log");
    [&len.to_le_bytes()[..], &log, &encode_snap_record(&record)].concat()
}

fn file_names() -> Vec<Vec<u8>> {
    let key = PartitionKey { topic: TopicId(12), partition: 3 };
    [
        FileId::WalSegment { first_seq: 42 },
        FileId::PartitionSegment { key, base: 0 },
        FileId::MetaSnapshot,
    ]
    .iter()
    .map(|f| f.relative_path().into_bytes())
    .collect()
}

fn queries() -> Vec<Vec<u8>> {
    ["key=a%20b+c&partition=3", "partition=2&offset=10&max=5", "key=%ff%00&other=1"]
        .iter()
        .map(|q| q.as_bytes().to_vec())
        .collect()
}

fn batch_bodies() -> Vec<Vec<u8>> {
    [
        r#"{"messages":[{"payload":"hello"},{"payload":"AAEC","payload_encoding":"base64","partition":2}]}"#,
        r#"{"messages":[{"payload":{"a":[1,2.5,"x y"]},"key":"k"},{"payload":12,"key":"//4=","key_encoding":"base64"}]}"#,
    ]
    .iter()
    .map(|b| b.as_bytes().to_vec())
    .collect()
}

fn payloads() -> Vec<Vec<u8>> {
    vec![b"{\"total\": 42}".to_vec(), b"hello".to_vec(), vec![0, 159, 146, 150], b"\"x\"".to_vec()]
}

/// Seal files: an empty segment's, and one with an index, checkpoints and a dedup tail.
fn seals() -> Vec<Vec<u8>> {
    use narad_core::partition::seal::{DedupTail, Seal};
    use std::collections::BTreeMap;
    let empty = Seal { base: 4, end: 4, ..Seal::default() };
    let entries = vec![
        narad_core::partition::IndexEntry { offset: 10, pos: 0 },
        narad_core::partition::IndexEntry { offset: 90, pos: 65_600 },
    ];
    let tail = DedupTail::from([(NodeId(1), BTreeMap::from([(700, 5), (701, 6)]))]);
    let full = Seal {
        base: 10,
        end: 120,
        size: 99_000,
        newest_ms: 1_700_000_000_000,
        entries,
        checkpoints: BTreeMap::from([(NodeId(1), 700)]),
        tail,
    };
    vec![empty.encode(), full.encode()]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Writes the seed corpus; run with `--ignored` (see the module docs).
    #[test]
    #[ignore]
    fn write_seed_corpus() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        for (target, inputs) in super::all() {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).expect("corpus directory");
            for (n, input) in inputs.iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{n}")), input).expect("seed file");
            }
        }
    }
}
