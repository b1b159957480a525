//! What waits for the next group commit, and which of it the next group commit takes.
//!
//! Why not simply everything staged: a group commit is one write and one fsync, and a caller waits
//! for the whole of it. Under a flood of 16 MiB batches, a one-record produce staged behind three
//! of them would wait for 48 MiB to reach the disk, then for the group after it. So requests wait
//! in two lanes:
//! - **small** requests (encoded size at most `small_request_bytes`) all join the next group, in
//!   the order they came, each whole;
//! - **bulk** requests join it after them, in the order they came, while the group's bulk bytes
//!   are below its bulk budget (at least one piece), unless small requests are waiting and the
//!   group before took bulk ones: then the group is small requests only. Bulk groups alternate
//!   with small ones, so bulk never starves and takes about half the groups under a mix.
//! - A bulk request larger than a **chunk** (`group_bulk_bytes / BULK_CHUNKS_PER_GROUP`) is cut
//!   into chunks of whole records, each at most that size (a record larger than it is a chunk of
//!   its own), queued one after the other in the bulk lane: a 16 MiB batch is sixty-four 256 KiB
//!   pieces with small groups between them, not one 16 MiB write that every small produce
//!   arriving meanwhile waits for. Only the last chunk carries the request's waiter, and the WAL
//!   marks the request's records so that it applies all or nothing (`Wal::start_batch`,
//!   `Chunk`). The lane is FIFO, so at most one chunked request is open (partly written) at a
//!   time.
//! - The **bulk budget** adapts to who is writing. While small requests are about (one was
//!   taken in the last `SMALL_RECENT_GROUPS` groups) it is one chunk, so a small produce waits
//!   behind at most about 1 ms of bulk writing. While only bulk requests write, it is
//!   `group_bulk_bytes`: four chunks share one write and one fsync, and bulk throughput does
//!   not pay for the small chunks (measured in docs/design.md §7).
//!
//! The bulk lane is bounded too: a bulk request is refused (the node answers 503) while more
//! than `BULK_STAGED_GROUPS` groups' worth of bulk bytes wait, so a flood of large batches
//! queues at its clients, not in the WAL ahead of everyone.
//!
//! A small produce therefore waits for at most the group in flight (one bulk chunk if small
//! requests were about, `group_bulk_bytes` if not) and its own group, which holds no bulk if the
//! one before did.
//! Sequence numbers are given when a group starts, so the WAL's order is the order groups were
//! written in; produces that were in flight together have no order between them (a client that
//! waits for its 202 before the next produce keeps its order).

use std::collections::VecDeque;

use super::Draft;

/// Bulk bytes may wait for this many groups' bulk bound (`group_bulk_bytes`), at least one
/// request: sixteen 1 MiB groups, one 16 MiB batch, in production.
pub(super) const BULK_STAGED_GROUPS: u64 = 16;

/// A chunk of a bulk request is at most `group_bulk_bytes` divided by this (at least one byte).
pub(super) const BULK_CHUNKS_PER_GROUP: u64 = 4;

/// A group's bulk budget stays one chunk for this many groups after one took a small request.
pub(super) const SMALL_RECENT_GROUPS: u32 = 8;

/// What a staged piece is of its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Piece {
    /// The whole request.
    Whole,
    /// One chunk of a bulk request: the first opens the request, the last ends it.
    Chunk { first: bool, last: bool },
}

/// One staged piece: its records, their encoded size, and who waits for them (only on a whole
/// request or the last chunk).
pub(super) struct Staged<W> {
    pub(super) drafts: Vec<Draft>,
    pub(super) bytes: usize,
    pub(super) waiter: Option<W>,
    pub(super) piece: Piece,
}

/// The lanes' bounds (`WalSizes`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    /// A request larger than this is bulk.
    pub(super) small_request_bytes: u64,
    /// A group takes bulk pieces while below this, when no small request was about; a bulk
    /// request larger than a quarter of it is chunked (see the module's header).
    pub(super) group_bulk_bytes: u64,
}

impl Bounds {
    /// The size of a bulk request's chunks, and the bulk budget of a group while small requests
    /// are about.
    pub(super) fn chunk_bytes(self) -> u64 {
        (self.group_bulk_bytes / BULK_CHUNKS_PER_GROUP).max(1)
    }
}

/// The two lanes of requests waiting for a group commit.
pub(super) struct Staging<W> {
    small: VecDeque<Staged<W>>,
    bulk: VecDeque<Staged<W>>,
    bytes: usize,
    bulk_bytes: usize,
    /// The last group took bulk requests.
    last_took_bulk: bool,
    /// Groups left before the bulk budget grows back to `group_bulk_bytes`: set when a group
    /// takes a small request, counted down by groups without one.
    small_recent: u32,
}

impl<W> Default for Staging<W> {
    fn default() -> Self {
        Staging {
            small: VecDeque::new(),
            bulk: VecDeque::new(),
            bytes: 0,
            bulk_bytes: 0,
            last_took_bulk: false,
            small_recent: 0,
        }
    }
}

impl<W> Staging<W> {
    /// Queues a request: small, bulk, or bulk in chunks (see the module's header).
    pub(super) fn push(&mut self, drafts: Vec<Draft>, waiter: W, bounds: Bounds) {
        let bytes: usize = drafts.iter().map(Draft::weight).sum();
        self.bytes += bytes;
        if bytes as u64 <= bounds.small_request_bytes {
            let piece = Piece::Whole;
            self.small.push_back(Staged { drafts, bytes, waiter: Some(waiter), piece });
            return;
        }
        self.bulk_bytes += bytes;
        let chunks = split(drafts, bounds.chunk_bytes());
        let count = chunks.len();
        let mut waiter = Some(waiter);
        for (index, (drafts, bytes)) in chunks.into_iter().enumerate() {
            let last = index + 1 == count;
            let piece =
                if count == 1 { Piece::Whole } else { Piece::Chunk { first: index == 0, last } };
            let waiter = if last { waiter.take() } else { None };
            self.bulk.push_back(Staged { drafts, bytes, waiter, piece });
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.small.is_empty() && self.bulk.is_empty()
    }

    /// Requests waiting.
    pub(super) fn waiters(&self) -> usize {
        self.small.len() + self.bulk.iter().filter(|staged| staged.waiter.is_some()).count()
    }

    /// Encoded bytes waiting (the node's produce bound reads it).
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Encoded bytes of bulk requests waiting.
    pub(super) fn bulk_bytes(&self) -> usize {
        self.bulk_bytes
    }

    /// The pieces of the next group commit, in the order they are written: every small request,
    /// then bulk pieces while the bulk bytes taken are below the bulk budget (at least one),
    /// unless the last group took bulk ones and small ones wait.
    pub(super) fn take_group(&mut self, bounds: Bounds) -> Vec<Staged<W>> {
        let mut group: Vec<Staged<W>> = self.small.drain(..).collect();
        if group.is_empty() {
            self.small_recent = self.small_recent.saturating_sub(1);
        } else {
            self.small_recent = SMALL_RECENT_GROUPS;
        }
        let budget =
            if self.small_recent > 0 { bounds.chunk_bytes() } else { bounds.group_bulk_bytes };
        let bulk_turn = group.is_empty() || !self.last_took_bulk;
        let mut bulk_bytes = 0u64;
        while let Some(next) = self.bulk.front().filter(|_| bulk_turn) {
            if bulk_bytes > 0 && bulk_bytes + next.bytes as u64 > budget {
                break;
            }
            bulk_bytes += next.bytes as u64;
            self.bulk_bytes -= next.bytes;
            group.push(self.bulk.pop_front().expect("checked above"));
        }
        self.last_took_bulk = bulk_bytes > 0;
        self.bytes -= group.iter().map(|staged| staged.bytes).sum::<usize>();
        group
    }

    /// The gauges match the lanes (the node bounds produces by them), and a waiter rides on
    /// each whole request and on the last chunk of a chunked one, on no other piece.
    pub(super) fn check(&self) -> Result<(), String> {
        let bulk: usize = self.bulk.iter().map(|staged| staged.bytes).sum();
        let small: usize = self.small.iter().map(|staged| staged.bytes).sum();
        if (self.bytes, self.bulk_bytes) != (small + bulk, bulk) {
            let (bytes, bulk_bytes) = (self.bytes, self.bulk_bytes);
            return Err(format!(
                "{bytes} bytes, {bulk_bytes} of them bulk, counted; lanes hold {small} + {bulk}"
            ));
        }
        let misplaced = self.small.iter().chain(&self.bulk).find(|staged| {
            let waits = matches!(staged.piece, Piece::Whole | Piece::Chunk { last: true, .. });
            staged.waiter.is_some() != waits
        });
        match misplaced {
            Some(staged) => {
                let (piece, waits) = (staged.piece, staged.waiter.is_some());
                Err(format!("a {piece:?} piece with a waiter: {waits}"))
            }
            None => Ok(()),
        }
    }

    /// Every waiter, small lane first (a latched WAL fails them all).
    pub(super) fn drain_waiters(&mut self) -> Vec<W> {
        (self.bytes, self.bulk_bytes) = (0, 0);
        self.small.drain(..).chain(self.bulk.drain(..)).filter_map(|staged| staged.waiter).collect()
    }
}

/// `drafts` cut into runs of whole records of at most `bound` bytes each (a record larger than
/// that is a run of its own), in order, each with its bytes.
fn split(drafts: Vec<Draft>, bound: u64) -> Vec<(Vec<Draft>, usize)> {
    let mut chunks = Vec::new();
    let (mut chunk, mut bytes) = (Vec::new(), 0usize);
    for draft in drafts {
        let weight = draft.weight();
        if !chunk.is_empty() && (bytes + weight) as u64 > bound {
            chunks.push((std::mem::take(&mut chunk), bytes));
            bytes = 0;
        }
        bytes += weight;
        chunk.push(draft);
    }
    if !chunk.is_empty() || chunks.is_empty() {
        chunks.push((chunk, bytes));
    }
    chunks
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ids::TopicId;

    /// A record whose weight is `bytes` (at least 35: the envelope and a one-byte topic).
    fn draft(bytes: usize) -> Draft {
        let payload = Bytes::from(vec![0; bytes - super::super::record::FIXED_BYTES - 1]);
        Draft {
            timestamp_ms: 0,
            topic: "t".into(),
            topic_id: TopicId(1),
            partition: 0,
            key: None,
            payload,
        }
    }

    /// Queues request `id`: one record of `bytes`, small up to 100 bytes, never chunked.
    fn push(staging: &mut Staging<u32>, id: u32, bytes: usize) {
        let bounds = Bounds { small_request_bytes: 100, group_bulk_bytes: u64::MAX };
        staging.push(vec![draft(bytes)], id, bounds);
    }

    /// Bounds with requests of up to 100 bytes small and chunks of `group_bulk_bytes / 4`.
    fn bounds(group_bulk_bytes: u64) -> Bounds {
        Bounds { small_request_bytes: 100, group_bulk_bytes }
    }

    fn ids(group: &[Staged<u32>]) -> Vec<u32> {
        group.iter().filter_map(|staged| staged.waiter).collect()
    }

    #[test]
    fn small_requests_overtake_bulk_ones_and_a_group_takes_one_bulk_past_the_bound() {
        let mut staging = Staging::default();
        push(&mut staging, 1, 5_000);
        push(&mut staging, 2, 5_000);
        push(&mut staging, 3, 50);
        push(&mut staging, 4, 5_000);
        push(&mut staging, 5, 100);
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (15_150, 15_000));
        assert_eq!(ids(&staging.take_group(bounds(4_000))), [3, 5, 1]);
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (10_000, 10_000));
        // No small one waits: bulk groups follow each other.
        assert_eq!(ids(&staging.take_group(bounds(4_000))), [2]);
        assert_eq!(ids(&staging.take_group(bounds(4_000))), [4]);
        assert!(staging.is_empty());
        assert_eq!(staging.bytes(), 0);
    }

    #[test]
    fn under_a_mix_bulk_groups_alternate_with_groups_of_small_requests_only() {
        let mut staging = Staging::default();
        for id in 0..3 {
            push(&mut staging, id, 5_000);
        }
        let mut taken = Vec::new();
        for small in 10..16 {
            push(&mut staging, small, 40);
            taken.push(ids(&staging.take_group(bounds(4_000))));
        }
        let expected: [&[u32]; 6] = [&[10, 0], &[11], &[12, 1], &[13], &[14, 2], &[15]];
        assert_eq!(taken, expected);
    }

    #[test]
    fn bulk_requests_share_a_group_up_to_the_bound() {
        let mut staging = Staging::default();
        for id in 0..5 {
            push(&mut staging, id, 1_000);
        }
        assert_eq!(ids(&staging.take_group(bounds(3_000))), [0, 1, 2]);
        assert_eq!(ids(&staging.take_group(bounds(3_500))), [3, 4]);
    }

    #[test]
    fn a_bulk_request_past_the_group_bound_is_queued_as_chunks_and_only_the_last_waits() {
        let mut staging = Staging::default();
        let bounds = bounds(1_000); // chunks of at most 250 bytes
        let drafts = vec![draft(100), draft(100), draft(100), draft(400), draft(40)];
        staging.push(drafts, 7, bounds);
        staging.push(vec![draft(40)], 8, bounds);
        assert_eq!(staging.waiters(), 2);
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (780, 740));
        let mut pieces = Vec::new();
        while !staging.is_empty() {
            for staged in staging.take_group(bounds) {
                pieces.push((staged.drafts.len(), staged.piece, staged.waiter));
            }
        }
        let chunk = |first, last| Piece::Chunk { first, last };
        let expected = [
            (1, Piece::Whole, Some(8)),
            (2, chunk(true, false), None),
            (1, chunk(false, false), None),
            (1, chunk(false, false), None), // larger than the bound: a chunk of its own
            (1, chunk(false, true), Some(7)),
        ];
        assert_eq!(pieces, expected);
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (0, 0));
    }

    #[test]
    fn chunks_of_a_request_alternate_with_small_groups() {
        let mut staging = Staging::default();
        let bounds = bounds(800); // chunks of at most 200 bytes
        staging.push(vec![draft(200), draft(200), draft(200)], 1, bounds);
        let mut taken = Vec::new();
        for small in 10..14 {
            staging.push(vec![draft(40)], small, bounds);
            let group = staging.take_group(bounds);
            taken.push(group.iter().map(|s| (s.piece, s.waiter)).collect::<Vec<_>>());
        }
        let chunk = |first, last| Piece::Chunk { first, last };
        let expected: [&[(Piece, Option<u32>)]; 4] = [
            &[(Piece::Whole, Some(10)), (chunk(true, false), None)],
            &[(Piece::Whole, Some(11))],
            &[(Piece::Whole, Some(12)), (chunk(false, false), None)],
            &[(Piece::Whole, Some(13))],
        ];
        assert_eq!(taken, expected);
        let last = staging.take_group(bounds);
        assert_eq!(
            last.iter().map(|s| (s.piece, s.waiter)).collect::<Vec<_>>(),
            [(chunk(false, true), Some(1))]
        );
    }

    #[test]
    fn the_bulk_budget_is_one_chunk_while_small_requests_are_about() {
        let mut staging = Staging::default();
        let bounds = bounds(800); // chunks of at most 200 bytes
        // Alone, a bulk request's chunks share groups up to group_bulk_bytes.
        staging.push(vec![draft(200); 8], 1, bounds);
        let sizes = |group: Vec<Staged<u32>>| group.iter().map(|s| s.bytes).collect::<Vec<_>>();
        assert_eq!(sizes(staging.take_group(bounds)), [200, 200, 200, 200]);
        // A small request arrives: it goes first, alone (the group before took bulk)...
        staging.push(vec![draft(40)], 2, bounds);
        assert_eq!(sizes(staging.take_group(bounds)), [40]);
        // ... and for SMALL_RECENT_GROUPS groups after it the bulk budget is one chunk.
        staging.push(vec![draft(200); 40], 3, bounds);
        let per_group: Vec<usize> =
            std::iter::from_fn(|| Some(staging.take_group(bounds).len())).take(12).collect();
        let recent = SMALL_RECENT_GROUPS as usize;
        let mut expected = vec![1; recent - 1];
        expected.extend([4; 5]);
        assert_eq!(per_group, expected[..12]);
        assert_eq!(staging.waiters(), 1, "request 3 is still partly staged");
        assert_eq!(staging.check(), Ok(()));
        while !staging.is_empty() {
            staging.take_group(bounds);
        }
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (0, 0));
    }

    #[test]
    fn a_latch_fails_every_waiter_of_both_lanes() {
        let mut staging = Staging::default();
        push(&mut staging, 1, 5_000);
        push(&mut staging, 2, 40);
        staging.push(vec![draft(200), draft(200)], 3, bounds(800));
        assert_eq!(staging.waiters(), 3);
        assert_eq!(staging.drain_waiters(), [2, 1, 3]);
        assert!(staging.is_empty());
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (0, 0));
    }
}
