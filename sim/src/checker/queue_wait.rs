//! Long-polling queue receives (docs/design.md §4.8): a receive that waits must be woken when a
//! message becomes available, not sleep to its end (in a cluster, a topic-wide receive is woken
//! through the other owners' watches: `core/src/node/receive_watch.rs`). Judged for answers the
//! simulation did not delay (no clogged link or paused node while it was out) and, in a
//! cluster, could not have lost a message for (no per-message drops, cut link, crash or
//! restart while it was out; the bound grows by four network hops): an *empty*
//! answer is a violation if some message of the receive's topic (of its partition, if it named
//! one) was visible more than `BOUND_US` before the answer, and nobody had leased it by then:
//! its first delivery any client saw has count 1 and was asked for after the empty answer (a
//! message whose count-1 delivery went unseen, a lost reply, may have been leased; one moved to
//! the dead-letter topic was never delivered; neither is judged).
//!
//! The bound is generous (100 ms against the replay long-poll's 10 ms): a concurrent receive
//! holds the offsets it reserved while their read runs, on a disk the simulation may slow. Runs
//! whose disk fails or corrupts reads are not judged: a failed read makes a waiting receive try
//! again only after the failure back-off (1 s). Nor are runs whose consumer journal failed (a
//! latched journal fails its partitions' part of every round, and a topic-wide receive then
//! waits out its deadline on the others). Nor are answers while the WAL is latched: it
//! takes no dead-letter copy then, and the messages due for one hold their place.

use narad_core::{Instant, TopicId};

use super::Checker;
use super::long_poll::LongPollSent;

/// Slack between a message becoming available and a parked receive's answer.
const BOUND_US: u64 = 100_000;

/// An empty answer to a waiting receive.
#[derive(Clone, Copy, Debug)]
pub(super) struct EmptyWait {
    inc: TopicId,
    partition: Option<u32>,
    answered: Instant,
}

impl Checker {
    /// This run's disk fails or corrupts reads (or a consumer journal failed):
    /// waiting receives are not judged.
    pub fn queue_waits_unjudged(&mut self) {
        self.read_faults = true;
    }

    /// A waiting receive of incarnation `inc` (of one `partition` if given) sent as `sent` was
    /// answered empty now.
    pub fn queue_wait_empty(&mut self, inc: TopicId, partition: Option<u32>, sent: LongPollSent) {
        // A latched WAL takes no dead-letter copy: messages due for one then hold their place,
        // and a receive may find nothing behind them until the restart.
        if (self.cluster && !self.long_poll.lossless_since(sent))
            || self.read_faults
            || (0..self.nodes.len() as u32).any(|n| self.is_latched(n))
            || !self.long_poll.undisturbed_since(sent)
        {
            return;
        }
        self.queue_waits.push(EmptyWait { inc, partition, answered: self.now });
    }

    /// Judges the empty answers (from `verdict`, once every delivery is known).
    pub(super) fn check_queue_waits(&mut self) {
        let mut late = Vec::new();
        let bound = BOUND_US + 4 * self.long_poll.network_us();
        for wait in &self.queue_waits {
            if self.is_deleted(wait.inc) || self.corruption_hit {
                continue;
            }
            for (at, msg) in self.queue.msgs_of(wait.inc, wait.partition) {
                let Some(first) = msg else { continue };
                let (count, asked) = first;
                let visible = self.long_poll.visible_at(at.0, at.1);
                let available_long_before = visible
                    .is_some_and(|v| v < wait.answered && wait.answered.micros_since(v) > bound);
                if count == 1 && asked > wait.answered && available_long_before {
                    late.push(format!(
                        "{}@{}: a waiting receive answered empty at t={}, the message was \
                         available since t={} and first leased after",
                        at.0,
                        at.1,
                        crate::clock::since_start(wait.answered),
                        crate::clock::since_start(visible.expect("checked above")),
                    ));
                    break;
                }
            }
        }
        for detail in late.into_iter().take(5) {
            self.violation(super::inv::QUEUE_WAIT, detail);
        }
    }
}
