//! Passwords of users (docs/design.md §8): argon2id with the crate's recommended parameters
//! (19 MiB of memory, 2 passes, 1 lane), a 16-byte salt from the node's entropy seam, stored in
//! the metastore as the PHC string. Hashing and verifying cost tens of milliseconds and 19 MiB
//! each, on purpose: callers run them off the driver, bound how many run at once and cache a
//! successful verification briefly.

use argon2::password_hash::{PasswordHasher, PasswordVerifier, SaltString};
use narad_core::access::PasswordHash;

use crate::env::Entropy;

/// Shortest password accepted.
pub const MIN_PASSWORD_BYTES: usize = 8;
/// Longest password accepted (bounds the work one request can ask of the KDF).
pub const MAX_PASSWORD_BYTES: usize = 1_024;
/// Salt bytes per hash.
const SALT_BYTES: usize = 16;

/// Checks a new password's length.
pub fn validate(password: &str) -> Result<(), String> {
    let len = password.len();
    if !(MIN_PASSWORD_BYTES..=MAX_PASSWORD_BYTES).contains(&len) {
        return Err(format!(
            "a password has {MIN_PASSWORD_BYTES} to {MAX_PASSWORD_BYTES} bytes, got {len}"
        ));
    }
    Ok(())
}

/// How much work a new hash costs (a verification costs what its hash says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kdf {
    /// argon2id's recommended parameters: what every node uses.
    Recommended,
    /// 1 MiB and one pass, about a millisecond: only for the simulator, which runs thousands of
    /// nodes' logins and must not spend its time in the KDF.
    Cheap,
}

impl Kdf {
    fn argon2(self) -> argon2::Argon2<'static> {
        match self {
            Kdf::Recommended => argon2::Argon2::default(),
            Kdf::Cheap => {
                let params = argon2::Params::new(1024, 1, 1, None)
                    .expect("invariant: valid argon2 parameters");
                argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
            }
        }
    }
}

/// The hash of `password` under a fresh salt drawn from `entropy`.
pub fn hash(password: &str, entropy: &dyn Entropy) -> anyhow::Result<PasswordHash> {
    hash_with(Kdf::Recommended, password, entropy)
}

/// The hash of `password` at the cost `kdf` says.
pub fn hash_with(kdf: Kdf, password: &str, entropy: &dyn Entropy) -> anyhow::Result<PasswordHash> {
    let mut salt = [0u8; SALT_BYTES];
    entropy.fill(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    let hashed = kdf
        .argon2()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))?;
    PasswordHash::new(hashed.to_string()).map_err(anyhow::Error::msg)
}

/// Whether `password` matches `hash` (a hash that does not parse matches nothing).
pub fn verify(password: &str, hash: &PasswordHash) -> bool {
    let Ok(parsed) = argon2::password_hash::PasswordHash::new(hash.expose()) else {
        tracing::warn!("a stored password hash does not parse; the user cannot log in");
        return false;
    };
    argon2::Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::OsEntropy;

    #[test]
    fn a_password_verifies_against_its_hash_and_nothing_else_does() {
        let hashed = hash("correct horse battery", &OsEntropy).expect("hashed");
        assert!(hashed.expose().starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
        assert!(!hashed.expose().contains("correct horse"), "the hash holds no password");
        assert!(verify("correct horse battery", &hashed));
        assert!(!verify("correct horse batterY", &hashed));
        assert!(!verify("", &hashed));
        let again = hash("correct horse battery", &OsEntropy).expect("hashed");
        assert_ne!(again, hashed, "each hash has its own salt");
        let garbage = PasswordHash::new("not a phc string".into()).expect("non-empty");
        assert!(!verify("correct horse battery", &garbage));
    }

    #[test]
    fn a_cheap_hash_verifies_too_and_says_its_parameters() {
        let hashed = hash_with(Kdf::Cheap, "correct horse battery", &OsEntropy).expect("hashed");
        assert!(hashed.expose().starts_with("$argon2id$v=19$m=1024,t=1,p=1$"), "{hashed:?}");
        assert!(verify("correct horse battery", &hashed));
        assert!(!verify("wrong horse battery", &hashed));
    }

    #[test]
    fn password_lengths_are_bounded() {
        assert!(validate("short").is_err());
        assert!(validate("long enough").is_ok());
        assert!(validate(&"x".repeat(MAX_PASSWORD_BYTES + 1)).is_err());
    }
}
