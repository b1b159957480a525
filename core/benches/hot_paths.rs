//! Microbenchmarks of the hot paths of the produce pipeline, all pure CPU (no disk):
//! WAL record encode + CRC, group-commit staging, dispatcher placement and batching, and the
//! partition frame encode + read-back verification. Run with `cargo bench -p narad-core`.

use std::collections::BTreeMap;

use bytes::Bytes;
use divan::{Bencher, black_box};
use narad_core::codec::scan;
use narad_core::dispatch::{Dispatcher, Placement};
use narad_core::ids::{Instant, NodeId, PartitionKey, TopicId};
use narad_core::partition::PartitionRecord;
use narad_core::wal::{self, Draft, Wal, WalRecord};

fn main() {
    divan::main();
}

fn record(seq: u64, partition: u32) -> WalRecord {
    WalRecord {
        seq,
        timestamp_ms: 1_700_000_000_000,
        topic: "orders".into(),
        topic_id: TopicId(1),
        partition,
        key: Some(Bytes::from_static(b"customer-42")),
        payload: Bytes::from(vec![7u8; 256]),
        chunk: None,
    }
}

#[divan::bench]
fn wal_record_encode_256b(bencher: Bencher) {
    let record = record(1, 0);
    let mut out = Vec::with_capacity(512);
    bencher.bench_local(|| {
        out.clear();
        black_box(&record).encode_into(&mut out);
        black_box(out.len())
    });
}

#[divan::bench(args = [1, 64, 1000])]
fn group_commit_staging(bencher: Bencher, records: usize) {
    let recovered = wal::recover(&BTreeMap::new(), None).expect("empty WAL");
    bencher
        .with_inputs(|| {
            let wal: Wal<u32> = Wal::from_recovered(recovered.clone());
            let drafts: Vec<Draft> = (0..records)
                .map(|_| Draft {
                    timestamp_ms: 1,
                    topic: "orders".into(),
                    topic_id: TopicId(1),
                    partition: 0,
                    key: None,
                    payload: Bytes::from(vec![7u8; 256]),
                })
                .collect();
            (wal, drafts)
        })
        .bench_local_values(|(mut wal, drafts)| {
            for draft in drafts {
                wal.stage(vec![draft], 0).expect("not latched");
            }
            wal.pump(Instant(0), false);
            black_box(wal.poll_io())
        });
}

struct AllLive;

impl Placement for AllLive {
    fn partitions(&self, _topic: TopicId) -> Option<u32> {
        Some(64)
    }
    fn owner_alive(&self, _key: PartitionKey) -> bool {
        true
    }
}

#[divan::bench]
fn dispatcher_place_and_batch_4096_over_64_partitions(bencher: Bencher) {
    bencher
        .with_inputs(|| (0..4096u64).map(|seq| record(seq, (seq % 64) as u32)).collect::<Vec<_>>())
        .bench_local_values(|records| {
            let mut dispatcher = Dispatcher::new(0);
            dispatcher.accept(records, Instant(0), &AllLive);
            black_box(dispatcher.poll_commits(Instant(0)).len())
        });
}

#[divan::bench]
fn partition_frames_encode_and_verify_64(bencher: Bencher) {
    let records: Vec<PartitionRecord> = (0..64)
        .map(|i| PartitionRecord {
            offset: i,
            timestamp_ms: 1,
            origin_node: NodeId(1),
            origin_seq: i,
            key: None,
            payload: Bytes::from(vec![7u8; 256]),
        })
        .collect();
    bencher.bench_local(|| {
        let mut data = Vec::with_capacity(64 * 300);
        for record in &records {
            record.encode_into(&mut data);
        }
        black_box(scan(&data).frames.len())
    });
}
