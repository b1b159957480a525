//! Fuzzes the WAL checkpoint file (`core/src/wal/checkpoint.rs` `decode_file`): a decoded value
//! always comes from a slot whose magic and CRC an independent check confirms, and is the largest
//! such slot; a value encoded into either slot reads back exactly, even with the other slot torn.
#![no_main]

use libfuzzer_sys::fuzz_target;
use narad_core::wal::checkpoint::{SLOT_BYTES, SLOT_STRIDE, decode_file, encode_slot};

fuzz_target!(|data: &[u8]| {
    decoded_values_come_from_valid_slots(data);
    encoded_values_read_back(data);
});

/// The checkpoint in the slot at `start`, checked without the decoder: magic "NACK", then CRC.
fn valid_slot(bytes: &[u8], start: usize) -> Option<u64> {
    let slot = bytes.get(start..start + SLOT_BYTES)?;
    let magic = u32::from_le_bytes(slot[8..12].try_into().unwrap());
    let crc = u32::from_le_bytes(slot[12..16].try_into().unwrap());
    (magic == 0x4e41_434b && crc == crc32fast::hash(&slot[..12]))
        .then(|| u64::from_le_bytes(slot[..8].try_into().unwrap()))
}

fn decoded_values_come_from_valid_slots(bytes: &[u8]) {
    let stride = SLOT_STRIDE as usize;
    let expected = [valid_slot(bytes, 0), valid_slot(bytes, stride)].into_iter().flatten().max();
    assert_eq!(decode_file(bytes), expected);
}

fn encoded_values_read_back(data: &[u8]) {
    let Some((value, rest)) = data.split_first_chunk::<8>() else { return };
    let value = u64::from_le_bytes(*value);
    let slot = usize::from(rest.first().is_some_and(|b| b & 1 == 1));
    let mut file = vec![0u8; 2 * SLOT_STRIDE as usize];
    let start = slot * SLOT_STRIDE as usize;
    file[start..start + SLOT_BYTES].copy_from_slice(&encode_slot(value));
    // The other slot holds whatever the rest of the input says (a torn or older write).
    let other = (1 - slot) * SLOT_STRIDE as usize;
    let garbage = rest.get(1..).unwrap_or(&[]);
    let n = garbage.len().min(SLOT_BYTES);
    file[other..other + n].copy_from_slice(&garbage[..n]);
    let older = valid_slot(&file, other);
    assert_eq!(decode_file(&file), Some(older.map_or(value, |o| o.max(value))));
}
