//! FNV-1a (32-bit), the hash that maps a record key to its partition: `fnv1a_32(key) % partitions`.
//! Clients in other languages reproduce partition affinity with it, so it must never change.

const OFFSET_BASIS: u32 = 0x811c_9dc5;
const PRIME: u32 = 0x0100_0193;

/// FNV-1a 32-bit hash of `bytes`.
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| (hash ^ u32::from(byte)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::fnv1a_32;

    #[test]
    fn golden_vectors() {
        // Published FNV-1a 32-bit test vectors.
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    }
}
