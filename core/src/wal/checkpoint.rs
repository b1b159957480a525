//! The WAL checkpoint: the first sequence number not yet done (committed or discarded). It lives in
//! a tiny file rewritten in place, alternating between two slots in different sectors, so a torn
//! write of one slot still leaves the other; recovery takes the largest valid slot (the checkpoint
//! only moves forward).

use crate::codec::Reader;

/// Bytes of one slot on disk.
pub const SLOT_BYTES: usize = 16;
/// Offset of slot `i` in the file: slots live in different 512-byte sectors.
pub const SLOT_STRIDE: u64 = 512;
const MAGIC: u32 = 0x4e41_434b; // "NACK"

/// Encodes `checkpoint` as one slot.
pub fn encode_slot(checkpoint: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(SLOT_BYTES);
    out.extend_from_slice(&checkpoint.to_le_bytes());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
    out
}

fn decode_slot(bytes: &[u8]) -> Option<u64> {
    let mut reader = Reader::new(bytes);
    let checkpoint = reader.u64()?;
    let magic = reader.u32()?;
    let crc = reader.u32()?;
    (magic == MAGIC && crc == crc32fast::hash(&bytes[..12])).then_some(checkpoint)
}

/// The checkpoint stored in the file's bytes, if any slot is valid.
pub fn decode_file(bytes: &[u8]) -> Option<u64> {
    (0..2u64)
        .filter_map(|slot| {
            let start = usize::try_from(slot * SLOT_STRIDE).ok()?;
            decode_slot(bytes.get(start..start + SLOT_BYTES)?)
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_larger_valid_slot_wins_and_a_torn_slot_is_ignored() {
        let mut file = vec![0u8; 1024];
        file[..SLOT_BYTES].copy_from_slice(&encode_slot(7));
        file[512..512 + SLOT_BYTES].copy_from_slice(&encode_slot(9));
        assert_eq!(decode_file(&file), Some(9));
        file[515] ^= 0x40; // tear the newer slot
        assert_eq!(decode_file(&file), Some(7));
        assert_eq!(decode_file(&[]), None);
    }
}
