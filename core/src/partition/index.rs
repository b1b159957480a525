//! The in-memory offset index of one partition log segment (offsets are the log's, positions
//! the segment file's). It keeps one entry (offset, byte position) per
//! interval of log (`PARTITION_INDEX_INTERVAL_BYTES`, 64 KiB), not one per record: a partition taking 60,000 records of 256
//! bytes a second for an hour holds 216 M records, 1.7 GiB of positions at 8 bytes a record, but
//! about 1 MiB of entries this way. A read starts at the entry at or before the wanted offset and
//! skips the frames before it, so it reads at most one interval (plus one frame) more than it
//! returns.
//!
//! Reads are planned on entry boundaries: every entry sits at a frame start, and the log's
//! committed size is a frame end, so a planned byte range always holds whole frames only, and a
//! frame that does not decode inside it is damage, never a cut.

/// A frame start: the record at `offset` begins at byte `pos`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub pos: u64,
}

/// Sparse offset → position index; also counts the records (the high watermark).
#[derive(Debug, PartialEq, Eq)]
pub struct SparseIndex {
    entries: Vec<IndexEntry>,
    records: u64,
    /// Bytes of log after which the next frame start gets an entry.
    interval: u64,
}

/// The whole-frame byte range to read for some records from an offset (see `SparseIndex::span`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The first frame of the range (at or before the wanted offset).
    pub start: IndexEntry,
    /// Byte after the range: an entry's position or the log's committed size.
    pub end: u64,
}

impl SparseIndex {
    /// An empty index with an entry per `interval` bytes of log (at least 1).
    pub fn new(interval: u64) -> SparseIndex {
        SparseIndex::starting_at(0, interval)
    }

    /// An empty index of a segment whose first record will be offset `base`.
    pub fn starting_at(base: u64, interval: u64) -> SparseIndex {
        SparseIndex { entries: Vec::new(), records: base, interval: interval.max(1) }
    }

    /// The index of a segment as its seal file recorded it: `entries` (checked by the seal's
    /// decoder: the first at the segment's first record, increasing) and `records`, the offset
    /// after its last record.
    pub fn from_entries(entries: Vec<IndexEntry>, records: u64, interval: u64) -> SparseIndex {
        SparseIndex { entries, records, interval: interval.max(1) }
    }

    /// The entries, oldest first (what a seal file records).
    pub fn entry_list(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// Bytes of log between two entries.
    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// The offset after the last record indexed (the next offset).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Entries held (what the index costs: 16 bytes each).
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// The next record (offset `records()`) starts at byte `pos`.
    pub fn push(&mut self, pos: u64) {
        let due = self.entries.last().is_none_or(|last| pos >= last.pos + self.interval);
        if due {
            self.entries.push(IndexEntry { offset: self.records, pos });
        }
        self.records += 1;
    }

    /// The byte range holding the records from `offset` (below `records()`) in a log of
    /// `size` committed bytes: it starts at the entry at or before `offset` and ends at an entry
    /// (or `size`) past the first wanted record, then goes on entry by entry while the range holds
    /// fewer than `max` wanted records and stays within `max_bytes` past the first entry after
    /// the start. The caller decodes it and applies `max` and `max_bytes` exactly.
    pub fn span(&self, offset: u64, max: u64, max_bytes: u64, size: u64) -> Span {
        debug_assert!(offset < self.records, "offset {offset} not below {}", self.records);
        let at = self.entries.partition_point(|e| e.offset <= offset) - 1;
        let start = self.entries[at];
        let wanted_end = offset.saturating_add(max);
        let mut next = at + 1;
        let Some(first_boundary) = self.entries.get(next) else {
            return Span { start, end: size };
        };
        let limit = first_boundary.pos.saturating_add(max_bytes);
        while let Some(entry) = self.entries.get(next) {
            let covers_wanted = entry.offset >= wanted_end;
            let beyond_first = next > at + 1;
            if covers_wanted || (beyond_first && entry.pos > limit) {
                return Span { start, end: entry.pos };
            }
            next += 1;
        }
        // Past the last entry: the tail if it fits the limit, else up to the last entry (which is
        // at or after `first_boundary`, so the first wanted record is still whole).
        let end = if size > limit { self.entries[next - 1].pos } else { size };
        Span { start, end }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: u64 = crate::constants::PARTITION_INDEX_INTERVAL_BYTES;

    /// An index over `count` records of `len` bytes each, and the log's size.
    fn uniform(count: u64, len: u64) -> (SparseIndex, u64) {
        let mut index = SparseIndex::new(INTERVAL);
        for i in 0..count {
            index.push(i * len);
        }
        (index, count * len)
    }

    #[test]
    fn one_entry_per_interval_not_per_record() {
        let (index, _) = uniform(100_000, 300);
        assert_eq!(index.records(), 100_000);
        let per_entry = INTERVAL.div_ceil(300);
        assert_eq!(index.entries() as u64, 100_000u64.div_ceil(per_entry));
    }

    #[test]
    fn large_records_get_an_entry_each() {
        let (index, _) = uniform(10, INTERVAL * 2);
        assert_eq!(index.entries(), 10);
    }

    #[test]
    fn spans_cover_the_wanted_records_on_frame_boundaries() {
        let len = 300;
        let (index, size) = uniform(10_000, len);
        for offset in [0, 1, 217, 218, 5_000, 9_999] {
            for max in [1, 10, 1_000] {
                let span = index.span(offset, max, 1 << 20, size);
                assert!(span.start.offset <= offset && span.start.pos == span.start.offset * len);
                assert_eq!(span.end % len, 0, "ends on a frame boundary");
                let first_wanted_end = (offset + 1) * len;
                assert!(span.end >= first_wanted_end, "holds the first wanted record");
                let holds = (span.end / len).min(offset + max);
                assert!(holds == offset + max || span.end == size, "{offset} {max}: {span:?}");
                let skipped = (offset - span.start.offset) * len;
                assert!(skipped < INTERVAL + len, "reads at most an interval early");
            }
        }
    }

    #[test]
    fn spans_stop_near_max_bytes() {
        let len = 300;
        let (index, size) = uniform(100_000, len);
        let span = index.span(10, 100_000, 1 << 20, size);
        let read = span.end - span.start.pos;
        assert!(read >= 1 << 20, "{read}");
        assert!(read <= (1 << 20) + 2 * INTERVAL + len, "{read}");
    }

    #[test]
    fn the_tail_after_the_last_entry_reads_to_the_end() {
        let (index, size) = uniform(10, 300);
        assert_eq!(
            index.span(9, 1, 1 << 20, size),
            Span { start: IndexEntry { offset: 0, pos: 0 }, end: size }
        );
    }
}
