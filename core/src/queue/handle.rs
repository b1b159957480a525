//! Receipt handles: `partition:offset:nonce`, three decimal numbers (the original Narad's
//! shape). The nonce names one delivery: it is derived from the owner's secret (drawn from the
//! node's seed at start) and the partition, offset and delivery count, and the count of a
//! message grows with every delivery, durably, before the handle is given out. So no two
//! deliveries of a message share a nonce, across restarts too, and a handle from an earlier
//! delivery, another topic or a guess does not match the lease it would settle.

use crate::ids::PartitionKey;

/// A parsed receipt handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiptHandle {
    pub partition: u32,
    pub offset: u64,
    pub nonce: u64,
}

impl ReceiptHandle {
    /// Parses `partition:offset:nonce`; `None` for anything else (a 400).
    pub fn parse(text: &str) -> Option<ReceiptHandle> {
        let mut parts = text.split(':');
        let handle = ReceiptHandle {
            partition: decimal(parts.next()?)?.try_into().ok()?,
            offset: decimal(parts.next()?)?,
            nonce: decimal(parts.next()?)?,
        };
        parts.next().is_none().then_some(handle)
    }
}

impl std::fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.partition, self.offset, self.nonce)
    }
}

/// Digits only (no sign, no spaces), at most what a `u64` holds.
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The nonce of delivery `count` of `offset` in `key`, for an owner whose secret is `secret`.
pub fn nonce(secret: u64, key: PartitionKey, offset: u64, count: u32) -> u64 {
    let mut h = mix(secret ^ 0x6e61_7261_645f_7131);
    for word in [key.topic.0, u64::from(key.partition), offset, u64::from(count)] {
        h = mix(h ^ word);
    }
    h
}

/// The secret an owner derives its nonces from, drawn from the node's seed and the instant the
/// process started, so it differs at every start. It must: a delivery count granted ahead of its
/// journal entry may be lost in a crash and given again after the restart, and under the same
/// secret the new delivery would carry the old one's nonce (a stale handle would settle it).
pub fn owner_secret(seed: u64, started: crate::ids::Instant) -> u64 {
    mix(mix(seed) ^ mix(started.0) ^ 0x7365_6372_6574_5f71)
}

/// SplitMix64's finaliser: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TopicId;

    #[test]
    fn handles_parse_and_print_alike() {
        let handle = ReceiptHandle::parse("1:0:181499699661178901").expect("the original's shape");
        assert_eq!(
            handle,
            ReceiptHandle { partition: 1, offset: 0, nonce: 181_499_699_661_178_901 }
        );
        assert_eq!(handle.to_string(), "1:0:181499699661178901");
        let max = format!("{}:{}:{}", u32::MAX, u64::MAX, u64::MAX);
        assert_eq!(ReceiptHandle::parse(&max).map(|h| h.to_string()), Some(max));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "1:2",
            "1:2:3:4",
            "a:2:3",
            "1:-2:3",
            "1:+2:3",
            " 1:2:3",
            "1:2:3 ",
            "1::3",
            "4294967296:0:0",
            "0:18446744073709551616:0",
        ] {
            assert_eq!(ReceiptHandle::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_delivery_has_its_own_nonce() {
        let key = PartitionKey { topic: TopicId(4), partition: 2 };
        let other = PartitionKey { topic: TopicId(5), partition: 2 };
        let mut seen = std::collections::BTreeSet::new();
        for offset in 0..50 {
            for count in 1..20 {
                assert!(seen.insert(nonce(7, key, offset, count)), "{offset} {count}");
                assert!(seen.insert(nonce(7, other, offset, count)));
                assert!(seen.insert(nonce(8, key, offset, count)), "another owner's secret");
            }
        }
    }
}
