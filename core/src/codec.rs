//! The framing shared by every log Narad writes (ingress WAL, partition logs, catalogue):
//! `[len: u32 LE][crc32: u32 LE][body: len bytes]`, the CRC covering the length and the body.
//!
//! `scan` walks a file's bytes and tells a *torn tail* (the last write was cut short by a crash:
//! safe to truncate) from *corruption* (a bad frame followed by a valid one, which means
//! acknowledged data was damaged: a loud error, never a silent truncation).

/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Largest body a frame may carry (a 1 MiB payload plus generous headroom for its envelope).
pub const MAX_FRAME_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Appends one frame holding `body` to `out`.
pub fn put_frame(out: &mut Vec<u8>, body: &[u8]) {
    let len = u32::try_from(body.len()).expect("invariant: frame bodies are bounded by 2 MiB");
    assert!(body.len() <= MAX_FRAME_BODY_BYTES, "frame body of {} bytes", body.len());
    let len_bytes = len.to_le_bytes();
    out.extend_from_slice(&len_bytes);
    out.extend_from_slice(&frame_crc(&len_bytes, body).to_le_bytes());
    out.extend_from_slice(body);
}

fn frame_crc(len_bytes: &[u8; 4], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(len_bytes);
    hasher.update(body);
    hasher.finalize()
}

/// One valid frame found by `scan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameAt {
    /// Byte position of the frame header in the scanned buffer.
    pub pos: usize,
    /// Length of the body.
    pub body_len: usize,
}

impl FrameAt {
    /// Position of the byte after this frame.
    pub fn end(&self) -> usize {
        self.pos + FRAME_HEADER_BYTES + self.body_len
    }

    /// The body of this frame within `bytes` (the buffer it was found in).
    pub fn body<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[self.pos + FRAME_HEADER_BYTES..self.end()]
    }
}

/// How a scanned buffer ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte belongs to a valid frame (or the buffer is zero-filled past the last one).
    Clean,
    /// The bytes from `valid_len` on are an incomplete or damaged last write: truncate them.
    TornTail { valid_len: usize },
    /// A damaged frame at `bad_pos` is followed by a valid frame at `next_valid_pos`.
    Corrupt { bad_pos: usize, next_valid_pos: usize },
}

/// Result of scanning a buffer: its valid frames, then how it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    pub frames: Vec<FrameAt>,
    pub end: ScanEnd,
}

impl Scan {
    /// Length of the valid prefix (the byte after the last valid frame).
    pub fn valid_len(&self) -> usize {
        self.frames.last().map_or(0, FrameAt::end)
    }
}

/// Scans `bytes` from the start; see `ScanEnd` for how the end is classified.
pub fn scan(bytes: &[u8]) -> Scan {
    let mut frames = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        match frame_at(bytes, pos) {
            Some(frame) => {
                frames.push(frame);
                pos = frame.end();
            }
            None => {
                let end = classify_bad(bytes, pos);
                return Scan { frames, end };
            }
        }
    }
    Scan { frames, end: ScanEnd::Clean }
}

/// The valid frame starting at `pos`, if there is one.
pub fn frame_at(bytes: &[u8], pos: usize) -> Option<FrameAt> {
    let header = bytes.get(pos..pos + FRAME_HEADER_BYTES)?;
    let len_bytes: [u8; 4] = header[0..4].try_into().expect("4 bytes");
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let body_len = u32::from_le_bytes(len_bytes) as usize;
    if body_len == 0 || body_len > MAX_FRAME_BODY_BYTES {
        return None;
    }
    let body = bytes.get(pos + FRAME_HEADER_BYTES..pos + FRAME_HEADER_BYTES + body_len)?;
    (frame_crc(&len_bytes, body) == crc).then_some(FrameAt { pos, body_len })
}

/// True when the bytes from `pos` may be the start of a valid frame that runs past the end of
/// `bytes` (a shorter header, or a plausible length reaching further): more bytes can tell.
pub fn frame_incomplete(bytes: &[u8], pos: usize) -> bool {
    let Some(len_bytes) = bytes.get(pos..pos + 4) else {
        return true;
    };
    let body_len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
    body_len > 0
        && body_len <= MAX_FRAME_BODY_BYTES
        && pos + FRAME_HEADER_BYTES + body_len > bytes.len()
}

/// Decides whether the bad bytes at `bad_pos` are a torn tail or corruption of acknowledged data.
pub fn classify_bad(bytes: &[u8], bad_pos: usize) -> ScanEnd {
    if bytes[bad_pos..].iter().all(|&b| b == 0) {
        // Zero fill (preallocated or never written): the log simply ends here.
        return ScanEnd::Clean;
    }
    match find_valid_frame_after(bytes, bad_pos) {
        Some(next_valid_pos) => ScanEnd::Corrupt { bad_pos, next_valid_pos },
        None => ScanEnd::TornTail { valid_len: bad_pos },
    }
}

/// Looks for any valid frame after `bad_pos`: first where the damaged frame's own length says the
/// next one starts (a flipped bit inside a body), then at every byte offset.
fn find_valid_frame_after(bytes: &[u8], bad_pos: usize) -> Option<usize> {
    if let Some(header) = bytes.get(bad_pos..bad_pos + 4) {
        let claimed = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        if claimed > 0 && claimed <= MAX_FRAME_BODY_BYTES {
            let next = bad_pos + FRAME_HEADER_BYTES + claimed;
            if frame_at(bytes, next).is_some() {
                return Some(next);
            }
        }
    }
    (bad_pos + 1..bytes.len().saturating_sub(FRAME_HEADER_BYTES))
        .find(|&pos| frame_at(bytes, pos).is_some())
}

/// Little-endian reader over a frame body. Every getter returns `None` past the end, so decoders
/// of untrusted bytes never panic.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let slice = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(slice)
    }

    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// An optional byte string encoded as `u32` length (`u32::MAX` = absent) then the bytes.
    pub fn optional_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        match self.u32()? {
            u32::MAX => Some(None),
            len => Some(Some(self.take(len as usize)?)),
        }
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Everything not yet read.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        rest
    }
}

/// Appends an optional byte string in the form `Reader::optional_bytes` reads.
pub fn put_optional_bytes(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        Some(bytes) => {
            let len = u32::try_from(bytes.len()).expect("invariant: keys are bounded");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn log_of(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for body in bodies {
            put_frame(&mut out, body);
        }
        out
    }

    proptest! {
        #[test]
        fn round_trip(bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..300), 0..20)) {
            let bytes = log_of(&bodies);
            let scan = scan(&bytes);
            prop_assert_eq!(&scan.end, &ScanEnd::Clean);
            let got: Vec<Vec<u8>> = scan.frames.iter().map(|f| f.body(&bytes).to_vec()).collect();
            prop_assert_eq!(got, bodies);
        }

        #[test]
        fn any_truncation_is_a_torn_tail(
            bodies in prop::collection::vec(prop::collection::vec(1u8..=255, 1..200), 1..10),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = log_of(&bodies);
            let cut = cut.index(bytes.len());
            let scan = scan(&bytes[..cut]);
            // Every frame that fits entirely before the cut survives; nothing after it.
            let whole = scan.frames.len();
            let expected = {
                let mut end = 0; let mut n = 0;
                for body in &bodies { end += FRAME_HEADER_BYTES + body.len(); if end <= cut { n += 1 } }
                n
            };
            prop_assert_eq!(whole, expected);
            let corrupt = matches!(scan.end, ScanEnd::Corrupt { .. });
            prop_assert!(!corrupt);
        }

        #[test]
        fn a_flipped_bit_before_the_last_frame_is_corruption(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..200), 2..10),
            which in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let mut bytes = log_of(&bodies);
            let last_frame_start = bytes.len() - FRAME_HEADER_BYTES - bodies.last().unwrap().len();
            let at = which.index(last_frame_start);
            bytes[at] ^= 1 << bit;
            let scan = scan(&bytes);
            let is_corrupt = matches!(scan.end, ScanEnd::Corrupt { .. });
            prop_assert!(is_corrupt, "end = {:?}", scan.end);
        }
    }

    #[test]
    fn zero_fill_is_a_clean_end() {
        let mut bytes = log_of(&[b"hello".to_vec()]);
        bytes.extend_from_slice(&[0; 4096]);
        let scan = scan(&bytes);
        assert_eq!(scan.end, ScanEnd::Clean);
        assert_eq!(scan.frames.len(), 1);
    }

    #[test]
    fn reader_never_panics_on_short_input() {
        let mut reader = Reader::new(&[1, 2, 3]);
        assert_eq!(reader.u64(), None);
        assert_eq!(reader.u16(), Some(0x0201));
        assert_eq!(reader.optional_bytes(), None);
    }
}
