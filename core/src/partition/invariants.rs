//! Cheap self-checks of one partition log for `Node::check_invariants` (run by the simulator
//! after every step): the high watermark stays within the committed bytes, the index points
//! inside them, and the commit or repair in progress is consistent with the file's state.

use super::{LogState, PartitionLog, Stage};
use crate::codec::FRAME_HEADER_BYTES;

/// Disk operations of one partition log handed out and not yet completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartOutstanding {
    pub commit: u32,
    pub repair: u32,
    /// Commit parts (jobs) the commit in progress will decide.
    pub parts: usize,
}

impl PartitionLog {
    /// What this log waits for.
    pub fn outstanding(&self) -> PartOutstanding {
        match &self.state {
            LogState::Committing(commit) => PartOutstanding {
                commit: commit.ios_left,
                parts: commit.parts.len(),
                ..PartOutstanding::default()
            },
            LogState::Repairing { ios_left, .. } => {
                PartOutstanding { repair: *ios_left, ..PartOutstanding::default() }
            }
            LogState::Idle | LogState::Poisoned => PartOutstanding::default(),
        }
    }

    /// Every visible record is a whole frame of the committed bytes (so the watermark never
    /// passes the durable end), the last one starts inside them, and a file is being written only
    /// once it exists.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (key, hw, size) = (self.key, self.high_watermark(), self.size);
        if hw.saturating_mul(FRAME_HEADER_BYTES as u64) > size || (hw == 0) != (size == 0) {
            return Err(format!("partition {key}: watermark {hw} beyond {size} committed bytes"));
        }
        if hw > 0 {
            let last = self.index.span(hw - 1, 1, u64::MAX, size);
            if last.start.offset >= hw || last.start.pos >= size || last.end > size {
                return Err(format!("partition {key}: index {last:?} outside {size} bytes"));
            }
        }
        if hw > 0 && !self.file_exists {
            return Err(format!("partition {key}: {hw} records but no file"));
        }
        match &self.state {
            LogState::Committing(commit) => {
                let creating = matches!(commit.stage, Stage::Creating);
                if creating == self.file_exists || commit.ios_left == 0 || commit.parts.is_empty() {
                    return Err(format!("partition {key}: commit stage and file disagree"));
                }
            }
            LogState::Repairing { ios_left: 0, .. } => {
                return Err(format!("partition {key}: repair with nothing outstanding"));
            }
            _ => {}
        }
        Ok(())
    }
}
