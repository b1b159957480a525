//! Successful password verifications, remembered briefly so that a client sending the same
//! credentials on every produce pays one KDF run per `VERIFIED_TTL`, not one per request. Keyed by
//! an HMAC of the credentials under a key drawn at start-up, so the cache holds nothing from which
//! a password could be recovered faster than from the KDF hash itself. An entry also records the
//! hash it was verified against: a password change (a new hash) or a new incarnation of the name
//! makes it worthless at once, whatever its age.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use narad_core::access::{PasswordHash, UserId};
use ring::hmac;
use tokio::time::Instant;

use crate::env::Entropy;

/// How long a verification is trusted.
pub const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// Most verifications remembered (past it, expired ones are dropped, then all of them).
pub const VERIFIED_MAX_ENTRIES: usize = 10_000;

/// What a verification established.
#[derive(Clone, Debug)]
pub struct Verified {
    pub id: UserId,
    /// The hash the password matched.
    pub hash: PasswordHash,
    pub name: String,
    at: Instant,
}

/// The cache.
pub struct VerifiedCache {
    key: hmac::Key,
    entries: Mutex<HashMap<[u8; 32], Verified>>,
}

impl VerifiedCache {
    pub fn new(entropy: &dyn Entropy) -> VerifiedCache {
        let mut secret = [0u8; 32];
        entropy.fill(&mut secret);
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        VerifiedCache { key, entries: Mutex::new(HashMap::new()) }
    }

    /// The verification of `credentials` (the raw `Authorization` value), if one is fresh.
    pub fn get(&self, credentials: &[u8], now: Instant) -> Option<Verified> {
        let key = self.slot(credentials);
        let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.get(&key).filter(|v| now.duration_since(v.at) < VERIFIED_TTL).cloned()
    }

    /// Remembers that `credentials` verified as `id` of `name` against `hash`.
    pub fn insert(
        &self,
        credentials: &[u8],
        (name, id, hash): (&str, UserId, &PasswordHash),
        now: Instant,
    ) {
        let key = self.slot(credentials);
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() >= VERIFIED_MAX_ENTRIES {
            entries.retain(|_, v| now.duration_since(v.at) < VERIFIED_TTL);
            if entries.len() >= VERIFIED_MAX_ENTRIES {
                entries.clear();
            }
        }
        let verified = Verified { id, hash: hash.clone(), name: name.to_string(), at: now };
        entries.insert(key, verified);
    }

    fn slot(&self, credentials: &[u8]) -> [u8; 32] {
        let tag = hmac::sign(&self.key, credentials);
        tag.as_ref().try_into().expect("invariant: HMAC-SHA256 tags are 32 bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::OsEntropy;

    #[test]
    fn a_verification_is_remembered_until_it_expires() {
        let cache = VerifiedCache::new(&OsEntropy);
        let hash = PasswordHash::new("$argon2id$fake".into()).expect("hash");
        let now = Instant::now();
        cache.insert(b"Basic abc", ("ann", UserId(3), &hash), now);
        let hit = cache.get(b"Basic abc", now).expect("remembered");
        assert_eq!((hit.name.as_str(), hit.id, &hit.hash), ("ann", UserId(3), &hash));
        assert!(cache.get(b"Basic abd", now).is_none(), "other credentials miss");
        assert!(cache.get(b"Basic abc", now + VERIFIED_TTL).is_none(), "expired");
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = VerifiedCache::new(&OsEntropy);
        let hash = PasswordHash::new("$argon2id$fake".into()).expect("hash");
        let now = Instant::now();
        for i in 0..VERIFIED_MAX_ENTRIES + 10 {
            cache.insert(format!("Basic {i}").as_bytes(), ("ann", UserId(1), &hash), now);
        }
        let len = cache.entries.lock().expect("lock").len();
        assert!(len <= VERIFIED_MAX_ENTRIES, "{len} entries");
    }
}
