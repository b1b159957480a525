//! The bounds of a topic's retention settings, in one place for the proposer (a bad value is
//! answered 400 before anything reaches the Raft log) and for apply time (every replica checks a
//! committed command again, so a faulty peer's proposal cannot corrupt the state).
//!
//! Two sets of rules exist on purpose. What a client may ask for today (`validate_requested`,
//! `validate_change`): `retention_ms` 0 (forever) or 1 s to 2^53 - 1, `retention_bytes` 4 MiB to
//! 2^53 - 1. What a create's apply accepts (`validate_retention`, `validate_bytes`): the bounds
//! every earlier build applied too, so a Raft log written by an earlier build (whose creates could
//! carry, say, `retention_ms: 5`) replays to the same state on every replica of a mixed cluster.

use crate::api::{ClientError, TopicChange};
use crate::constants::{
    MAX_RETENTION_BYTES, MAX_RETENTION_MS, MIN_RETENTION_BYTES, MIN_RETENTION_MS,
};

/// Refuses a `retention_ms` past `MAX_RETENTION_MS` (the apply-time rule of a create). The
/// encodings reserve `u64::MAX` for "none", so a larger value must never reach the log.
pub fn validate_retention(retention_ms: Option<u64>) -> Result<(), ClientError> {
    match retention_ms {
        Some(ms) if ms > MAX_RETENTION_MS => Err(ClientError::BadRequest(format!(
            "retention_ms must be at most {MAX_RETENTION_MS}, got {ms}"
        ))),
        _ => Ok(()),
    }
}

/// Refuses a `retention_bytes` outside `MIN_RETENTION_BYTES..=MAX_RETENTION_BYTES` (no earlier
/// build knew the field, so its apply-time rule is the request rule).
pub fn validate_bytes(retention_bytes: Option<u64>) -> Result<(), ClientError> {
    match retention_bytes {
        Some(b) if !(MIN_RETENTION_BYTES..=MAX_RETENTION_BYTES).contains(&b) => {
            Err(ClientError::BadRequest(format!(
                "retention_bytes must be between {MIN_RETENTION_BYTES} and {MAX_RETENTION_BYTES} \
                 (or absent: no size limit), got {b}"
            )))
        }
        _ => Ok(()),
    }
}

/// The rules for retention values a client asks for now (a create, an update).
pub fn validate_requested(
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
) -> Result<(), ClientError> {
    match retention_ms {
        Some(ms) if ms != 0 && !(MIN_RETENTION_MS..=MAX_RETENTION_MS).contains(&ms) => {
            return Err(ClientError::BadRequest(format!(
                "retention_ms must be 0 (keep forever) or between {MIN_RETENTION_MS} and \
                 {MAX_RETENTION_MS}, got {ms}"
            )));
        }
        _ => {}
    }
    validate_bytes(retention_bytes)
}

/// An update must change something, and with values a client may ask for.
pub fn validate_change(change: &TopicChange) -> Result<(), ClientError> {
    if change.is_empty() {
        return Err(ClientError::BadRequest(
            "nothing to change: give retention_ms and/or retention_bytes".into(),
        ));
    }
    validate_requested(change.retention_ms, change.retention_bytes.flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_values_obey_the_documented_bounds() {
        let ok = |ms, bytes| validate_requested(ms, bytes).is_ok();
        assert!(ok(None, None));
        assert!(ok(Some(0), None), "0 keeps records forever");
        assert!(ok(Some(MIN_RETENTION_MS), Some(MIN_RETENTION_BYTES)));
        assert!(ok(Some(MAX_RETENTION_MS), Some(MAX_RETENTION_BYTES)));
        for ms in [1, MIN_RETENTION_MS - 1, MAX_RETENTION_MS + 1, u64::MAX] {
            assert!(!ok(Some(ms), None), "retention_ms {ms}");
        }
        for bytes in [0, 1, MIN_RETENTION_BYTES - 1, MAX_RETENTION_BYTES + 1, u64::MAX] {
            assert!(!ok(None, Some(bytes)), "retention_bytes {bytes}");
        }
    }

    #[test]
    fn an_empty_change_is_refused_and_clearing_the_size_limit_is_a_change() {
        assert!(validate_change(&TopicChange::default()).is_err());
        let clear = TopicChange { retention_ms: None, retention_bytes: Some(None) };
        assert!(validate_change(&clear).is_ok());
        let bad = TopicChange { retention_ms: Some(999), retention_bytes: None };
        assert!(validate_change(&bad).is_err());
    }

    #[test]
    fn the_apply_rule_of_a_create_keeps_what_earlier_builds_accepted() {
        assert!(validate_retention(Some(5)).is_ok(), "an earlier build's create replays");
        assert!(validate_retention(Some(MAX_RETENTION_MS + 1)).is_err());
    }
}
