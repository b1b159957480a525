//! Topic name rules, checked when a create is applied (identically on every replica).

use crate::api::ClientError;
use crate::constants::MAX_TOPIC_NAME_BYTES;

/// Checks a topic name: `[A-Za-z0-9._-]{1,200}`, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<(), ClientError> {
    let charset_ok = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if name.is_empty() || name.len() > MAX_TOPIC_NAME_BYTES || !charset_ok {
        return Err(ClientError::BadRequest(format!(
            "invalid topic name {name:?}: use 1-{MAX_TOPIC_NAME_BYTES} characters from [A-Za-z0-9._-]"
        )));
    }
    if name == "." || name == ".." {
        return Err(ClientError::BadRequest(format!("invalid topic name {name:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn names_are_validated() {
        for bad in ["", ".", "..", "a/b", "sp ace", "é", &"x".repeat(201)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for good in ["a.b_c-D9", "..a", &"x".repeat(200)] {
            assert!(validate_name(good).is_ok(), "{good:?}");
        }
    }
}
