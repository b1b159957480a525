//! Fuzzes partition seal files (`core/src/partition/seal.rs` `Seal::decode`, and adoption in
//! `core/src/partition/recovery.rs` `PartitionScan::open_segment`): what decodes re-encodes to
//! the same bytes; a scan handed the input as a segment's seal never panics and adopts the
//! segment exactly when the seal decodes and names that segment's base and length, and then
//! recovers the watermark and size the seal records.
#![no_main]

use std::collections::BTreeMap;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad_core::partition::seal::Seal;
use narad_core::{PartitionKey, PartitionScan, TopicId};

fuzz_target!(|data: &[u8]| {
    if let Some(seal) = Seal::decode(data) {
        assert_eq!(seal.encode(), data, "canonical");
    }
    adoption(data);
});

/// The input as the seal of a segment whose base and length are the decoded seal's own (so
/// adoption is reached), or taken from the input's first bytes.
fn adoption(data: &[u8]) {
    let decoded = Seal::decode(data);
    let (base, len) = match (&decoded, data.first()) {
        (Some(seal), Some(byte)) if byte & 1 == 0 => (seal.base, seal.size),
        _ => (u64::from(data.first().copied().unwrap_or(0)), data.len() as u64),
    };
    let key = PartitionKey { topic: TopicId(1), partition: 0 };
    let seals = BTreeMap::from([(base, Bytes::copy_from_slice(data))]);
    let mut scan = PartitionScan::new(key, 256).with_seals(seals);
    let adopted = scan.open_segment(base, len).expect("a first segment is never refused");
    let trusted = decoded.as_ref().is_some_and(|s| s.base == base && s.size == len);
    assert_eq!(adopted, trusted);
    if let (true, Some(seal)) = (adopted, decoded) {
        let log = scan.finish(&[]).expect("an adopted segment ends cleanly");
        assert_eq!((log.high_watermark(), log.size_bytes()), (seal.end, seal.size));
    }
}
