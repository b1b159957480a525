//! Cheap self-checks of one partition log for `Node::check_invariants_deep` (the simulator's
//! host runs the deep variant every few inputs): the high watermark stays within the committed
//! bytes, the index points inside them, and the commit or repair in progress is consistent with
//! the file's state.

use super::{LogState, PartitionLog, Stage};
use crate::codec::FRAME_HEADER_BYTES;

/// Disk operations of one partition log handed out and not yet completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartOutstanding {
    pub commit: u32,
    pub repair: u32,
    /// A retention delete.
    pub trim: u32,
    /// Seal file operations.
    pub seal: u32,
    /// Commit parts (jobs) the commit in progress will decide.
    pub parts: usize,
}

impl PartitionLog {
    /// What this log waits for.
    pub fn outstanding(&self) -> PartOutstanding {
        let (trim, seal) = (self.trims_in_flight(), self.seal_ios_in_flight());
        let busy = match &self.state {
            LogState::Committing(commit) => PartOutstanding {
                commit: commit.ios_left,
                parts: commit.parts.len(),
                ..PartOutstanding::default()
            },
            LogState::Repairing { ios_left, .. } => {
                PartOutstanding { repair: *ios_left, ..PartOutstanding::default() }
            }
            LogState::Idle | LogState::Poisoned => PartOutstanding::default(),
        };
        PartOutstanding { trim, seal, ..busy }
    }

    /// Every visible record is a whole frame of the committed bytes (so the watermark never
    /// passes the durable end), the last one starts inside them, and a file is being written only
    /// once it exists.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (key, hw, size) = (self.key, self.high_watermark(), self.size);
        let records = hw - self.base;
        if records.saturating_mul(FRAME_HEADER_BYTES as u64) > size || (records == 0) != (size == 0)
        {
            return Err(format!("partition {key}: watermark {hw} beyond {size} committed bytes"));
        }
        if records > 0 {
            let last = self.index.span(hw - 1, 1, u64::MAX, size);
            if last.start.offset >= hw || last.start.pos >= size || last.end > size {
                return Err(format!("partition {key}: index {last:?} outside {size} bytes"));
            }
        }
        if records > 0 && !self.file_exists {
            return Err(format!("partition {key}: {hw} records but no file"));
        }
        self.check_segments()?;
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

    /// Sealed segments are non-empty and dense: each ends where the next (or the active one)
    /// starts.
    fn check_segments(&self) -> Result<(), String> {
        let key = self.key;
        let mut next = None;
        for (&base, segment) in self.sealed.iter().rev() {
            let end = segment.index.records();
            if end <= base || segment.size == 0 || end != next.unwrap_or(self.base) {
                return Err(format!("partition {key}: sealed segment {base}..{end} out of place"));
            }
            next = Some(base);
        }
        Ok(())
    }
}
