//! What start-up recovery reports when the files it was handed hold damage it must not repair
//! silently. A leaf module: the WAL, partition and metastore recoveries all return it, and the
//! node passes it on, so it sits below all of them.

/// Recovery found damage it must not repair silently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    #[error(
        "{file}: corrupt frame at byte {bad_pos} followed by valid data at byte {next_valid_pos}; \
         refusing to truncate acknowledged records"
    )]
    CorruptLog { file: String, bad_pos: u64, next_valid_pos: u64 },
    #[error("{file}: {what}")]
    Inconsistent { file: String, what: String },
}
