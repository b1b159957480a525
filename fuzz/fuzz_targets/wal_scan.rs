//! Fuzzes the frame scan every log shares (`core/src/codec.rs` `scan`, `frame_at`): every frame
//! it accepts is contiguous and carries a CRC that an independent check confirms, and its verdict
//! on the end is justified (zero fill for `Clean`, no valid frame after a `TornTail`, a valid
//! frame at `next_valid_pos` for `Corrupt`). A log of valid frames cut anywhere is never
//! reported as corrupt.
#![no_main]

use libfuzzer_sys::fuzz_target;
use narad_core::codec::{
    FRAME_HEADER_BYTES, MAX_FRAME_BODY_BYTES, ScanEnd, frame_at, put_frame, scan,
};

fuzz_target!(|data: &[u8]| {
    verdicts_are_justified(data);
    a_cut_log_is_never_corrupt(data);
});

/// Independent CRC check of a frame header at `pos`.
fn crc_ok(bytes: &[u8], pos: usize) -> bool {
    let Some(header) = bytes.get(pos..pos + FRAME_HEADER_BYTES) else { return false };
    let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().unwrap());
    let Some(body) = bytes.get(pos + FRAME_HEADER_BYTES..pos + FRAME_HEADER_BYTES + len) else {
        return false;
    };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[..4]);
    hasher.update(body);
    len > 0 && len <= MAX_FRAME_BODY_BYTES && hasher.finalize() == crc
}

fn verdicts_are_justified(bytes: &[u8]) {
    let scanned = scan(bytes);
    let mut pos = 0;
    for frame in &scanned.frames {
        assert_eq!(frame.pos, pos, "frames are contiguous from byte 0");
        assert!(crc_ok(bytes, pos), "accepted a frame with a bad CRC at {pos}");
        pos = frame.end();
    }
    assert_eq!(scanned.valid_len(), pos);
    match scanned.end {
        ScanEnd::Clean => assert!(bytes[pos..].iter().all(|&b| b == 0), "clean end with data"),
        ScanEnd::TornTail { valid_len } => {
            assert_eq!(valid_len, pos);
            let later = (pos + 1..bytes.len()).find(|&p| crc_ok(bytes, p));
            assert_eq!(later, None, "a torn tail hides a valid frame");
        }
        ScanEnd::Corrupt { bad_pos, next_valid_pos } => {
            assert_eq!(bad_pos, pos);
            assert!(next_valid_pos > bad_pos && crc_ok(bytes, next_valid_pos));
            assert!(frame_at(bytes, next_valid_pos).is_some());
        }
    }
}

/// Treats the input as frame bodies (split at 0xff bytes) written as a log, then cuts the log at
/// a position taken from the first two bytes: exactly the frames before the cut survive. The cut
/// is a torn tail unless the frame it tears carries a valid frame inside its own bytes (then
/// `Corrupt` is the scan's honest answer: it cannot tell that frame from acknowledged data).
fn a_cut_log_is_never_corrupt(data: &[u8]) {
    let Some((cut_bytes, rest)) = data.split_first_chunk::<2>() else { return };
    let mut log = Vec::new();
    let mut ends = vec![0];
    for body in rest.split(|&b| b == 0xff).filter(|b| !b.is_empty()) {
        put_frame(&mut log, body);
        ends.push(log.len());
    }
    let cut = usize::from(u16::from_le_bytes(*cut_bytes)).min(log.len());
    let scanned = scan(&log[..cut]);
    let whole = ends.iter().filter(|&&end| end <= cut).count() - 1;
    assert_eq!(scanned.frames.len(), whole, "cut at {cut}");
    if let ScanEnd::Corrupt { bad_pos, next_valid_pos } = scanned.end {
        assert_eq!(bad_pos, ends[whole], "cut at {cut}");
        assert!(next_valid_pos < cut, "cut at {cut}: {:?}", scanned.end);
    }
}
