//! Fuzzes the partition log's record frame (`core/src/partition/frame.rs`): the in-place view and
//! the owned record decode the same bodies to the same fields and fingerprint, a decoded body
//! re-encodes to exactly itself, and a record built from the input round-trips.
#![no_main]

use arbitrary::Unstructured;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad_core::NodeId;
use narad_core::codec::scan;
use narad_core::partition::{PartitionRecord, RecordView};

fuzz_target!(|data: &[u8]| {
    view_and_record_agree(data);
    if let Ok(record) = arbitrary_record(Unstructured::new(data)) {
        records_round_trip(&record);
    }
});

fn view_and_record_agree(body: &[u8]) {
    let view = RecordView::decode(body);
    let record = PartitionRecord::decode(body);
    assert_eq!(view.is_some(), record.is_some());
    let (Some(view), Some(record)) = (view, record) else { return };
    assert_eq!(view.to_record(), record);
    assert_eq!(view.fingerprint(), record.fingerprint());
    let mut framed = Vec::new();
    record.encode_into(&mut framed);
    assert_eq!(&framed[8..], body, "decode accepted a non-canonical body");
}

fn records_round_trip(record: &PartitionRecord) {
    let mut bytes = Vec::new();
    record.encode_into(&mut bytes);
    let scanned = scan(&bytes);
    assert_eq!(scanned.frames.len(), 1);
    let body = scanned.frames[0].body(&bytes);
    assert_eq!(PartitionRecord::decode(body).as_ref(), Some(record));
    let view = RecordView::decode(body).expect("an encoded record decodes");
    assert_eq!(view.fingerprint(), record.fingerprint());
}

fn arbitrary_record(mut u: Unstructured<'_>) -> arbitrary::Result<PartitionRecord> {
    let key: Option<Vec<u8>> = u.arbitrary()?;
    Ok(PartitionRecord {
        offset: u.arbitrary()?,
        timestamp_ms: u.arbitrary()?,
        origin_node: NodeId(u.arbitrary()?),
        origin_seq: u.arbitrary()?,
        key: key.map(Bytes::from),
        payload: Bytes::copy_from_slice(u.take_rest()),
    })
}
