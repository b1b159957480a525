//! The transport's contract, checked from outside: every message a node hands to the transport
//! is fed to its destination's node, or its sender hears `PeerUnreachable` for that destination
//! (the core then stops waiting for an answer that will not come). A transport that drops a
//! message silently breaks no record invariant (the sender's 30 s commit timeout and an
//! idempotent retry repair it) but stalls the partition; this ledger is how tier 2 sees it.
//!
//! The ledger records, in the order they happen, what each driver sent and was fed (through
//! `narad::env::NodeObserver::peer`) and when each process started and ended. At the verdict it
//! judges every message sent at least `SETTLE` before the next *break* of its link: a report of
//! the destination unreachable at the sender, the sender's or the destination's process
//! starting or ending, or the end of the run. Messages are told apart by a hash of their bytes;
//! identical messages (heartbeats) are counted, so a judged message is lost when its link
//! delivered fewer copies of its bytes than were judged. A copy delivered more often than it
//! was sent is reported too.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use narad::env::PeerTraffic;

use crate::checker::{Checker, inv};

/// How long a message may take to be delivered or reported: two of the transport's idle
/// timeouts (5 s each), its drop-after (2 s), and room to spare. Two, because under a one-way
/// partition the sender keeps hearing its peer, so its connection does not idle out: the peer's
/// side does first (5 s after the sender's last packet reached it), and if the peer's close is
/// lost too, the sender's side idles out 5 s after the peer's last packet (seed 0xb3, 5 nodes:
/// reported 10.03 s after the send). Messages sent closer to a break are not judged.
const SETTLE_MICROS: u64 = 15_000_000;

/// One step of a node's life as the ledger orders them.
#[derive(Clone, Copy, Debug)]
struct Mark {
    seq: u64,
    at: u64,
}

/// What the run's drivers sent and were fed, and when their processes came and went.
#[derive(Default)]
pub struct PeerLedger {
    seq: u64,
    /// (from, to) → messages sent, in order: (mark, hash of the bytes).
    sent: BTreeMap<(u32, u32), Vec<(Mark, u64)>>,
    /// (from, to, hash) → copies fed to the destination's node.
    delivered: BTreeMap<(u32, u32, u64), u32>,
    /// (from, to) → reports at `from` that `to` is unreachable.
    reports: BTreeMap<(u32, u32), Vec<Mark>>,
    /// node → process starts and ends.
    lives: BTreeMap<u32, Vec<Mark>>,
}

impl PeerLedger {
    fn mark(&mut self, at: u64) -> Mark {
        self.seq += 1;
        Mark { seq: self.seq, at }
    }

    /// Node index `n`'s driver reported `traffic` at simulated microsecond `at` (node ids are
    /// indexes + 1).
    pub fn traffic(&mut self, n: u32, at: u64, traffic: PeerTraffic<'_>) {
        let mark = self.mark(at);
        match traffic {
            PeerTraffic::Sent { to, bytes } => {
                self.sent.entry((n, to.0 - 1)).or_default().push((mark, digest(bytes)));
            }
            PeerTraffic::Received { from, bytes } => {
                *self.delivered.entry((from.0 - 1, n, digest(bytes))).or_default() += 1;
            }
            PeerTraffic::Unreachable { to } => {
                self.reports.entry((n, to.0 - 1)).or_default().push(mark);
            }
        }
    }

    /// Node index `n`'s process started or ended at `at`.
    pub fn life(&mut self, n: u32, at: u64) {
        let mark = self.mark(at);
        self.lives.entry(n).or_default().push(mark);
    }

    /// Judges the run, which ends at `end`: each lost or duplicated message is a violation.
    pub fn judge(&self, end: u64, checker: &mut Checker) {
        for (&(from, to), sent) in &self.sent {
            let breaks = self.breaks(from, to);
            let mut judged: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
            let mut all: BTreeMap<u64, u32> = BTreeMap::new();
            let mut next = 0;
            for &(mark, hash) in sent {
                *all.entry(hash).or_default() += 1;
                while next < breaks.len() && breaks[next].seq < mark.seq {
                    next += 1;
                }
                let settled_by = breaks.get(next).map_or(end, |b| b.at);
                if settled_by.saturating_sub(mark.at) >= SETTLE_MICROS {
                    let entry = judged.entry(hash).or_insert((0, mark.at));
                    entry.0 += 1;
                }
            }
            self.judge_link(from, to, &judged, &all, checker);
        }
    }

    fn judge_link(
        &self,
        from: u32,
        to: u32,
        judged: &BTreeMap<u64, (u32, u64)>,
        all: &BTreeMap<u64, u32>,
        checker: &mut Checker,
    ) {
        let delivered = |hash: u64| self.delivered.get(&(from, to, hash)).copied().unwrap_or(0);
        let (mut lost, mut first) = (0, None::<u64>);
        for (&hash, &(count, at)) in judged {
            let missing = count.saturating_sub(delivered(hash));
            if missing > 0 {
                lost += missing;
                first = Some(first.map_or(at, |f| f.min(at)));
            }
        }
        if let Some(first) = first {
            let detail = format!(
                "n{}→n{}: {lost} messages never delivered and never reported unreachable \
                 (the first sent at t={} ms)",
                from + 1,
                to + 1,
                crate::clock::since_start(narad_core::Instant(first)) / 1_000
            );
            checker.violation(inv::PEER_MESSAGE_LOST, detail);
        }
        let range = (from, to, 0)..=(from, to, u64::MAX);
        for (&(_, _, hash), &copies) in self.delivered.range(range) {
            let sent = all.get(&hash).copied().unwrap_or(0);
            if copies > sent {
                let detail = format!(
                    "n{}→n{}: a message delivered {copies} times was sent {sent} times",
                    from + 1,
                    to + 1
                );
                checker.violation(inv::PEER_MESSAGE_LOST, detail);
            }
        }
    }

    /// What ends the settling of a message from `from` to `to`, in order.
    fn breaks(&self, from: u32, to: u32) -> Vec<Mark> {
        let none = Vec::new();
        let mut breaks: Vec<Mark> = [
            self.reports.get(&(from, to)).unwrap_or(&none),
            self.lives.get(&from).unwrap_or(&none),
            self.lives.get(&to).unwrap_or(&none),
        ]
        .into_iter()
        .flatten()
        .copied()
        .collect();
        breaks.sort_by_key(|b| b.seq);
        breaks
    }
}

/// A message's identity for the ledger.
fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use narad_core::NodeId;

    use super::*;

    const S: u64 = 1_000_000;
    const T0: u64 = crate::clock::START.0;

    fn sent(ledger: &mut PeerLedger, at: u64, bytes: &[u8]) {
        ledger.traffic(0, T0 + at, PeerTraffic::Sent { to: NodeId(2), bytes });
    }

    fn fed(ledger: &mut PeerLedger, at: u64, bytes: &[u8]) {
        ledger.traffic(1, T0 + at, PeerTraffic::Received { from: NodeId(1), bytes });
    }

    fn violations(ledger: &PeerLedger, end: u64) -> usize {
        let mut checker = Checker::new(true);
        ledger.judge(T0 + end, &mut checker);
        checker.violations().1
    }

    #[test]
    fn a_message_neither_delivered_nor_reported_is_lost() {
        let mut ledger = PeerLedger::default();
        sent(&mut ledger, S, b"commit");
        sent(&mut ledger, 2 * S, b"reply");
        fed(&mut ledger, 2 * S, b"reply");
        assert_eq!(violations(&ledger, 60 * S), 1);
        fed(&mut ledger, 3 * S, b"commit");
        assert_eq!(violations(&ledger, 60 * S), 0);
    }

    #[test]
    fn a_report_two_idle_timeouts_after_the_send_excuses_a_loss() {
        // Seed 0xb3: under a one-way partition the sender's connection idled out only after
        // its peer's had, 10.03 s after the send.
        let mut ledger = PeerLedger::default();
        sent(&mut ledger, S, b"commit");
        ledger.traffic(0, T0 + S + 10_030_000, PeerTraffic::Unreachable { to: NodeId(2) });
        assert_eq!(violations(&ledger, 60 * S), 0);
    }

    #[test]
    fn a_report_or_a_restart_soon_after_excuses_a_loss() {
        let mut ledger = PeerLedger::default();
        sent(&mut ledger, S, b"a");
        ledger.traffic(0, T0 + 4 * S, PeerTraffic::Unreachable { to: NodeId(2) });
        sent(&mut ledger, 20 * S, b"b");
        ledger.life(1, T0 + 25 * S); // the destination crashed
        assert_eq!(violations(&ledger, 60 * S), 0);
        sent(&mut ledger, 30 * S, b"c"); // after the restart, nothing excuses it
        assert_eq!(violations(&ledger, 60 * S), 1);
        assert_eq!(violations(&ledger, 35 * S), 0, "too close to the end to judge");
    }

    #[test]
    fn identical_messages_are_counted_and_extra_copies_reported() {
        let mut ledger = PeerLedger::default();
        sent(&mut ledger, S, b"beat");
        sent(&mut ledger, 2 * S, b"beat");
        fed(&mut ledger, 2 * S, b"beat");
        assert_eq!(violations(&ledger, 60 * S), 1, "one of two copies lost");
        fed(&mut ledger, 3 * S, b"beat");
        assert_eq!(violations(&ledger, 60 * S), 0);
        fed(&mut ledger, 4 * S, b"beat");
        assert_eq!(violations(&ledger, 60 * S), 1, "three copies of two sends");
    }
}
