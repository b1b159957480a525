//! What waits for the next group commit, and which of it the next group commit takes.
//!
//! Why not simply everything staged: a group commit is one write and one fsync, and a caller waits
//! for the whole of it. Under a flood of 16 MiB batches, a one-record produce staged behind three
//! of them would wait for 48 MiB to reach the disk, then for the group after it. So requests are
//! kept whole (a request's records stay contiguous in the WAL) but in two lanes:
//! - **small** requests (encoded size at most `small_request_bytes`) all join the next group, in
//!   the order they came;
//! - **bulk** requests join it after them, in the order they came, while the group's bulk bytes
//!   are below `group_bulk_bytes` (at least one), unless small requests are waiting and the
//!   group before took bulk ones: then the group is small requests only. Bulk groups alternate
//!   with small ones, so bulk never starves and takes about half the groups under a mix.
//!
//! The bulk lane is bounded too: a bulk request is refused (the node answers 503) while more
//! than `BULK_STAGED_GROUPS` groups' worth of bulk bytes wait, so a flood of large batches
//! queues at its clients, not in the WAL ahead of everyone.
//!
//! A small produce therefore waits for at most the group in flight (holding at most one bulk
//! request past the bulk bound) and its own group, which holds no bulk if the one before did. Sequence numbers are given when a group
//! starts, so the WAL's order is the order groups were written in; produces that were in flight
//! together have no order between them (a client that waits for its 202 before the next produce
//! keeps its order).

use std::collections::VecDeque;

use super::Draft;

/// Bulk bytes may wait for this many groups' bulk bound (`group_bulk_bytes`), at least one
/// request: four 4 MiB groups, one 16 MiB batch, in production.
pub(super) const BULK_STAGED_GROUPS: u64 = 4;

/// One staged request: its records, their encoded size, and who waits for them.
pub(super) struct Staged<W> {
    pub(super) drafts: Vec<Draft>,
    pub(super) bytes: usize,
    pub(super) waiter: W,
}

/// The two lanes of requests waiting for a group commit.
pub(super) struct Staging<W> {
    small: VecDeque<Staged<W>>,
    bulk: VecDeque<Staged<W>>,
    bytes: usize,
    bulk_bytes: usize,
    /// The last group took bulk requests.
    last_took_bulk: bool,
}

impl<W> Default for Staging<W> {
    fn default() -> Self {
        Staging {
            small: VecDeque::new(),
            bulk: VecDeque::new(),
            bytes: 0,
            bulk_bytes: 0,
            last_took_bulk: false,
        }
    }
}

impl<W> Staging<W> {
    /// Queues a request; it is bulk if its encoded size is past `small_request_bytes`.
    pub(super) fn push(&mut self, staged: Staged<W>, small_request_bytes: u64) {
        self.bytes += staged.bytes;
        if staged.bytes as u64 <= small_request_bytes {
            self.small.push_back(staged);
        } else {
            self.bulk_bytes += staged.bytes;
            self.bulk.push_back(staged);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.small.is_empty() && self.bulk.is_empty()
    }

    /// Requests waiting.
    pub(super) fn waiters(&self) -> usize {
        self.small.len() + self.bulk.len()
    }

    /// Encoded bytes waiting (the node's produce bound reads it).
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Encoded bytes of bulk requests waiting.
    pub(super) fn bulk_bytes(&self) -> usize {
        self.bulk_bytes
    }

    /// The requests of the next group commit, in the order they are written: every small one,
    /// then bulk ones while the bulk bytes taken are below `group_bulk_bytes` (at least one),
    /// unless the last group took bulk ones and small ones wait.
    pub(super) fn take_group(&mut self, group_bulk_bytes: u64) -> Vec<Staged<W>> {
        let mut group: Vec<Staged<W>> = self.small.drain(..).collect();
        let bulk_turn = group.is_empty() || !self.last_took_bulk;
        let mut bulk_bytes = 0u64;
        while let Some(next) = self.bulk.front().filter(|_| bulk_turn) {
            if bulk_bytes > 0 && bulk_bytes + next.bytes as u64 > group_bulk_bytes {
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

    /// Every waiter, small lane first (a latched WAL fails them all).
    pub(super) fn drain_waiters(&mut self) -> Vec<W> {
        (self.bytes, self.bulk_bytes) = (0, 0);
        self.small.drain(..).chain(self.bulk.drain(..)).map(|staged| staged.waiter).collect()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ids::TopicId;

    fn request(id: u32, bytes: usize) -> Staged<u32> {
        let draft = Draft {
            timestamp_ms: 0,
            topic: "t".into(),
            topic_id: TopicId(1),
            partition: 0,
            key: None,
            payload: Bytes::new(),
        };
        Staged { drafts: vec![draft], bytes, waiter: id }
    }

    fn ids(group: &[Staged<u32>]) -> Vec<u32> {
        group.iter().map(|staged| staged.waiter).collect()
    }

    #[test]
    fn small_requests_overtake_bulk_ones_and_a_group_takes_one_bulk_past_the_bound() {
        let mut staging = Staging::default();
        staging.push(request(1, 5_000), 100);
        staging.push(request(2, 5_000), 100);
        staging.push(request(3, 50), 100);
        staging.push(request(4, 5_000), 100);
        staging.push(request(5, 100), 100);
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (15_150, 15_000));
        assert_eq!(ids(&staging.take_group(4_000)), [3, 5, 1]);
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (10_000, 10_000));
        // No small one waits: bulk groups follow each other.
        assert_eq!(ids(&staging.take_group(4_000)), [2]);
        assert_eq!(ids(&staging.take_group(4_000)), [4]);
        assert!(staging.is_empty());
        assert_eq!(staging.bytes(), 0);
    }

    #[test]
    fn under_a_mix_bulk_groups_alternate_with_groups_of_small_requests_only() {
        let mut staging = Staging::default();
        for id in 0..3 {
            staging.push(request(id, 5_000), 100);
        }
        let mut taken = Vec::new();
        for small in 10..16 {
            staging.push(request(small, 10), 100);
            taken.push(ids(&staging.take_group(4_000)));
        }
        let expected: [&[u32]; 6] = [&[10, 0], &[11], &[12, 1], &[13], &[14, 2], &[15]];
        assert_eq!(taken, expected);
    }

    #[test]
    fn bulk_requests_share_a_group_up_to_the_bound() {
        let mut staging = Staging::default();
        for id in 0..5 {
            staging.push(request(id, 1_000), 100);
        }
        assert_eq!(ids(&staging.take_group(3_000)), [0, 1, 2]);
        assert_eq!(ids(&staging.take_group(3_500)), [3, 4]);
    }

    #[test]
    fn a_latch_fails_every_waiter_of_both_lanes() {
        let mut staging = Staging::default();
        staging.push(request(1, 5_000), 100);
        staging.push(request(2, 10), 100);
        assert_eq!(staging.waiters(), 2);
        assert_eq!(staging.drain_waiters(), [2, 1]);
        assert!(staging.is_empty());
        assert_eq!((staging.bytes(), staging.bulk_bytes()), (0, 0));
    }
}
