//! Long-poll consumes (docs/design.md §4.9): a parked consume must be woken by the commit that
//! makes a record at or past its offset visible, not sleep to its deadline. The checker keeps,
//! per partition, when each watermark was first reported (commits and restarts), and judges
//! every *empty* answer to a long-poll: it is a violation if a record at its offset was visible
//! on the owner since before the answer could have been decided, that is more than the bound
//! before the answer arrived (and after the request was sent).
//!
//! The bound follows from the mechanism: the wake runs in the same input as the commit that
//! moved the watermark, so the only delays between "visible" and "answered" are the ones the
//! simulation adds on the way back: a batching window (up to 5 ms), plus, in a cluster, one
//! network hop from the owner to the forwarding node (latency and spike). Answers that crossed
//! a clogged link (held, then released) or a paused node are not judged: their delay has no
//! bound. Records a long-poll returns are judged like every read (`reads.rs`: produced, byte for
//! byte, below the watermark).

use std::collections::BTreeMap;

use narad_core::{Instant, PartitionKey};

use super::{Checker, inv};

/// Slack for batching (at most 5 ms) and the same-instant ordering of inputs.
pub const LOCAL_BOUND_US: u64 = 10_000;

/// What the long-poll check keeps.
#[derive(Default)]
pub struct LongPollState {
    /// The bound past the local one: one network hop (cluster runs).
    network_us: u64,
    /// Per partition, `(watermark, first reported at)`, watermarks increasing.
    visible: BTreeMap<PartitionKey, Vec<(u64, Instant)>>,
    /// Partitions whose watermark may have gone back (a lying disk): not judged.
    amnesic: std::collections::BTreeSet<PartitionKey>,
    /// Clogged links and paused nodes (`disturbance`).
    disturbances: Windows,
    /// What may lose a message between nodes: per-message drops, cut links, crashed or
    /// restarted processes (`loss`).
    losses: Windows,
    /// Long-poll answers judged, and empty ones among them.
    pub judged: u64,
    pub judged_empty: u64,
}

/// One kind of fault window: how many are open now, and how many began or ended so far.
#[derive(Default)]
struct Windows {
    open: u32,
    epoch: u64,
}

impl Windows {
    fn change(&mut self, open: bool) {
        self.epoch += 1;
        self.open = if open { self.open + 1 } else { self.open.saturating_sub(1) };
    }

    /// The epoch now, if no window is open (`None`: one is).
    fn quiet_epoch(&self) -> Option<u64> {
        (self.open == 0).then_some(self.epoch)
    }
}

/// What the workload remembers of a long-poll it sent, to have it judged.
#[derive(Clone, Copy, Debug)]
pub struct LongPollSent {
    pub at: Instant,
    /// `None`: sent while a link was clogged or a node paused (not judged).
    epoch: Option<u64>,
    /// `None`: sent while messages between nodes could be lost.
    loss_epoch: Option<u64>,
}

impl Checker {
    /// The network's worst one-way delay (latency plus spike), for cluster runs.
    pub fn set_long_poll_network_bound(&mut self, micros: u64) {
        self.long_poll.network_us = micros;
    }

    /// A clogged link or a paused node began (`open`) or ended.
    pub fn disturbance(&mut self, open: bool) {
        self.long_poll.disturbances.change(open);
    }

    /// Something that may lose messages between nodes began (`open`) or ended; a crash or a
    /// restart is both at once.
    pub fn loss(&mut self, open: bool) {
        self.long_poll.losses.change(open);
    }

    /// A long-poll is being sent now.
    pub fn long_poll_sent(&self) -> LongPollSent {
        let state = &self.long_poll;
        LongPollSent {
            at: self.now,
            epoch: state.disturbances.quiet_epoch(),
            loss_epoch: state.losses.quiet_epoch(),
        }
    }
}

impl LongPollState {
    /// True when no clogged link or paused node was open at `sent`, and none began or ended
    /// since.
    pub(super) fn undisturbed_since(&self, sent: LongPollSent) -> bool {
        sent.epoch == Some(self.disturbances.epoch)
    }

    /// True when nothing could lose a message between nodes at `sent` or since.
    pub(super) fn lossless_since(&self, sent: LongPollSent) -> bool {
        sent.loss_epoch == Some(self.losses.epoch)
    }

    /// The network's worst one-way delay (0 on one node).
    pub(super) fn network_us(&self) -> u64 {
        self.network_us
    }

    /// When a record at `key`@`offset` was first reported visible (`None`: not yet, or the
    /// partition's timeline is not trusted).
    pub(super) fn visible_at(&self, key: PartitionKey, offset: u64) -> Option<Instant> {
        if self.amnesic.contains(&key) {
            return None;
        }
        let timeline = self.visible.get(&key)?;
        timeline.iter().find(|&&(hwm, _)| hwm > offset).map(|&(_, at)| at)
    }
}

impl Checker {
    /// `key`'s watermark is `hwm` from now on (a commit, or a restart's recovery).
    pub(super) fn note_visible(&mut self, key: PartitionKey, hwm: u64) {
        let now = self.now;
        let timeline = self.long_poll.visible.entry(key).or_default();
        if timeline.last().is_none_or(|&(last, _)| hwm > last) {
            timeline.push((hwm, now));
        }
    }

    /// `key` lost acknowledged bytes to a lying disk: its timeline is no longer judged.
    pub(super) fn long_poll_amnesia(&mut self, key: PartitionKey) {
        self.long_poll.amnesic.insert(key);
    }

    /// A long-poll of `name`'s `key` from `offset`, sent as `sent`, got an answer now with
    /// `records` records.
    pub fn long_poll_answered(
        &mut self,
        name: &str,
        key: PartitionKey,
        offset: u64,
        sent: LongPollSent,
        records: usize,
    ) {
        let state = &self.long_poll;
        let undisturbed = state.undisturbed_since(sent);
        // A name that had another incarnation may resolve to it on a lagging replica.
        let one_incarnation = self.by_name.get(name).is_none_or(|ids| ids.len() <= 1);
        let judged = undisturbed
            && one_incarnation
            && !self.is_deleted(key.topic)
            && !state.amnesic.contains(&key);
        if !judged {
            return;
        }
        self.long_poll.judged += 1;
        if records > 0 {
            return;
        }
        self.long_poll.judged_empty += 1;
        let timeline = self.long_poll.visible.get(&key);
        let first = timeline.and_then(|t| t.iter().find(|&&(hwm, _)| hwm > offset));
        let Some(&(_, visible_at)) = first else { return };
        let bound = LOCAL_BOUND_US + self.long_poll.network_us;
        let since = visible_at.max(sent.at);
        if self.now.micros_since(since) > bound {
            let late = self.now.micros_since(since);
            let detail = format!(
                "{key}@{offset}: long-poll answered empty {late} µs after a record there was \
                 visible (bound {bound} µs)"
            );
            self.violation(inv::LONG_POLL, detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use narad_core::TopicId;

    use super::*;

    fn key() -> PartitionKey {
        PartitionKey { topic: TopicId(5), partition: 0 }
    }

    fn names(checker: &Checker) -> Vec<&'static str> {
        checker.violations().0.iter().map(|v| v.invariant).collect()
    }

    fn at(checker: &mut Checker, micros: u64) {
        checker.set_now(Instant(1_000_000 + micros));
    }

    #[test]
    fn an_empty_answer_long_after_visibility_is_a_violation() {
        let mut checker = Checker::new(false);
        checker.topic_live("t", TopicId(5));
        at(&mut checker, 0);
        let sent = checker.long_poll_sent();
        at(&mut checker, 100_000);
        checker.note_visible(key(), 1);
        at(&mut checker, 105_000);
        checker.long_poll_answered("t", key(), 0, sent, 0);
        assert_eq!(names(&checker), Vec::<&str>::new(), "within the bound");
        at(&mut checker, 300_000);
        checker.long_poll_answered("t", key(), 0, sent, 0);
        assert_eq!(names(&checker), vec![inv::LONG_POLL]);
    }

    #[test]
    fn records_answers_offsets_not_yet_visible_and_disturbed_runs_are_fine() {
        let mut checker = Checker::new(false);
        checker.topic_live("t", TopicId(5));
        at(&mut checker, 0);
        let sent = checker.long_poll_sent();
        checker.note_visible(key(), 3);
        at(&mut checker, 900_000);
        checker.long_poll_answered("t", key(), 0, sent, 2);
        checker.long_poll_answered("t", key(), 3, sent, 0);
        checker.disturbance(true);
        checker.disturbance(false);
        checker.long_poll_answered("t", key(), 0, sent, 0);
        assert_eq!(names(&checker), Vec::<&str>::new());
        assert_eq!((checker.long_poll.judged, checker.long_poll.judged_empty), (2, 1));
    }
}
