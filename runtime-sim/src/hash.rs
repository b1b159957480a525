//! A stable 64-bit hash of the event trace (FNV-1a over little-endian words). std's hashers are
//! randomly keyed per process, so they cannot prove that two runs — or two machines — saw the
//! same trace; this one gives the same value everywhere.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Running hash of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceHash(u64);

impl Default for TraceHash {
    fn default() -> Self {
        TraceHash(FNV_OFFSET)
    }
}

impl TraceHash {
    /// Mixes one word into the hash.
    #[inline]
    pub fn word(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// Mixes several words.
    pub fn words(&mut self, words: &[u64]) {
        for &word in words {
            self.word(word);
        }
    }

    /// Mixes a byte string (its length first, so concatenations differ).
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.word(bytes.len() as u64);
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// The hash so far.
    pub fn value(&self) -> u64 {
        self.0
    }

    /// The hash as 16 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_fnv1a_64_reference() {
        // FNV-1a 64 of the bytes "a" is 0xaf63dc4c8601ec8c.
        let mut h = TraceHash::default();
        h.0 ^= u64::from(b'a');
        h.0 = h.0.wrapping_mul(FNV_PRIME);
        assert_eq!(h.value(), 0xaf63_dc4c_8601_ec8c);
        let mut x = TraceHash::default();
        x.words(&[1, 2]);
        let mut y = TraceHash::default();
        y.words(&[2, 1]);
        assert_ne!(x, y);
        assert_eq!(x.hex().len(), 16);
    }
}
