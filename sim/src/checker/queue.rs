//! The queue-consume checks (docs/design.md §4.8), from what queue workers saw: every delivery
//! (its request's send and answer times, delivery count, receipt handle, record) and every
//! settle answer. For each message (a partition offset of a topic incarnation):
//!
//! 1. once an ack was answered 204, it is never delivered again: no delivery requested after
//!    that answer, and no delivery with a higher count than the acked lease's, ever;
//! 2. two unexpired leases never coexist: a delivery answered before the previous lease's end
//!    is a violation. A lease lasts at least from its request's send time for the visibility
//!    timeout (less the largest clock drift), pushed by each extend answered 204 to the
//!    extend's send time plus the timeout; a nack (answered 204, or ambiguously) frees it from
//!    its send time (in a cluster also one answered 410: a duplicated forwarded settle is
//!    applied once and refused once, and the refusal may arrive first); a restart of the
//!    owner's process since the lease was asked for voids it;
//! 3. delivery counts never decrease and grow between restarts: no two deliveries share a count
//!    unless the owner's process restarted between them and it is the highest count given (an
//!    owner answers a receive ahead of its count's journal entry when the previous count is
//!    durable, so a restart may lose that one count, which is then given again), and a delivery
//!    answered before another was asked for has the lower count;
//! 4. after the final drain, every acknowledged produce the final read finds was delivered, and
//!    acked (the drain acks all it receives: a message the queue stopped offering shows);
//! 5. a delivery carries what was produced at its offset, byte for byte;
//! 6. no two deliveries carry the same receipt handle (a stale one would settle the later).
//!
//! Redeliveries (count > 1) are counted by cause: the previous lease expired, was nacked, was
//! voided by an owner restart, or was never seen (its answer was lost). What a corruption-class
//! fault may explain (an offset that now holds another record, a lost ack) is excused once one
//! hit, and counted.

use std::collections::BTreeMap;

use narad_core::api::{LeasedRecord, SettleAction};
use narad_core::{Instant, PartitionKey, TopicId};

use super::{Checker, inv};
use crate::payload::parse_id;

/// Clocks of skewed nodes drift by up to 2 %: a lease is judged 3 % shorter than it is.
const DRIFT_MARGIN_PERCENT: u64 = 3;

/// How a settle of one handle ended, as its client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleSeen {
    /// 204 (or Ok in a batch).
    Ok,
    /// 410: the handle names no live lease.
    Stale,
    /// 5xx, 503 or no answer: it may or may not have happened.
    Ambiguous,
    /// A clean refusal that changed nothing (400, 404).
    Refused,
}

/// How settled one offset may be, as the clients saw it (`queue_lag.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settled {
    /// An ack of it was answered 204.
    Surely,
    /// An ack may have settled it (answered ambiguously, a 410 in a cluster, or a move to the
    /// dead-letter topic, reported or possible).
    Maybe,
    Not,
}

/// The queue's counters for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueVerdict {
    /// Deliveries clients saw.
    pub deliveries: u64,
    /// Of those, deliveries of a message delivered before (count > 1), by cause.
    pub redeliveries: u64,
    pub redelivered_expired: u64,
    pub redelivered_nack: u64,
    pub redelivered_restart: u64,
    pub redelivered_lost_reply: u64,
    /// Of the restart redeliveries, those that repeated the count an owner restart lost.
    pub repeated_count: u64,
    /// Acks answered 204.
    pub acks: u64,
    /// Settles answered 410.
    pub stale: u64,
    /// Acknowledged produces the final read found and the drain had to deliver.
    pub drain_required: u64,
    /// Anomalies excused because a corruption-class fault hit.
    pub excused_corruption: u64,
    /// Moves to the dead-letter topic the owners reported.
    pub dead_lettered: u64,
}

impl QueueVerdict {
    /// Redeliveries per delivery.
    pub fn duplicate_rate(&self) -> f64 {
        if self.deliveries == 0 { 0.0 } else { self.redeliveries as f64 / self.deliveries as f64 }
    }

    /// Adds another run's counters.
    pub fn add(&mut self, o: &QueueVerdict) {
        self.deliveries += o.deliveries;
        self.redeliveries += o.redeliveries;
        self.redelivered_expired += o.redelivered_expired;
        self.redelivered_nack += o.redelivered_nack;
        self.redelivered_restart += o.redelivered_restart;
        self.redelivered_lost_reply += o.redelivered_lost_reply;
        self.repeated_count += o.repeated_count;
        self.acks += o.acks;
        self.stale += o.stale;
        self.drain_required += o.drain_required;
        self.excused_corruption += o.excused_corruption;
        self.dead_lettered += o.dead_lettered;
    }

    /// The counters as JSON (sweep and run summaries).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "deliveries": self.deliveries,
            "redeliveries": self.redeliveries,
            "duplicate_delivery_rate": self.duplicate_rate(),
            "redelivered_expired": self.redelivered_expired,
            "redelivered_nack": self.redelivered_nack,
            "redelivered_restart": self.redelivered_restart,
            "redelivered_lost_reply": self.redelivered_lost_reply,
            "repeated_count_after_restart": self.repeated_count,
            "acks": self.acks,
            "stale_settles": self.stale,
            "drain_required": self.drain_required,
            "excused_corruption": self.excused_corruption,
            "dead_lettered": self.dead_lettered,
        })
    }
}

/// One delivery (one lease) of a message as a client saw it.
#[derive(Clone, Copy, Debug)]
struct Delivery {
    count: u32,
    sent: Instant,
    answered: Instant,
    /// The owner of the partition, as the commits named it (`None`: any node).
    owner: Option<u32>,
    /// The lease lasts at least until then (sim time).
    end: Instant,
    /// A nack (answered 204 or ambiguously) sent then may have freed it.
    freed: Option<Instant>,
}

/// What the checker knows about one message's queue life.
#[derive(Clone, Debug, Default)]
struct QueueMsg {
    /// The message the deliveries carried.
    id: Option<u64>,
    /// By delivery count.
    deliveries: BTreeMap<u32, Delivery>,
    /// Deliveries whose count an owner restart lost: a later delivery repeated it (and took
    /// its place in `deliveries`).
    voided: Vec<Delivery>,
    /// An ack answered 204: (answer time, count of the acked lease).
    acked: Option<(Instant, u32)>,
    /// Its owner reported it moved to the dead-letter topic then.
    moved: Option<Instant>,
}

/// The queue history.
#[derive(Clone, Debug, Default)]
pub(super) struct QueueHistory {
    /// The visibility timeout, in microseconds.
    visibility_us: u64,
    msgs: BTreeMap<(PartitionKey, u64), QueueMsg>,
    /// Receipt handle → (message, delivery count).
    handles: BTreeMap<String, ((PartitionKey, u64), u32)>,
    /// When each node's process died or started (a process that died voided its leases).
    restarts: Vec<Vec<Instant>>,
    /// Message ids some delivery carried, and those an ack may have settled (answered 204 or
    /// ambiguously; in a cluster also 410, see `queue_settled`).
    delivered: std::collections::BTreeSet<u64>,
    settled: std::collections::BTreeSet<u64>,
    /// Incarnations a receive of which got no clean answer (5xx, or none): it may have
    /// delivered messages no client saw, and their counts still move them to the dead-letter
    /// topic.
    unseen_receives: std::collections::BTreeSet<TopicId>,
    /// The final drain ran to its end (invariant 4 applies).
    drained: bool,
    pub(super) verdict: QueueVerdict,
}

impl QueueHistory {
    /// The messages of incarnation `inc` (of one `partition` if given) some client was
    /// delivered, each with its first known delivery (count, asked at).
    pub(super) fn msgs_of(
        &self,
        inc: TopicId,
        partition: Option<u32>,
    ) -> impl Iterator<Item = ((PartitionKey, u64), Option<(u32, Instant)>)> + '_ {
        self.msgs
            .iter()
            .filter(move |((key, _), _)| {
                key.topic == inc && partition.is_none_or(|p| p == key.partition)
            })
            .map(|(at, msg)| (*at, msg.deliveries.values().next().map(|d| (d.count, d.sent))))
    }

    /// True if the process of `owner` (any node's, if unknown) died or started within
    /// `from..=to`: a lease granted then may have been voided.
    fn restarted_between(&self, owner: Option<u32>, from: Instant, to: Instant) -> bool {
        let within = |times: &Vec<Instant>| times.iter().any(|&t| from <= t && t <= to);
        match owner {
            Some(node) => self.restarts.get(node as usize).is_some_and(within),
            None => self.restarts.iter().any(within),
        }
    }

    /// The shortest a lease asked for at `sent` can last (sim time).
    fn lease_end(&self, sent: Instant) -> Instant {
        let us = self.visibility_us * (100 - DRIFT_MARGIN_PERCENT) / 100;
        Instant(sent.0.saturating_add(us))
    }
}

impl Checker {
    /// A receive of `inc` got no clean answer: it may have delivered what no client saw.
    pub fn queue_receive_unseen(&mut self, inc: TopicId) {
        self.queue.unseen_receives.insert(inc);
    }

    /// Receives lease for `visibility_ms` (the nodes' `Config::queue_visibility_ms`).
    pub fn queue_visibility(&mut self, visibility_ms: u64) {
        self.queue.visibility_us = visibility_ms.saturating_mul(1_000);
    }

    /// Node `node`'s process died or started again: its leases are void.
    pub(super) fn queue_restarted(&mut self, node: u32) {
        let restarts = &mut self.queue.restarts;
        if restarts.len() <= node as usize {
            restarts.resize(node as usize + 1, Vec::new());
        }
        restarts[node as usize].push(self.now);
    }

    /// A queue anomaly: a violation, unless a corruption-class fault may explain it.
    pub(super) fn queue_violation(&mut self, invariant: &'static str, detail: String) {
        if self.corruption_hit {
            self.queue.verdict.excused_corruption += 1;
        } else {
            self.violation(invariant, detail);
        }
    }

    /// A receive of topic incarnation `inc` (as its client knew it) sent at `sent` leased
    /// `records`, answered now.
    pub fn queue_delivered(&mut self, inc: TopicId, sent: Instant, records: &[LeasedRecord]) {
        for leased in records {
            self.queue_delivery(inc, sent, leased);
        }
    }

    /// The incarnation a delivered record belongs to: where a commit placed its message at
    /// that partition and offset (a lagging node may resolve the name to another incarnation),
    /// else the one its client asked for.
    fn delivered_key(
        &self,
        inc: TopicId,
        id: Option<u64>,
        partition: u32,
        offset: u64,
    ) -> PartitionKey {
        let placed = id.and_then(|id| self.msgs.get(id as usize)).and_then(|msg| {
            msg.placed.iter().find(|(k, o)| k.partition == partition && *o == offset).map(|p| p.0)
        });
        placed.unwrap_or(PartitionKey { topic: inc, partition })
    }

    fn queue_delivery(&mut self, inc: TopicId, sent: Instant, leased: &LeasedRecord) {
        let record = &leased.record;
        let id = parse_id(&record.payload);
        let key = self.delivered_key(inc, id, record.partition, record.offset);
        if self.is_deleted(key.topic) {
            return;
        }
        self.queue.verdict.deliveries += 1;
        let Some(id) = self.check_record(Some(key), record) else { return };
        self.queue.delivered.insert(id);
        let at = (key, record.offset);
        self.check_same_record(at, id);
        let owner = self.owners.get(&key).copied();
        let count = leased.delivery_count;
        self.check_delivery_count(at, count);
        // The drain reads the event queue's clock, which may be ahead of the checker's.
        let answered = self.now.max(sent);
        let delivery =
            Delivery { count, sent, answered, owner, end: self.queue.lease_end(sent), freed: None };
        let reused = self.queue.handles.insert(leased.receipt_handle.clone(), (at, count));
        if let Some((before, before_count)) = reused {
            let detail = format!(
                "{key}@{}: delivery {count} carries handle {} of {}@{} delivery {before_count}",
                record.offset, leased.receipt_handle, before.0, before.1
            );
            self.queue_violation(inv::QUEUE_HANDLE_REUSED, detail);
        }
        let earlier = self.queue.msgs.get(&at).and_then(|m| {
            let highest = m.deliveries.keys().next_back() == Some(&count);
            m.deliveries.get(&count).map(|d| (*d, highest))
        });
        // The restart that lost the earlier count came after it was granted (after its request)
        // and before this one was granted (before its answer).
        let excused = earlier.is_some_and(|(d, highest)| {
            highest && self.queue.restarted_between(d.owner, d.sent, answered)
        });
        let known = self.queue.msgs.entry(at).or_default();
        known.id.get_or_insert(id);
        match earlier {
            Some((voided, _)) if excused => {
                known.voided.push(voided);
                self.queue.verdict.repeated_count += 1;
            }
            Some(_) => {
                let detail = format!("{key}@{}: delivery count {count} given twice", record.offset);
                return self.queue_violation(inv::QUEUE_COUNT, detail);
            }
            None => {}
        }
        known.deliveries.insert(count, delivery);
        self.check_acked(at);
    }

    /// An offset once delivered as one message never carries another (nor does the log).
    fn check_same_record(&mut self, at: (PartitionKey, u64), id: u64) {
        let before = self.queue.msgs.get(&at).and_then(|m| m.id).or(self.seen.get(&at).copied());
        if let Some(before) = before.filter(|&b| b != id) {
            let detail = format!("{}@{}: held message {before}, delivered {id}", at.0, at.1);
            self.queue_violation(inv::QUEUE_WRONG_RECORD, detail);
        }
    }

    /// Counts the redeliveries of `at` by the fate of the lease before each.
    fn count_redeliveries(&mut self, at: (PartitionKey, u64)) {
        let history = &self.queue;
        let msg = &history.msgs[&at];
        let mut v = history.verdict;
        v.redeliveries += msg.voided.len() as u64;
        v.redelivered_restart += msg.voided.len() as u64;
        for this in msg.deliveries.values().filter(|d| d.count > 1) {
            v.redeliveries += 1;
            match msg.deliveries.get(&(this.count - 1)) {
                None => v.redelivered_lost_reply += 1,
                Some(prev) if prev.freed.is_some() => v.redelivered_nack += 1,
                Some(prev)
                    if this.answered < prev.end
                        && history.restarted_between(prev.owner, prev.sent, this.answered) =>
                {
                    v.redelivered_restart += 1;
                }
                Some(_) => v.redelivered_expired += 1,
            }
        }
        self.queue.verdict = v;
    }

    /// The message the deliveries of `at` carried.
    pub(super) fn queue_message(&self, at: (PartitionKey, u64)) -> Option<u64> {
        self.queue.msgs.get(&at).and_then(|m| m.id)
    }

    /// How settled `at` may be (`queue_lag.rs`).
    pub(super) fn queue_settled_state(&self, at: (PartitionKey, u64)) -> Settled {
        let unseen = self.queue.unseen_receives.contains(&at.0.topic);
        let dead_letters = self.dead_letter.name.is_some();
        let Some(msg) = self.queue.msgs.get(&at) else {
            // Delivered unseen (seed 0x5: once with one delivery allowed), then moved.
            return if dead_letters && unseen { Settled::Maybe } else { Settled::Not };
        };
        if msg.acked.is_some() {
            return Settled::Surely;
        }
        // A move to the dead-letter topic may have settled any message delivered before: its
        // ack entry can be durable though a crash hid the move's completion; a delivery no
        // client saw counts too.
        let may_move = dead_letters && (!msg.deliveries.is_empty() || unseen);
        let maybe = msg.moved.is_some()
            || may_move
            || msg.id.is_some_and(|id| self.queue.settled.contains(&id));
        if maybe { Settled::Maybe } else { Settled::Not }
    }

    /// Its owner moved `at` to the dead-letter topic (now): invariant 7 from here on.
    pub(super) fn queue_moved(&mut self, at: (PartitionKey, u64), now: Instant) {
        let msg = self.queue.msgs.entry(at).or_default();
        msg.moved.get_or_insert(now);
        self.check_acked(at);
    }

    /// Invariant 1 for `at`: nothing delivered after (or beyond) an ack answered 204; and
    /// invariant 7 (`dead_letter.rs`): nothing delivered after a move to the dead-letter topic.
    fn check_acked(&mut self, at: (PartitionKey, u64)) {
        let msg = &self.queue.msgs[&at];
        if let Some(moved) = msg.moved
            && let Some(d) = msg.deliveries.values().find(|d| d.sent > moved).copied()
        {
            let detail = format!(
                "{}@{}: moved to the dead-letter topic at t={}, delivered again (count {}, \
                 asked at t={})",
                at.0,
                at.1,
                crate::clock::since_start(moved),
                d.count,
                crate::clock::since_start(d.sent)
            );
            return self.queue_violation(inv::QUEUE_DEAD_LETTER, detail);
        }
        let Some((acked_at, acked_count)) = msg.acked else { return };
        let again = msg.deliveries.values().find(|d| d.count > acked_count || d.sent > acked_at);
        if let Some(d) = again.copied() {
            let detail = format!(
                "{}@{}: ack of delivery {acked_count} answered 204 at t={}, delivered again \
                 (count {}, asked at t={})",
                at.0,
                at.1,
                crate::clock::since_start(acked_at),
                d.count,
                crate::clock::since_start(d.sent)
            );
            self.queue_violation(inv::QUEUE_ACKED_REDELIVERED, detail);
        }
    }

    /// Invariants 2 and 3 for `at`, over every pair of consecutive known deliveries (judged
    /// at the end: a nack answered at the same instant as the next delivery may be seen after
    /// it).
    fn check_leases(&mut self, at: (PartitionKey, u64)) {
        let msg = &self.queue.msgs[&at];
        let mut deliveries: Vec<Delivery> =
            msg.deliveries.values().chain(&msg.voided).copied().collect();
        deliveries.sort_by_key(|d| (d.count, d.answered));
        let mut problems = Vec::new();
        for pair in deliveries.windows(2) {
            let (old, new) = (pair[0], pair[1]);
            let nacked = old.freed.is_some_and(|f| f <= new.answered);
            let restarted = self.queue.restarted_between(old.owner, old.sent, new.answered);
            if new.answered < old.end && !nacked && !restarted {
                problems.push((
                    inv::QUEUE_DOUBLE_LEASE,
                    format!(
                        "{}@{}: delivery {} answered at t={} while delivery {} (asked at t={}) \
                     leased it until t={} at least",
                        at.0,
                        at.1,
                        new.count,
                        crate::clock::since_start(new.answered),
                        old.count,
                        crate::clock::since_start(old.sent),
                        crate::clock::since_start(old.end),
                    ),
                ));
            }
        }
        for a in &deliveries {
            let out_of_order = |b: &&Delivery| {
                a.answered < b.sent
                    && (a.count > b.count
                        || (a.count == b.count
                            && !self.queue.restarted_between(a.owner, a.sent, b.answered)))
            };
            if let Some(b) = deliveries.iter().find(out_of_order) {
                problems.push((inv::QUEUE_COUNT, format!(
                    "{}@{}: delivery count {} answered before a delivery with count {} was asked",
                    at.0, at.1, a.count, b.count
                )));
            }
        }
        for (invariant, detail) in problems {
            self.queue_violation(invariant, detail);
        }
    }

    /// A settle (`action`) of `handle` sent at `sent` ended as `seen` (now).
    pub fn queue_settled(
        &mut self,
        handle: &str,
        action: SettleAction,
        sent: Instant,
        seen: SettleSeen,
    ) {
        let Some(&(at, count)) = self.queue.handles.get(handle) else { return };
        if self.is_deleted(at.0.topic) {
            return;
        }
        match seen {
            SettleSeen::Stale => self.queue.verdict.stale += 1,
            SettleSeen::Ok if action == SettleAction::Ack => self.queue.verdict.acks += 1,
            _ => {}
        }
        let end = self.queue.lease_end(sent);
        let (now, cluster) = (self.now, self.cluster);
        let Some(msg) = self.queue.msgs.get_mut(&at) else { return };
        let may_ack = match seen {
            SettleSeen::Ok | SettleSeen::Ambiguous => true,
            SettleSeen::Stale => cluster,
            SettleSeen::Refused => false,
        };
        if let (SettleAction::Ack, true, Some(id)) = (action, may_ack, msg.id) {
            self.queue.settled.insert(id);
        }
        match (action, seen) {
            (SettleAction::Ack, SettleSeen::Ok) => {
                let earliest = msg.acked.map_or((now, count), |a| a.min((now, count)));
                msg.acked = Some(earliest);
                self.check_acked(at);
            }
            (SettleAction::Extend, SettleSeen::Ok) => {
                if let Some(d) = msg.deliveries.get_mut(&count) {
                    d.end = d.end.max(end);
                }
            }
            // In a cluster a 410 may answer a nack that happened: a duplicated forwarded
            // settle is applied once and refused once, and either reply may arrive first.
            (SettleAction::Nack, SettleSeen::Ok | SettleSeen::Ambiguous)
            | (SettleAction::Nack, SettleSeen::Stale)
                if seen != SettleSeen::Stale || cluster =>
            {
                if let Some(d) = msg.deliveries.get_mut(&count) {
                    d.freed = Some(d.freed.map_or(sent, |f| f.min(sent)));
                }
            }
            _ => {}
        }
    }

    /// The final drain delivered and acked everything it could.
    pub fn queue_drained(&mut self) {
        self.queue.drained = true;
    }

    /// The checks that need the final read (from `verdict`).
    pub(super) fn queue_verdict_checks(&mut self, read_complete: bool) {
        let keys: Vec<(PartitionKey, u64)> = self.queue.msgs.keys().copied().collect();
        for at in keys {
            if self.is_deleted(at.0.topic) {
                continue;
            }
            self.check_leases(at);
            self.count_redeliveries(at);
        }
        if self.queue.drained && read_complete {
            self.check_drained();
        }
        if read_complete {
            self.check_dead_letters();
        }
        self.check_queue_waits();
        self.check_delivered_records();
    }

    /// Invariant 4, after the drain: every acknowledged produce the final read found (of a
    /// topic not deleted, not deleted by retention) was delivered and then acked (the drain
    /// acks whatever it receives, so a message the queue stopped offering shows). Only runs
    /// with queue workers drain.
    fn check_drained(&mut self) {
        let mut missing = Vec::new();
        let mut required = 0;
        for (id, msg) in self.msgs.iter().enumerate() {
            let live = msg.found_on.iter().any(|k| !self.is_deleted(k.topic));
            if !msg.acked || msg.visible == 0 || !live || self.deleted_by_retention(&msg.placed) {
                continue;
            }
            required += 1;
            if !self.queue.settled.contains(&(id as u64)) && !self.dead_letter_settled(id as u64) {
                let delivered = self.queue.delivered.contains(&(id as u64));
                missing.push((id, msg.found_on.clone(), delivered));
            }
        }
        self.queue.verdict.drain_required = required;
        for (id, on, delivered) in missing.iter().take(5) {
            let what = if *delivered { "delivered, never acked" } else { "never delivered" };
            let detail = format!(
                "message {id} (on {on:?}) acked and readable, {what} by the end of the drain"
            );
            self.queue_violation(inv::QUEUE_UNDELIVERED, detail);
        }
        if missing.len() > 5 {
            let detail = format!("... {} messages never acked in all", missing.len());
            self.queue_violation(inv::QUEUE_UNDELIVERED, detail);
        }
    }

    /// Offsets the final read found holding another message than the queue delivered there.
    fn check_delivered_records(&mut self) {
        let wrong: Vec<String> = self
            .queue
            .msgs
            .iter()
            .filter_map(|(at, m)| {
                let (seen, id) = (*self.seen.get(at)?, m.id?);
                (seen != id && !self.is_deleted(at.0.topic)).then(|| {
                    format!("{}@{}: delivered message {id}, the log holds {seen}", at.0, at.1)
                })
            })
            .collect();
        for detail in wrong.into_iter().take(5) {
            self.queue_violation(inv::QUEUE_WRONG_RECORD, detail);
        }
    }

    /// The time of the event being processed (when a queue request is sent).
    pub fn queue_now(&self) -> Instant {
        self.now
    }

    /// The queue's counters.
    pub fn queue_verdict(&self) -> QueueVerdict {
        self.queue.verdict
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
