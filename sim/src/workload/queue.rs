//! Queue workers (docs/design.md §4.8): clients that receive from live topics (topic-wide or one
//! partition, 1 to 10 messages, through whichever node the simulation picks; half of the
//! receives of a worker holding no lease long-poll, `wait` up to half the request timeout) and
//! then, per
//! lease, ack it, nack it, extend it and ack later, ack it only after it expired (a slow
//! worker: its handle is stale by then), or drop it (the worker crashed mid-lease: never
//! settled, the lease expires). A settle whose answer is ambiguous (a 5xx, a 503, a lost reply)
//! is retried (through another node, as the simulation picks one per request); the checker
//! (`checker/queue.rs`) sees every delivery and every settle answer. Every draw comes from the
//! workload's queue stream, so seeds without queue workers keep every other draw.

use narad_core::api::{LeasedRecord, SettleAction};
use narad_core::{ClientError, ClientOp, ClientReply, Instant, TopicId};
use rand::RngExt;

use super::replies::Next;
use super::{Pending, Workload};
use crate::checker::{Checker, SettleSeen, inv};

/// Ambiguous settles of one lease are tried this often before the worker lets it expire.
const SETTLE_RETRIES: u32 = 4;

/// What a worker will do with a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    Ack,
    Nack,
    /// Extend it once, then ack.
    ExtendThenAck,
    /// Ack it only after the lease expired (the handle should be stale).
    LateAck,
}

/// A lease a worker holds.
#[derive(Clone, Debug)]
pub(super) struct Held {
    name: String,
    handle: String,
    plan: Plan,
    /// When the worker acts on it (simulated time).
    due: Instant,
    /// Ambiguous settles of it so far.
    retries: u32,
}

/// A queue request in flight (kept whole so it can be retried).
#[derive(Clone, Debug)]
pub(super) enum QueueOp {
    Receive { name: String, inc: TopicId, partition: Option<u32>, max: u32, wait_ms: u64 },
    Settle { name: String, action: SettleAction, batch: bool, items: Vec<Held> },
}

impl QueueOp {
    pub(super) fn op(&self) -> ClientOp {
        match self {
            QueueOp::Receive { name, partition, max, wait_ms, .. } => ClientOp::Receive {
                topic: name.clone(),
                partition: *partition,
                max: *max,
                wait_ms: *wait_ms,
            },
            QueueOp::Settle { name, action, batch, items } => ClientOp::Settle {
                topic: name.clone(),
                handles: items.iter().map(|h| h.handle.clone()).collect(),
                action: *action,
                batch: *batch,
            },
        }
    }
}

/// One worker's state.
#[derive(Clone, Debug, Default)]
pub(super) struct QueueWorker {
    held: Vec<Held>,
    /// Settles to send again first (their earlier attempt was ambiguous).
    retry: Vec<QueueOp>,
    /// When the request in flight was sent (and, for the long-poll check, how).
    sent: Instant,
    wait_sent: Option<crate::checker::LongPollSent>,
}

impl Workload {
    /// Worker `w` wakes: settle what is due, else receive, else sleep or finish.
    pub(super) fn queue_next(
        &mut self,
        w: usize,
        checker: &Checker,
    ) -> Result<Pending, super::Wake> {
        let now = checker.queue_now();
        if let Some(op) = self.workers[w].retry.pop() {
            return Ok(Pending::Queue { worker: w, op });
        }
        if let Some(op) = self.due_settle(w, now) {
            return Ok(Pending::Queue { worker: w, op });
        }
        let held = &self.workers[w].held;
        if self.producers_finished() && held.is_empty() {
            return Err(super::Wake::Done);
        }
        let earliest = held.iter().map(|h| h.due).min();
        let live = self.topics.live();
        if held.len() >= 10 || live.is_empty() || self.queue_rng.random_bool(0.2) {
            let until = earliest.map_or(20_000, |due| due.0.saturating_sub(now.0)).min(50_000);
            return Err(super::Wake::Sleep(until.max(500)));
        }
        let (name, inc, partitions) = live[self.queue_rng.random_range(0..live.len())].clone();
        let partition =
            self.queue_rng.random_bool(0.4).then(|| self.queue_rng.random_range(0..partitions));
        let max = self.queue_rng.random_range(1..=10);
        // A worker with nothing to settle may long-poll (well within its request timeout).
        let wait_ms = if held.is_empty() && self.queue_rng.random_bool(0.5) {
            self.queue_rng.random_range(20..=(self.cfg.request_timeout_ms / 2).max(20))
        } else {
            0
        };
        let op = QueueOp::Receive { name, inc, partition, max, wait_ms };
        Ok(Pending::Queue { worker: w, op })
    }

    /// A settle of the leases that are due, all of one topic and one action.
    fn due_settle(&mut self, w: usize, now: Instant) -> Option<QueueOp> {
        let first = self.workers[w].held.iter().position(|h| h.due <= now)?;
        let (name, plan) = {
            let h = &self.workers[w].held[first];
            (h.name.clone(), h.plan)
        };
        let action = match plan {
            Plan::Ack | Plan::LateAck => SettleAction::Ack,
            Plan::Nack => SettleAction::Nack,
            Plan::ExtendThenAck => SettleAction::Extend,
        };
        let same = |h: &Held| {
            h.due <= now
                && h.name == name
                && (h.plan == plan
                    || action == SettleAction::Ack && matches!(h.plan, Plan::Ack | Plan::LateAck))
        };
        let held = std::mem::take(&mut self.workers[w].held);
        let (mut items, rest): (Vec<Held>, Vec<Held>) = held.into_iter().partition(same);
        self.workers[w].held = rest;
        let take = self.queue_rng.random_range(1..=items.len());
        self.workers[w].held.extend(items.split_off(take));
        let batch = items.len() > 1 || self.queue_rng.random_bool(0.3);
        Some(QueueOp::Settle { name, action, batch, items })
    }

    /// The request of worker `w` reached a node now.
    pub(super) fn queue_sent(&mut self, w: usize, checker: &Checker) {
        self.workers[w].sent = checker.queue_now();
        self.workers[w].wait_sent = Some(checker.long_poll_sent());
    }

    /// The answer to worker `w`'s `op` (`None`: lost or timed out).
    pub(super) fn queue_answer(
        &mut self,
        w: usize,
        op: &QueueOp,
        reply: Option<&ClientReply>,
        checker: &mut Checker,
    ) -> Next {
        let sent = self.workers[w].sent;
        match op {
            QueueOp::Receive { inc, partition, max, wait_ms, .. } => match reply {
                Some(ClientReply::Leased(records)) => {
                    let outside =
                        records.iter().find(|r| partition.is_some_and(|p| r.record.partition != p));
                    if records.len() > *max as usize || outside.is_some() {
                        let detail = format!(
                            "a receive of at most {max} from partition {partition:?} answered {} \
                             messages (one from partition {:?})",
                            records.len(),
                            outside.map(|r| r.record.partition)
                        );
                        checker.violation(inv::PROTOCOL, detail);
                    }
                    checker.queue_delivered(*inc, sent, records);
                    if records.is_empty()
                        && *wait_ms > 0
                        && let Some(sent) = self.workers[w].wait_sent
                    {
                        checker.queue_wait_empty(*inc, *partition, sent);
                    }
                    self.hold(w, op, records, checker.queue_now());
                }
                // A 400 for a deleted incarnation: the name now has another, perhaps with fewer
                // partitions (seed 0x2ac9).
                Some(ClientReply::Error(e))
                    if e.http_status() == 400 && !self.cluster && !checker.is_deleted(*inc) =>
                {
                    checker.violation(inv::PROTOCOL, format!("queue receive refused: {e}"));
                }
                Some(ClientReply::Error(e)) if e.http_status() < 500 => {
                    checker.counters.consume_errors += 1;
                }
                Some(ClientReply::Error(_)) | None => {
                    checker.counters.consume_errors += 1;
                    checker.queue_receive_unseen(*inc);
                }
                Some(other) => {
                    checker.violation(inv::PROTOCOL, format!("receive answered {other:?}"));
                }
            },
            QueueOp::Settle { items, action, .. } => {
                self.settle_answer(w, op, items, *action, reply, checker);
            }
        }
        Next::Finished
    }

    fn hold(&mut self, w: usize, op: &QueueOp, records: &[LeasedRecord], now: Instant) {
        let QueueOp::Receive { name, .. } = op else { return };
        let vis = self.cfg.queue_visibility_ms * 1_000;
        for leased in records {
            let roll = self.queue_rng.random_range(0..100);
            let (plan, after) = match roll {
                0..55 => (Plan::Ack, self.queue_rng.random_range(0..=vis / 4)),
                55..65 => (Plan::Nack, self.queue_rng.random_range(0..=vis / 4)),
                65..77 => (Plan::ExtendThenAck, vis / 2 + self.queue_rng.random_range(0..=vis / 4)),
                77..87 => {
                    (Plan::LateAck, vis + vis / 10 + self.queue_rng.random_range(0..=vis / 2))
                }
                _ => continue, // the worker crashed holding it: the lease expires
            };
            self.workers[w].held.push(Held {
                name: name.clone(),
                handle: leased.receipt_handle.clone(),
                plan,
                due: Instant(now.0 + after),
                retries: 0,
            });
        }
    }

    fn settle_answer(
        &mut self,
        w: usize,
        op: &QueueOp,
        items: &[Held],
        action: SettleAction,
        reply: Option<&ClientReply>,
        checker: &mut Checker,
    ) {
        let sent = self.workers[w].sent;
        let results: Vec<SettleSeen> = match reply {
            Some(ClientReply::Settled(results)) if results.len() == items.len() => {
                results.iter().map(seen_of).collect()
            }
            // A 404: the topic was deleted meanwhile (its leases went with it).
            Some(ClientReply::Error(e)) if e.http_status() == 400 && !self.cluster => {
                checker.violation(inv::PROTOCOL, format!("settle refused whole: {e}"));
                vec![SettleSeen::Refused; items.len()]
            }
            Some(ClientReply::Error(e)) if e.http_status() < 500 => {
                vec![SettleSeen::Refused; items.len()]
            }
            Some(ClientReply::Error(_)) | None => vec![SettleSeen::Ambiguous; items.len()],
            Some(other) => {
                checker.violation(inv::PROTOCOL, format!("settle answered {other:?}"));
                vec![SettleSeen::Refused; items.len()]
            }
        };
        let mut again = Vec::new();
        let now = checker.queue_now();
        for (item, seen) in items.iter().zip(results) {
            checker.queue_settled(&item.handle, action, sent, seen);
            match seen {
                SettleSeen::Ambiguous if item.retries < SETTLE_RETRIES => {
                    again.push(Held { retries: item.retries + 1, ..item.clone() });
                }
                SettleSeen::Ok if action == SettleAction::Extend => {
                    let due = Instant(now.0 + self.cfg.queue_visibility_ms * 1_000 / 3);
                    self.workers[w].held.push(Held { plan: Plan::Ack, due, ..item.clone() });
                }
                _ => {}
            }
        }
        if !again.is_empty() {
            let QueueOp::Settle { name, batch, .. } = op else { return };
            let batch = *batch || again.len() > 1;
            let retry = QueueOp::Settle { name: name.clone(), action, batch, items: again };
            self.workers[w].retry.push(retry);
        }
    }
}

/// How a client reads one settle result.
fn seen_of(result: &Result<(), ClientError>) -> SettleSeen {
    match result {
        Ok(()) => SettleSeen::Ok,
        Err(ClientError::StaleHandle(_)) => SettleSeen::Stale,
        Err(e) if e.http_status() >= 500 => SettleSeen::Ambiguous,
        Err(_) => SettleSeen::Refused,
    }
}
