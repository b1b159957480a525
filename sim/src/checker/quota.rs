//! Produce quotas (`narad_core::quota`, docs/design.md §8) judged from the outside: what each
//! node admitted and refused for each payer, against the quota's rule, once the run is over.
//! Each process of a node keeps its own ledger (a restart forgets it), so produces are judged per
//! node, process (epoch) and payer.
//!
//! The checker sees a produce delivered at `d` and answered at `r`; the node decided it at some
//! `t` in between (a request that arrives during start-up waits there). Both checks are drawn
//! so that no choice of those `t` can excuse a wrong answer:
//!
//! - **quota-overrun**: produces answered 202, in delivery order, `i` up to `j`, were decided
//!   between `d_i` and the latest of their answers; less the largest of them, they hold at most
//!   `rate × (that span + burst)` bytes (the rule admits a produce only while its payer is at
//!   most `burst` ahead, and the last one admitted may be any of them).
//! - **quota-refused-early**: a 429 decided at `t` needs the payer to have been more than
//!   `burst` ahead at `t`, counting every produce delivered before `t` that may have been charged
//!   (any not refused before the quota: 202, 5xx, unanswered) as charged as late as it can have
//!   been. If even that upper bound leaves the payer within its burst at every `t` from the
//!   429's delivery to its answer, the refusal was wrong.
//!
//! Node clocks may drift (2 % at most): rates and the burst are given 3 % either way.

use std::collections::BTreeMap;

use narad_core::constants::QUOTA_BURST_MS;
use narad_core::quota::Payer;
use narad_core::{ClientOp, ClientReply, RequestId};

use super::{Checker, inv};

/// Slack for clock drift, in percent.
const DRIFT_PERCENT: i128 = 3;

/// What the checker knows of the produces, while a quota is set.
#[derive(Default)]
pub struct QuotaHistory {
    bytes_per_sec: u64,
    sent: BTreeMap<RequestId, Sent>,
}

struct Sent {
    ledger: (u32, u32, Payer),
    bytes: u64,
    delivered_us: u64,
    answer: Option<(Answer, u64)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accepted,
    Refused,
    /// Refused before the quota was asked (400, 401, 403, 404, 409, 413, 503).
    NotCharged,
    /// 5xx: charged or not.
    Unclear,
}

impl Checker {
    /// The nodes charge produces at `bytes_per_sec` per payer (0: no quota, nothing recorded).
    pub fn produce_quota(&mut self, bytes_per_sec: u64) {
        self.quota.bytes_per_sec = bytes_per_sec;
    }

    /// A client request was delivered to process `epoch` of node `node`.
    pub fn quota_sent(
        &mut self,
        request: RequestId,
        (node, epoch): (u32, u32),
        op: &ClientOp,
        payer: Payer,
    ) {
        let ClientOp::Produce { messages, .. } = op else { return };
        if self.quota.bytes_per_sec == 0 {
            return;
        }
        let bytes =
            messages.iter().map(|m| m.payload.len() + m.key.as_ref().map_or(0, |k| k.len()));
        let sent = Sent {
            ledger: (node, epoch, payer),
            bytes: bytes.sum::<usize>() as u64,
            delivered_us: self.now.0,
            answer: None,
        };
        self.quota.sent.insert(request, sent);
    }

    /// A node answered `request`.
    pub fn quota_answered(&mut self, request: RequestId, reply: &ClientReply) {
        let now = self.now.0;
        let Some(sent) = self.quota.sent.get_mut(&request) else { return };
        let answer = match reply {
            ClientReply::Produced { .. } => Answer::Accepted,
            ClientReply::Error(e) => match e.http_status() {
                429 => Answer::Refused,
                status if status >= 500 && status != 503 => Answer::Unclear,
                _ => Answer::NotCharged,
            },
            _ => Answer::Unclear,
        };
        sent.answer.get_or_insert((answer, now));
    }

    /// Judges every produce against the quota (see the module's doc).
    pub(super) fn check_quota(&mut self) {
        let rate = i128::from(self.quota.bytes_per_sec);
        if rate == 0 {
            return;
        }
        let mut ledgers: BTreeMap<&(u32, u32, Payer), Vec<&Sent>> = BTreeMap::new();
        for sent in self.quota.sent.values() {
            ledgers.entry(&sent.ledger).or_default().push(sent);
        }
        let mut found = Vec::new();
        for (ledger, mut sends) in ledgers {
            sends.sort_by_key(|s| s.delivered_us);
            if let Some(detail) = overrun(rate, &sends) {
                found.push((inv::QUOTA_OVERRUN, format!("{ledger:?}: {detail}")));
            }
            if let Some(detail) = refused_early(rate, &sends) {
                found.push((inv::QUOTA_REFUSED_EARLY, format!("{ledger:?}: {detail}")));
            }
        }
        self.counters.quota_refusals += self
            .quota
            .sent
            .values()
            .filter(|s| matches!(s.answer, Some((Answer::Refused, _))))
            .count() as u64;
        for (invariant, detail) in found {
            self.violation(invariant, detail);
        }
    }
}

/// The first run of accepted produces that holds more bytes than the rule lets through. The
/// node decided each produce `k` somewhere in `[d_k, r_k]`, and two that arrived together (an
/// HTTP/1 and an HTTP/2 client, a batch being decoded) may be decided in either order. So
/// windows are judged without an order: produces `i..=j` in delivery order were all decided
/// within `[d_i, max r]`; the rule lets through at most `rate × (that span + burst)` bytes plus
/// the last one decided, which may be the largest.
fn overrun(rate: i128, sends: &[&Sent]) -> Option<String> {
    let given = |us: i128| rate * (100 + DRIFT_PERCENT) * us; // bytes × 10^8 over `us`
    let burst_us = i128::from(QUOTA_BURST_MS) * 1_000;
    let accepted: Vec<(i128, i128, i128)> = sends
        .iter()
        .filter_map(|s| match s.answer {
            Some((Answer::Accepted, r)) => {
                Some((i128::from(s.delivered_us), i128::from(r), i128::from(s.bytes)))
            }
            _ => None,
        })
        .collect();
    let total: i128 = accepted.iter().map(|&(_, _, bytes)| bytes).sum();
    for (i, &(from, ..)) in accepted.iter().enumerate() {
        let (mut bytes, mut largest, mut until) = (0, 0, from);
        for &(delivered, answered, size) in &accepted[i..] {
            if given(delivered - from + burst_us) >= total * 100_000_000 {
                break; // no later window from `i` can hold more than the run's bytes
            }
            (bytes, largest, until) = (bytes + size, largest.max(size), until.max(answered));
            if (bytes - largest) * 100_000_000 > given(until - from + burst_us) {
                return Some(format!(
                    "{bytes} bytes accepted between {from} µs and {until} µs at {rate} bytes/s"
                ));
            }
        }
    }
    None
}

/// The first 429 that even the most the payer can have been charged does not explain. The node
/// decided it at some time between its delivery and its answer (a node paused or starting up
/// answers late), so it is early only if the payer was within its burst at every such time: at
/// the delivery, and at each later point where the most it can have been charged grows (between
/// two such points the debt only shrinks).
fn refused_early(rate: i128, sends: &[&Sent]) -> Option<String> {
    let burst_low_us = i128::from(QUOTA_BURST_MS) * 1_000 * (100 - DRIFT_PERCENT) / 100;
    for refused in sends.iter().filter(|s| matches!(s.answer, Some((Answer::Refused, _)))) {
        let (_, answered_us) = refused.answer.expect("filtered: answered");
        let delivered_us = refused.delivered_us;
        let changes = sends.iter().flat_map(|s| [Some(s.delivered_us), s.answer.map(|(_, r)| r)]);
        let mut times: Vec<u64> =
            changes.flatten().filter(|&t| t > delivered_us && t <= answered_us).collect();
        times.push(delivered_us);
        let ahead = times.into_iter().map(|t| most_ahead_at(rate, sends, t)).max().unwrap_or(0);
        if ahead <= burst_low_us {
            return Some(format!(
                "refused (delivered at {delivered_us} µs, answered at {answered_us} µs) when the \
                 payer was at most {ahead} µs ahead (burst {QUOTA_BURST_MS} ms)"
            ));
        }
    }
    None
}

/// How far ahead of `at_us` the payer can be at most: every produce delivered before it that
/// may have been charged, charged as late as it can have been (by `at_us`).
fn most_ahead_at(rate: i128, sends: &[&Sent], at_us: u64) -> i128 {
    let at = i128::from(at_us);
    let mut charges: Vec<(i128, u64)> = sends
        .iter()
        .filter(|s| s.delivered_us < at_us && may_be_charged(s))
        .map(|s| (s.answer.map_or(at, |(_, r)| i128::from(r).min(at)), s.bytes))
        .collect();
    charges.sort_unstable();
    let mut paid: Option<i128> = None;
    for (t, bytes) in charges {
        let cost = (i128::from(bytes) * 1_000_000 * (100 + DRIFT_PERCENT)) / (rate * 100) + 1;
        paid = Some(paid.map_or(t, |paid| paid.max(t)) + cost);
    }
    paid.map_or(0, |paid| (paid - at).max(0))
}

fn may_be_charged(sent: &Sent) -> bool {
    !matches!(sent.answer, Some((Answer::Refused | Answer::NotCharged, _)))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use narad_core::{ClientError, Instant, ProduceMessage};

    use super::*;

    /// At 1,000 B/s, with times in ms since an origin.
    fn checker() -> Checker {
        let mut checker = Checker::new(false);
        checker.produce_quota(1_000);
        checker
    }

    fn at(checker: &mut Checker, ms: u64) {
        checker.set_now(Instant(1_000_000_000 + ms * 1_000));
    }

    fn send(checker: &mut Checker, request: u64, ms: u64, bytes: usize) {
        at(checker, ms);
        let message =
            ProduceMessage { key: None, partition: None, payload: Bytes::from(vec![0; bytes]) };
        let op = ClientOp::Produce { topic: "t".into(), messages: vec![message], batch: false };
        checker.quota_sent(RequestId(request), (0, 1), &op, Payer::Anonymous);
    }

    fn answer(checker: &mut Checker, request: u64, ms: u64, reply: &ClientReply) {
        at(checker, ms);
        checker.quota_answered(RequestId(request), reply);
    }

    const OK: ClientReply = ClientReply::Produced { accepted: 1 };

    fn throttled() -> ClientReply {
        ClientReply::Error(ClientError::QuotaExceeded {
            message: "spent".into(),
            retry_after_us: 1,
        })
    }

    fn found(mut checker: Checker) -> Vec<&'static str> {
        checker.check_quota();
        checker.violations().0.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn a_history_within_the_quota_passes_whatever_order_it_was_decided_in() {
        let mut c = checker();
        // 1,000 B at once (the burst), then 500 B/s; two sent together answered in reverse.
        send(&mut c, 1, 0, 1_000);
        answer(&mut c, 1, 5, &OK);
        send(&mut c, 2, 10, 900);
        answer(&mut c, 2, 12, &throttled());
        for (n, ms) in (3..23).zip((1_000..).step_by(1_000)) {
            send(&mut c, n, ms, 250);
            send(&mut c, 100 + n, ms, 250);
            answer(&mut c, 100 + n, ms + 2, &OK);
            answer(&mut c, n, ms + 4, &OK);
        }
        assert_eq!(found(c), Vec::<&str>::new());
    }

    #[test]
    fn more_than_the_rate_and_burst_is_an_overrun() {
        let mut c = checker();
        for n in 0..5 {
            send(&mut c, n, n * 10, 1_000);
            answer(&mut c, n, n * 10 + 2, &OK);
        }
        assert_eq!(found(c), [inv::QUOTA_OVERRUN]);
    }

    #[test]
    fn a_refusal_within_the_burst_is_early_and_refusals_charge_nothing() {
        let mut c = checker();
        send(&mut c, 1, 0, 500);
        answer(&mut c, 1, 2, &OK);
        send(&mut c, 2, 3, 5_000);
        answer(&mut c, 2, 3, &throttled());
        send(&mut c, 3, 4, 10);
        answer(&mut c, 3, 4, &throttled());
        assert_eq!(found(c), [inv::QUOTA_REFUSED_EARLY]);
    }

    /// Cluster seed 0x13f6: a node paused 1.5 s between deciding a 429 and sending it; judged at
    /// the answer, the payer's debt had run down to within the burst.
    #[test]
    fn a_refusal_answered_late_is_judged_when_it_may_have_been_decided() {
        let mut c = checker();
        send(&mut c, 1, 0, 1_500); // 1.5 s of debt at 1,000 B/s: 0.5 s past the burst
        answer(&mut c, 1, 1, &OK);
        send(&mut c, 2, 2, 10);
        answer(&mut c, 2, 1_000, &throttled()); // answered after a pause: 0.5 s of debt left
        assert_eq!(found(c), Vec::<&str>::new());
        // Delivered once the debt was back within the burst, the same refusal is early.
        let mut c = checker();
        send(&mut c, 1, 0, 1_500);
        answer(&mut c, 1, 1, &OK);
        send(&mut c, 2, 700, 10);
        answer(&mut c, 2, 1_000, &throttled());
        assert_eq!(found(c), [inv::QUOTA_REFUSED_EARLY]);
    }

    #[test]
    fn an_unanswered_produce_may_have_been_charged() {
        let mut c = checker();
        send(&mut c, 1, 0, 3_000); // the node died before answering: it may have been charged
        send(&mut c, 2, 5, 10);
        answer(&mut c, 2, 5, &throttled());
        assert_eq!(found(c), Vec::<&str>::new());
    }
}
