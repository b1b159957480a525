//! What happens to the disk when the process dies or the power goes, and the corruption-class
//! faults (misdirected writes, bit flips at rest) that may destroy the only copy of a record.
//! Each of those files a `Damage` report naming the frames it hit.

use narad_core::FileId;
use narad_core::codec;
use rand::RngExt;

use crate::disk::{Damage, FileClass, SECTOR_BYTES, SimDisk};
use crate::fault::FaultClass;

impl SimDisk {
    /// The process was killed: in-flight operations are gone, the page cache (every completed
    /// write, synced or not) survives.
    pub fn process_crash(&mut self) {
        self.busy_until.clear();
    }

    /// Power loss: each file keeps its durable content, plus (with torn writes on) a
    /// sector-aligned prefix of its unsynced writes in write order. Files whose directory entry
    /// was never made durable vanish.
    pub fn power_loss(&mut self) {
        self.busy_until.clear();
        let ids: Vec<FileId> = self.files.keys().copied().collect();
        for id in ids {
            if !self.files[&id].entry_durable {
                let file = self.files.remove(&id).expect("invariant: listed above");
                self.hits.hit(FaultClass::MissingDirFsync);
                if file.lied {
                    // A lying sync never made the entry durable either: the node loses bytes
                    // it was told were safe.
                    let bytes = file.data().to_vec();
                    self.damage.push(Damage { file: id, class: FaultClass::LyingFsync, bytes });
                }
                continue;
            }
            if self.files[&id].lied {
                let bytes = self.files[&id].unsynced_write_bytes();
                self.damage.push(Damage { file: id, class: FaultClass::LyingFsync, bytes });
            }
            if self.faults.torn_at_power_loss && self.files[&id].is_dirty() {
                self.tear(id);
            } else {
                self.file_mut(id).revert_unsynced();
            }
        }
    }

    fn tear(&mut self, id: FileId) {
        let changes = self.files[&id].unsynced_changes();
        let keep = self.rng.random_range(0..=changes);
        let cut = match self.files[&id].tear_points(keep) {
            Some((first, last)) if self.rng.random_bool(0.7) => {
                let sectors = (last - first) / SECTOR_BYTES + 1;
                Some(first + self.rng.random_range(0..sectors) * SECTOR_BYTES)
            }
            _ => None,
        };
        if keep > 0 || cut.is_some() {
            self.hits.hit(FaultClass::TornWrite);
        }
        let file = self.file_mut(id);
        file.lied = false;
        file.keep_prefix(keep, cut);
    }

    /// A write that lands `sectors` sectors away from `offset` (reports success). The intended
    /// records never reach their place, and whatever the wrong place held is overwritten.
    pub(crate) fn write_misdirected(
        &mut self,
        file: FileId,
        offset: u64,
        data: &[u8],
        sectors: i64,
    ) {
        self.hits.hit(FaultClass::MisdirectedWrite);
        let shift = sectors.unsigned_abs() * SECTOR_BYTES;
        let target = if sectors < 0 && offset >= shift { offset - shift } else { offset + shift };
        let f = self.file_mut(file);
        let mut bytes = data.to_vec();
        bytes.extend(frames_overlapping(f.data(), target, target + data.len() as u64));
        f.write(target, data);
        self.damage.push(Damage { file, class: FaultClass::MisdirectedWrite, bytes });
    }

    /// Flips one bit at rest in a random non-empty record file (or seal file). Returns false if
    /// there is none.
    pub fn bit_flip_at_rest(&mut self) -> bool {
        let candidates: Vec<FileId> = self
            .files
            .iter()
            .filter(|(id, f)| FileClass::of(id).corruptible() && !f.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if candidates.is_empty() {
            return false;
        }
        let id = candidates[self.rng.random_range(0..candidates.len())];
        let len = self.files[&id].len();
        let byte = self.rng.random_range(0..len);
        let bit = self.rng.random_range(0..8u8);
        let bytes = frames_overlapping(self.files[&id].data(), byte, byte + 1);
        self.file_mut(id).flip_bit(byte, bit);
        self.hits.hit(FaultClass::BitFlip);
        self.damage.push(Damage { file: id, class: FaultClass::BitFlip, bytes });
        true
    }
}

/// The bytes of every valid frame of `data` that overlaps `lo..hi`, plus the raw bytes of the
/// range itself where it lies past the last valid frame.
pub(crate) fn frames_overlapping(data: &[u8], lo: u64, hi: u64) -> Vec<u8> {
    let (lo, hi) = (lo as usize, hi.min(data.len() as u64) as usize);
    let mut out = Vec::new();
    // Follow the frames' own length fields, valid CRC or not: an earlier fault may already have
    // damaged a frame before the one hit now, and the hit frame must still be attributed.
    let mut pos = 0;
    while pos + codec::FRAME_HEADER_BYTES <= data.len() && pos < hi {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let end = pos + codec::FRAME_HEADER_BYTES + len;
        if len == 0 || len > codec::MAX_FRAME_BODY_BYTES || end > data.len() {
            break; // no frame structure from here on: report the rest below
        }
        if end > lo {
            out.extend_from_slice(&data[pos..end]);
        }
        pos = end;
    }
    if pos < hi {
        // A damaged length field, a torn tail or zero fill: everything from here to the hit may
        // hold the records it cost.
        out.extend_from_slice(&data[pos.min(lo)..data.len()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component_rng;
    use crate::rng::Component;
    use bytes::Bytes;
    use narad_core::{DiskDone, DiskOp};

    fn disk() -> SimDisk {
        SimDisk::new(component_rng(1, Component::Disk(1)))
    }

    fn run(disk: &mut SimDisk, op: DiskOp) {
        assert_eq!(disk.complete(&op), Ok(DiskDone::Done));
    }

    #[test]
    fn power_loss_drops_unsynced_and_process_crash_keeps_it() {
        let mut d = disk();
        let f = FileId::MetaRaftLog;
        run(&mut d, DiskOp::Create { file: f });
        run(&mut d, DiskOp::Write { file: f, offset: 0, data: Bytes::from_static(b"abc") });
        run(&mut d, DiskOp::Sync { file: f });
        run(&mut d, DiskOp::Write { file: f, offset: 3, data: Bytes::from_static(b"def") });
        d.process_crash();
        assert_eq!(d.snapshot()[&f].as_ref(), b"abcdef");
        d.power_loss();
        assert_eq!(d.snapshot()[&f].as_ref(), b"abc");
    }

    #[test]
    fn missing_dir_fsync_makes_an_unsynced_new_file_vanish() {
        let mut d = disk();
        d.faults.missing_dir_fsync = true;
        run(&mut d, DiskOp::Create { file: FileId::MetaRaftLog });
        run(&mut d, DiskOp::Create { file: FileId::WalCheckpoint });
        run(&mut d, DiskOp::Sync { file: FileId::WalCheckpoint });
        d.power_loss();
        assert!(d.file(&FileId::MetaRaftLog).is_none());
        assert!(d.file(&FileId::WalCheckpoint).is_some());
        assert_eq!(d.hits.get(FaultClass::MissingDirFsync), 1);
    }

    #[test]
    fn frames_overlapping_finds_the_hit_frame() {
        let mut data = Vec::new();
        codec::put_frame(&mut data, b"first");
        codec::put_frame(&mut data, b"second");
        let second = frames_overlapping(&data, 14, 15);
        assert!(second.ends_with(b"second"));
        assert!(!second.windows(5).any(|w| w == b"first"));
        data[9] ^= 1; // the first frame's body is damaged already: the second is still found
        let again = frames_overlapping(&data, 14, 15);
        assert!(again.ends_with(b"second") && !again.windows(5).any(|w| w == b"first"));
    }
}
