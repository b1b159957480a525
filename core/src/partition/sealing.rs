//! Writing a partition log's seal files (`seal.rs`, docs/design.md §4.4): the sealed segment's
//! at each roll, the active segment's at clean shutdown (the clean-shutdown marker: the active
//! segment needs no scan), and, once the node serves, those of the segments start-up had to scan
//! (so the next start-up need not). Every write is create, write, sync, in the background: no
//! directory sync is needed (a missing or torn seal only means its segment is scanned), nothing
//! waits for it but a clean shutdown, and a failure is logged and forgotten.
//!
//! The three operations go out together: a write after a failed create can only leave bytes
//! that do not decode (a seal is refused unless it is exactly one whole, CRC-checked encoding).

use bytes::Bytes;

use super::seal::Seal;
use super::{LogState, PartIo, PartitionLog};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};

/// Operations of one seal write: create, write, sync.
const SEAL_OPS: u32 = 3;

impl PartitionLog {
    /// What the active segment's seal file says about it now.
    pub(super) fn active_summary(&self) -> Seal {
        Seal {
            base: self.base,
            end: self.high_watermark(),
            size: self.size,
            newest_ms: self.active_newest_ms,
            entries: self.index.entry_list().to_vec(),
            checkpoints: self.checkpoints.clone(),
            tail: self.active_origins.replayable(&self.checkpoints),
        }
    }

    /// Emits the write of `seal`'s file.
    pub(super) fn emit_seal(&mut self, seal: &Seal) {
        let file = FileId::PartitionSeal { key: self.key, base: seal.base };
        let io = PartIo::Seal { base: seal.base };
        let data = Bytes::from(seal.encode());
        self.outbox.push_back((io, DiskOp::Create { file }));
        self.outbox.push_back((io, DiskOp::Write { file, offset: 0, data }));
        self.outbox.push_back((io, DiskOp::Sync { file }));
        *self.seal_ios.entry(seal.base).or_default() += SEAL_OPS;
    }

    /// One operation of a seal write completed.
    pub(super) fn on_seal_io(&mut self, base: u64, result: Result<DiskDone, DiskError>) {
        let left =
            self.seal_ios.get_mut(&base).expect("invariant: a seal completion follows a seal op");
        *left -= 1;
        if *left == 0 {
            self.seal_ios.remove(&base);
        }
        if let Err(error) = result {
            tracing::warn!(partition = %self.key, base, %error, "writing a seal file failed; that segment is scanned at the next start-up");
        }
    }

    /// True if a seal write of the segment starting at `base` is in flight.
    pub(super) fn seal_in_flight(&self, base: u64) -> bool {
        self.seal_ios.contains_key(&base)
    }

    /// Seal file operations in flight.
    pub(super) fn seal_ios_in_flight(&self) -> u32 {
        self.seal_ios.values().sum()
    }

    /// At shutdown: the active segment exists, nothing is being written to it, and no seal of
    /// its current state was written (or adopted) yet.
    pub fn wants_shutdown_seal(&self) -> bool {
        matches!(self.state, LogState::Idle)
            && self.file_exists
            && self.active_seal != Some((self.base, self.size))
            && !self.seal_in_flight(self.base)
    }

    /// Writes the active segment's seal file if `wants_shutdown_seal` (once per state, whether
    /// or not the write succeeds, so a failing disk cannot hold a shutdown up).
    pub fn write_shutdown_seal(&mut self) {
        if self.wants_shutdown_seal() {
            self.active_seal = Some((self.base, self.size));
            let seal = self.active_summary();
            self.emit_seal(&seal);
        }
    }

    /// Writes the seals recovery held back (of the segments it scanned); called once the node
    /// serves, after the stale seal files start-up found were deleted.
    pub fn release_held_seals(&mut self) {
        for seal in std::mem::take(&mut self.held_seals) {
            self.emit_seal(&seal);
        }
    }

    /// Seal files start-up found and did not adopt, to delete before serving.
    pub fn take_stale_seals(&mut self) -> Vec<FileId> {
        let key = self.key;
        let stale = std::mem::take(&mut self.stale_seals);
        stale.into_iter().map(|base| FileId::PartitionSeal { key, base }).collect()
    }
}
