//! Fuzzes chunked partition-log recovery (`core/src/partition/recovery.rs` `PartitionScan`):
//! feeding the same file in any chunking (the fuzzer picks the chunk sizes, see `chunks`) gives
//! the same outcome as feeding it whole, and a recovered log never holds more records than the
//! file's prefix of CRC-valid frames (no frame with a bad CRC is ever accepted). A file made of
//! valid records is also recovered with a torn tail cut anywhere, without refusing.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad_core::codec::{ScanEnd, scan};
use narad_core::partition::PartitionRecord;
use narad_core::{NodeId, PartitionKey, PartitionScan, TopicId};
use narad_fuzz::chunks;

/// High watermark, size, and whether a repair (truncation) was queued; or the error's text.
type Outcome = Result<(u64, u64, bool), String>;

fuzz_target!(|input: &[u8]| {
    let plan = chunks::plan(input);
    let file = plan.data;
    let whole = recover(&[file]);
    assert_eq!(recover(&plan.pieces()), whole, "chunking changed the outcome");
    if let Ok((records, _, _)) = whole {
        let valid = scan(file).frames.len() as u64;
        assert!(records <= valid, "{records} records from {valid} CRC-valid frames");
    }
    a_sound_log_with_a_torn_tail_recovers(file);
});

fn recover(pieces: &[&[u8]]) -> Outcome {
    let key = PartitionKey { topic: TopicId(1), partition: 0 };
    let mut scan = PartitionScan::new(key, 256);
    let mut fed = 0;
    for piece in pieces {
        if scan.stopped() {
            break;
        }
        scan.feed(piece).map_err(|e| e.to_string())?;
        fed += piece.len();
    }
    let rest: Vec<u8> = pieces.concat();
    let consumed = usize::try_from(scan.fed()).unwrap();
    assert!(consumed <= fed);
    let mut log = scan.finish(&rest[consumed..]).map_err(|e| e.to_string())?;
    Ok((log.high_watermark(), log.size_bytes(), log.poll_io().is_some()))
}

/// Builds records 0..n from the input (payloads split at 0xff), cuts the last one short by the
/// first byte's worth, and checks that recovery keeps exactly the whole records.
fn a_sound_log_with_a_torn_tail_recovers(data: &[u8]) {
    let Some((&tear, rest)) = data.split_first() else { return };
    let mut file = Vec::new();
    let mut count = 0u64;
    for payload in rest.split(|&b| b == 0xff).take(64) {
        let record = PartitionRecord {
            offset: count,
            timestamp_ms: count,
            origin_node: NodeId(1),
            origin_seq: count,
            key: None,
            payload: Bytes::copy_from_slice(payload),
        };
        record.encode_into(&mut file);
        count += 1;
    }
    let sound = file.len();
    let torn = usize::from(tear).min(sound);
    let cut = &file[..sound - torn];
    let scanned = scan(cut);
    if matches!(scanned.end, ScanEnd::Corrupt { .. }) {
        // The torn record's payload holds a valid frame of its own: no scan can tell that from
        // damaged acknowledged data, so refusing is the designed answer (see fuzz/README.md).
        return;
    }
    let result = recover(&[cut]);
    let Ok((records, size, _)) = result else {
        panic!("a sound log with a torn tail was refused: {result:?}");
    };
    let kept = scanned.frames.len() as u64;
    assert_eq!(records, kept);
    assert!(size <= (sound - torn) as u64);
}
