//! One simulated file: its current bytes plus an undo log of every change not yet made durable.
//! The durable content is the current content with the undo log rolled back, so an fsync is
//! O(1) (drop the log) instead of a copy of the file, and a power loss rolls the log back —
//! completely, or keeping a sector-aligned prefix of the unsynced writes (a torn write).

/// Sector size: the unit a disk writes atomically.
pub const SECTOR_BYTES: u64 = 512;

/// How to undo one unsynced change.
#[derive(Clone, Debug)]
enum Undo {
    /// A write of `len` bytes at `offset`; `old` held the bytes it overwrote.
    Write { offset: u64, len: u64, old_len: u64, old: Vec<u8> },
    /// A length change; `removed` held the bytes a shrink cut off.
    Truncate { old_len: u64, removed: Vec<u8> },
}

/// A file of the simulated disk.
#[derive(Clone, Debug, Default)]
pub struct SimFile {
    data: Vec<u8>,
    undo: Vec<Undo>,
    /// False while the file's directory entry is not durable (missing-directory-fsync fault).
    pub entry_durable: bool,
    /// A sync lied since the last honest one: the node believes more is durable than is.
    pub lied: bool,
}

impl SimFile {
    /// A new empty file.
    pub fn new(entry_durable: bool) -> SimFile {
        SimFile { data: Vec::new(), undo: Vec::new(), entry_durable, lied: false }
    }

    /// A file whose whole content is durable (e.g. loaded from a snapshot).
    pub fn durable(data: Vec<u8>) -> SimFile {
        SimFile { data, undo: Vec::new(), entry_durable: true, lied: false }
    }

    /// Current length (what the running process sees).
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// True when the file is empty.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The current content.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// True when some change is not durable yet.
    pub fn is_dirty(&self) -> bool {
        !self.undo.is_empty()
    }

    /// Writes `bytes` at `offset`, zero-filling any gap past the end. Not durable until `sync`.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let old_len = self.len();
        let end = offset + bytes.len() as u64;
        let overlap_end = end.min(old_len);
        let old = if offset < overlap_end {
            self.data[offset as usize..overlap_end as usize].to_vec()
        } else {
            Vec::new()
        };
        self.undo.push(Undo::Write { offset, len: bytes.len() as u64, old_len, old });
        self.write_raw(offset, bytes);
    }

    fn write_raw(&mut self, offset: u64, bytes: &[u8]) {
        let end = offset as usize + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[offset as usize..end].copy_from_slice(bytes);
    }

    /// Sets the length. Not durable until `sync`.
    pub fn truncate(&mut self, len: u64) {
        let old_len = self.len();
        let removed = if len < old_len { self.data[len as usize..].to_vec() } else { Vec::new() };
        self.undo.push(Undo::Truncate { old_len, removed });
        self.data.resize(len as usize, 0);
    }

    /// Makes every change durable.
    pub fn sync(&mut self) {
        self.undo.clear();
        self.entry_durable = true;
        self.lied = false;
    }

    /// Flips one bit of the current content in place (damage at rest).
    pub fn flip_bit(&mut self, byte: u64, bit: u8) {
        self.data[byte as usize] ^= 1 << (bit % 8);
    }

    /// Bytes the unsynced writes put in place (their current content), oldest first.
    pub fn unsynced_write_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for undo in &self.undo {
            if let Undo::Write { offset, len, .. } = undo {
                let lo = (*offset as usize).min(self.data.len());
                let hi = ((offset + len) as usize).min(self.data.len());
                out.extend_from_slice(&self.data[lo..hi]);
            }
        }
        out
    }

    /// The durable content: what a power loss now would leave (the current content with every
    /// unsynced change rolled back).
    pub fn durable_data(&self) -> Vec<u8> {
        let mut copy = self.clone();
        copy.revert_unsynced();
        copy.data
    }

    /// Drops every unsynced change: the content reverts to the durable content.
    pub fn revert_unsynced(&mut self) {
        while let Some(undo) = self.undo.pop() {
            self.apply_undo(undo);
        }
        self.lied = false;
    }

    /// Power loss with a torn write: changes before `keep_changes` survive, the change at that
    /// index survives up to sector boundary `cut` (an absolute file offset; `None` = not at all),
    /// later ones are lost. Everything left is durable afterwards.
    pub fn keep_prefix(&mut self, keep_changes: usize, cut: Option<u64>) {
        let mut partial: Option<(u64, Vec<u8>)> = None;
        if let (Some(cut), Some(Undo::Write { offset, .. })) = (cut, self.undo.get(keep_changes)) {
            let offset = *offset;
            if cut > offset && cut <= self.len() {
                partial = Some((offset, self.data[offset as usize..cut as usize].to_vec()));
            }
        }
        while self.undo.len() > keep_changes {
            let undo = self.undo.pop().expect("invariant: length checked");
            self.apply_undo(undo);
        }
        if let Some((offset, bytes)) = partial {
            self.write_raw(offset, &bytes);
        }
        self.sync();
    }

    /// Number of unsynced changes (for choosing a tear point).
    pub fn unsynced_changes(&self) -> usize {
        self.undo.len()
    }

    /// Sector boundaries strictly inside unsynced change `index`, if it is a write.
    pub fn tear_points(&self, index: usize) -> Option<(u64, u64)> {
        match self.undo.get(index)? {
            Undo::Write { offset, len, .. } => {
                let first = (offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
                let last = (offset + len).saturating_sub(1) / SECTOR_BYTES * SECTOR_BYTES;
                (first <= last).then_some((first, last))
            }
            Undo::Truncate { .. } => None,
        }
    }

    fn apply_undo(&mut self, undo: Undo) {
        match undo {
            Undo::Write { offset, old_len, old, .. } => {
                let lo = offset as usize;
                self.data[lo..lo + old.len()].copy_from_slice(&old);
                self.data.truncate(old_len as usize);
            }
            Undo::Truncate { old_len, removed } => {
                self.data.truncate(old_len as usize);
                self.data.extend_from_slice(&removed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revert_restores_the_durable_content() {
        let mut f = SimFile::durable(b"hello world".to_vec());
        f.write(6, b"there, friend");
        f.truncate(3);
        f.write(10, b"x");
        assert_eq!(f.len(), 11);
        f.revert_unsynced();
        assert_eq!(f.data(), b"hello world");
        assert!(!f.is_dirty());
    }

    #[test]
    fn sync_makes_changes_durable() {
        let mut f = SimFile::new(false);
        f.write(0, b"abc");
        f.sync();
        f.write(3, b"def");
        f.revert_unsynced();
        assert_eq!(f.data(), b"abc");
        assert!(f.entry_durable);
    }

    #[test]
    fn torn_write_keeps_a_sector_prefix() {
        let mut f = SimFile::durable(vec![1; 100]);
        f.write(100, &[2; 1000]);
        f.write(1100, &[3; 10]);
        let (first, last) = f.tear_points(0).expect("spans sectors");
        assert_eq!((first, last), (512, 1024));
        f.keep_prefix(0, Some(512));
        assert_eq!(f.len(), 512);
        assert!(f.data()[100..].iter().all(|&b| b == 2));
        assert!(!f.is_dirty());
    }

    #[test]
    fn keep_prefix_keeps_whole_earlier_changes() {
        let mut f = SimFile::default();
        f.write(0, b"aaaa");
        f.write(4, b"bbbb");
        f.write(8, b"cccc");
        f.keep_prefix(2, None);
        assert_eq!(f.data(), b"aaaabbbb");
    }
}
