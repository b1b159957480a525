//! Fuzzes the ingress WAL record codec (`core/src/wal/record.rs`): any frame body that decodes
//! re-encodes to exactly the same bytes (one encoding per record), and any record built from the
//! input survives encode → `codec::scan` → decode unchanged.
#![no_main]

use arbitrary::Unstructured;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad_core::TopicId;
use narad_core::codec::{ScanEnd, scan};
use narad_core::wal::{Chunk, WalRecord};

fuzz_target!(|data: &[u8]| {
    decoded_bodies_are_canonical(data);
    if let Ok(record) = arbitrary_record(Unstructured::new(data)) {
        records_round_trip(&record);
    }
});

fn decoded_bodies_are_canonical(body: &[u8]) {
    let Some(record) = WalRecord::decode(body) else { return };
    let mut framed = Vec::new();
    record.encode_into(&mut framed);
    assert_eq!(&framed[8..], body, "decode accepted a non-canonical body: {record:?}");
}

fn records_round_trip(record: &WalRecord) {
    let mut bytes = Vec::new();
    record.encode_into(&mut bytes);
    let scanned = scan(&bytes);
    assert_eq!(scanned.end, ScanEnd::Clean);
    assert_eq!(scanned.frames.len(), 1);
    let decoded = WalRecord::decode(scanned.frames[0].body(&bytes));
    assert_eq!(decoded.as_ref(), Some(record));
}

fn arbitrary_record(mut u: Unstructured<'_>) -> arbitrary::Result<WalRecord> {
    let topic: String = u.arbitrary()?;
    let topic = topic.chars().take(200).collect();
    let key: Option<Vec<u8>> = u.arbitrary()?;
    let seq: u64 = u.arbitrary()?;
    let chunk: Option<(u64, bool)> = u.arbitrary()?;
    // A chunk header never names a request that starts after its record.
    let chunk = chunk.map(|(back, last)| Chunk { request: seq - back % seq.saturating_add(1), last });
    Ok(WalRecord {
        seq,
        timestamp_ms: u.arbitrary()?,
        topic,
        topic_id: TopicId(u.arbitrary()?),
        partition: u.arbitrary()?,
        key: key.map(Bytes::from),
        payload: Bytes::copy_from_slice(u.take_rest()),
        chunk,
    })
}
