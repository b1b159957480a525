//! Start-up: rebuilds Raft's storage and the state machine from the bytes of the two metastore
//! files, and decides which repairs the first disk operations must make.
//!
//! The newest valid snapshot record is the base. The log continues it only if its header names
//! that record; a log naming an older record is stale (we crashed between making a snapshot
//! durable and resetting the log, and the snapshot holds everything the log did), and a log
//! naming a newer record means that record was damaged: a loud error, never a silent rollback of
//! state this node may have acknowledged.

use bytes::Bytes;
use raft::eraftpb::{ConfState, Snapshot};

use crate::ids::NodeId;
use crate::io::FileId;
use crate::recovery_error::RecoveryError;

use super::persist::{LogRepair, Persister};
use super::state::MetaState;
use super::storage::{
    LogFrame, LogStore, SnapRecord, merge_hard_state, newest_snap_record, scan_log,
};

/// Everything recovery rebuilt.
pub struct Recovered {
    pub store: LogStore,
    /// The state machine at the snapshot index (committed entries after it are re-applied).
    pub state: MetaState,
    pub snapshot_seq: u64,
    pub persister: Persister,
}

/// Rebuilds from the files' bytes (`None`: the file does not exist).
pub fn recover(
    voters: &[NodeId],
    raft_log: Option<&Bytes>,
    snapshot: Option<&Bytes>,
) -> Result<Recovered, RecoveryError> {
    let newest = snapshot.and_then(|bytes| newest_snap_record(bytes));
    let (mut store, state, seq, slot) = match newest {
        Some((record, slot)) => {
            let seq = record.seq;
            let (store, state) = from_record(record)?;
            (store, state, seq, Some(slot))
        }
        None => {
            let conf_state = ConfState {
                voters: voters.iter().map(|v| u64::from(v.0)).collect(),
                ..ConfState::default()
            };
            (LogStore::new(conf_state), MetaState::new(), 0, None)
        }
    };
    let repair = match raft_log {
        None => LogRepair::Reset { create: true, base_seq: seq },
        Some(bytes) => replay_log(&mut store, bytes, seq)?,
    };
    let mut hs = store.hard_state().clone();
    hs.commit = hs.commit.max(store.snapshot_index());
    if hs.commit > store.last() {
        return Err(inconsistent(
            FileId::MetaRaftLog,
            format!("commit index {} beyond the last entry {}", hs.commit, store.last()),
        ));
    }
    store.set_hard_state(hs);
    let persister = Persister::new(repair, snapshot.map(|b| b.len() as u64), slot);
    Ok(Recovered { store, state, snapshot_seq: seq, persister })
}

fn from_record(record: SnapRecord) -> Result<(LogStore, MetaState), RecoveryError> {
    let state = MetaState::decode(&record.image)
        .ok_or_else(|| inconsistent(FileId::MetaSnapshot, "undecodable state image".to_string()))?;
    let mut snapshot = Snapshot::default();
    snapshot.set_metadata(record.metadata.clone());
    snapshot.set_data(record.image);
    let mut store = LogStore::new(record.metadata.get_conf_state().clone());
    store.install_snapshot(snapshot);
    let mut hs = store.hard_state().clone();
    merge_hard_state(&mut hs, &record.hard_state);
    store.set_hard_state(hs);
    store.append(&record.entries).map_err(|what| inconsistent(FileId::MetaSnapshot, what))?;
    Ok((store, state))
}

fn replay_log(store: &mut LogStore, bytes: &Bytes, seq: u64) -> Result<LogRepair, RecoveryError> {
    let scan = scan_log(bytes)?;
    let base = match scan.base_seq {
        None => {
            return Ok(LogRepair::Reset { create: false, base_seq: seq });
        }
        Some(base) => base,
    };
    if base < seq {
        tracing::info!(base, seq, "metastore log predates the newest snapshot; resetting it");
        return Ok(LogRepair::Reset { create: false, base_seq: seq });
    }
    if base > seq {
        return Err(inconsistent(
            FileId::MetaRaftLog,
            format!("the log continues snapshot #{base}, but the newest valid snapshot is #{seq}"),
        ));
    }
    for frame in &scan.frames[1..] {
        match frame {
            LogFrame::Header { .. } => {
                return Err(inconsistent(FileId::MetaRaftLog, "a second header".into()));
            }
            LogFrame::Entry(entry) => store
                .append(std::slice::from_ref(entry))
                .map_err(|what| inconsistent(FileId::MetaRaftLog, what))?,
            LogFrame::HardState(hs) => {
                let mut merged = store.hard_state().clone();
                merge_hard_state(&mut merged, hs);
                store.set_hard_state(merged);
            }
        }
    }
    Ok(if scan.valid_len < scan.file_len {
        LogRepair::Truncate { len: scan.valid_len }
    } else {
        LogRepair::None { len: scan.file_len }
    })
}

fn inconsistent(file: FileId, what: String) -> RecoveryError {
    RecoveryError::Inconsistent { file: file.relative_path(), what }
}
