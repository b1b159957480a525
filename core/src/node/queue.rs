//! Queue consumers through the node (docs/design.md §4.8): a client's receive goes through the
//! topic's partitions (ours, or their owners' over node RPC) until one leases something; a
//! settle goes to each handle's owner. On the owner a receive reserves offsets in the
//! partition's queue, reads them, journals their delivery counts and answers once those are
//! durable; an ack answers once its journal entry is.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::cluster::Forwarded;
use super::oldest::OldestProbes;
use super::parked::Waiter;
use super::receive_watch::ReceiveWatches;
use super::{IoPurpose, Node};
use crate::access::Principal;
use crate::api::{ClientError, ClientReply, ConsumedRecord, LeasedRecord, SettleAction};
use crate::constants::{
    MAX_CONSUME_BYTES, MAX_CONSUME_WAIT_MS, MAX_RECEIVE_MESSAGES, MAX_SETTLE_HANDLES,
};
use crate::ids::{Instant, NodeId, PartitionKey, RequestId, TopicId};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use crate::partition::ReadPlan;
use crate::peer::{PeerMessage, WireConsumed, WireError, WireLeased};
use crate::queue::{
    ConsumerJournal, JournalEntry, JournalIo, PartitionQueue, ReceiptHandle, RecoveredJournal,
    nonce,
};
use crate::recovery_error::RecoveryError;

/// What waits for a consumer-journal group commit.
#[derive(Clone, Debug)]
pub(super) enum JournalWaiter {
    /// The delivery entries of an owner receive.
    Receive(u64),
    /// The delivery entries of a receive answered ahead of them (`PartitionQueue::grant_ahead`):
    /// each `(offset, count)` becomes durable.
    DeliveredAhead { key: PartitionKey, counts: Vec<(u64, u32)> },
    /// The ack entry of one handle of a settle.
    Ack { batch: u64, slot: usize, key: PartitionKey, offset: u64 },
    /// The ack entry of a message whose dead-letter copy is durable (`dead_letter.rs`).
    DeadLettered { key: PartitionKey, offset: u64 },
}

/// Whether a pass of a receive over one partition is finished (answered, or waiting for a read
/// or the journal) or must go again (it only moved messages to the dead-letter topic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Done,
    Again,
}

/// Who asked one of our partition queues for messages.
#[derive(Clone, Copy, Debug)]
enum ReceiveAsker {
    /// A client receive of this node (`Consumers::client_receives`).
    Client(u64),
    /// Another node, for its client; it waits on this node until `until` if given.
    Peer { from: NodeId, id: u64, max: u32, until: Option<Instant> },
}

/// A receive served by one of our partition queues: reading, then journaling.
struct OwnerReceive {
    asker: ReceiveAsker,
    key: PartitionKey,
    max: u32,
    reserved: Vec<u64>,
    granted: Vec<Granted>,
}

/// A delivery granted, waiting for its journal entry.
struct Granted {
    record: WireConsumed,
    nonce: u64,
    count: u32,
}

/// A client's receive going through the topic's partitions in turn.
struct ClientReceive {
    request: RequestId,
    /// Whom it is for: each owner asked checks the grant again.
    who: Principal,
    topic: String,
    topic_id: TopicId,
    partitions: Vec<u32>,
    next: usize,
    max: u32,
    /// A long-poll: a round that finds nothing parks until then (`node/long_poll.rs`).
    until: Option<Instant>,
    /// Partitions of this round that failed (5xx), and the first failure: a round where every
    /// partition failed answers it, not "nothing available".
    failed: usize,
    failure: Option<ClientError>,
    /// Leased this round from the partitions asked before: a receive of several partitions
    /// fills up to `max` from consecutive partitions this node owns.
    leased: Vec<LeasedRecord>,
}

/// Who waits for a settle's results.
#[derive(Clone, Copy, Debug)]
enum SettleAsker {
    Client(RequestId),
    Peer { from: NodeId, id: u64 },
}

/// A settle waiting for a result per handle.
struct SettleBatch {
    asker: SettleAsker,
    results: Vec<Option<Result<(), ClientError>>>,
}

/// Everything the node keeps for queue consumers.
pub(super) struct Consumers {
    /// The queue of every partition we own that a consumer touched.
    pub(super) queues: BTreeMap<PartitionKey, PartitionQueue>,
    pub(super) journal: ConsumerJournal<JournalWaiter>,
    /// Journal files start-up found stale, deleted before the node serves.
    pub(super) stale_files: Vec<FileId>,
    owner_receives: BTreeMap<u64, OwnerReceive>,
    client_receives: BTreeMap<u64, ClientReceive>,
    settles: BTreeMap<u64, SettleBatch>,
    next_id: u64,
    /// Where each topic's next receive starts, so receives spread over its partitions.
    cursors: BTreeMap<TopicId, u32>,
    /// What this owner's nonces are derived from (the seed and the start instant).
    secret: u64,
    /// Records read ahead of the receives, per partition (`ReadAhead`).
    read_ahead: BTreeMap<PartitionKey, ReadAhead>,
    /// Partitions where a message became available again since the node last looked (a
    /// nack, a released reservation, a failed delivery, ack or move): their parked receives
    /// try again at the next pump.
    pub(super) available_again: BTreeSet<PartitionKey>,
    pub(super) counters: QueueCounters,
    /// What is known of each partition's oldest unsettled message (`node/oldest.rs`).
    pub(super) oldest: OldestProbes,
    /// Other owners watching for our parked topic-wide receives (`node/receive_watch.rs`).
    pub(super) watches: ReceiveWatches,
}

/// What `Stats` reports of queue consumers.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct QueueCounters {
    pub deliveries: u64,
    pub acks: u64,
    pub dead_lettered: u64,
    pub journal_syncs: u64,
}

impl Consumers {
    /// The consumer state of a starting node, from the journal files among `files`.
    pub(super) fn recover(
        files: &BTreeMap<FileId, Bytes>,
        config: &super::Config,
        started: Instant,
    ) -> Result<Consumers, RecoveryError> {
        let journal_files: BTreeMap<u64, Bytes> = files
            .iter()
            .filter_map(|(file, bytes)| match file {
                FileId::ConsumerJournal { number } => Some((*number, bytes.clone())),
                _ => None,
            })
            .collect();
        let found = crate::queue::recover(&journal_files)?;
        let secret = crate::queue::owner_secret(config.seed, started);
        let journal = ConsumerJournal::recovered(&found, config.consumer_journal_compact_bytes)
            .with_linger(config.consumer_journal_linger);
        Ok(Consumers::recovered(found, journal, secret))
    }

    /// The consumer state start-up rebuilt from the journal files.
    fn recovered(
        found: RecoveredJournal,
        journal: ConsumerJournal<JournalWaiter>,
        secret: u64,
    ) -> Self {
        let stale_files =
            found.stale.iter().map(|&number| FileId::ConsumerJournal { number }).collect();
        let queues = found
            .queues
            .into_iter()
            .map(|(key, durable)| (key, PartitionQueue::from_durable(durable)))
            .collect();
        Consumers {
            queues,
            journal,
            stale_files,
            owner_receives: BTreeMap::new(),
            client_receives: BTreeMap::new(),
            settles: BTreeMap::new(),
            next_id: 0,
            cursors: BTreeMap::new(),
            secret,
            read_ahead: BTreeMap::new(),
            available_again: BTreeSet::new(),
            counters: QueueCounters::default(),
            oldest: OldestProbes::default(),
            watches: ReceiveWatches::default(),
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// `key`@`offset` is settled: its read-ahead copy is no longer needed.
    pub(super) fn drop_read_ahead(&mut self, key: PartitionKey, offset: u64) {
        if let Some(ahead) = self.read_ahead.get_mut(&key) {
            ahead.drop_offset(offset);
        }
    }

    /// A partition's topic is gone: its queue and read-ahead go too.
    pub(super) fn forget(&mut self, key: PartitionKey) {
        self.queues.remove(&key);
        self.read_ahead.remove(&key);
        self.oldest.forget(key);
    }

    /// The timestamp of `key`@`offset` if its record is read ahead.
    pub(super) fn read_ahead_timestamp(&self, key: PartitionKey, offset: u64) -> Option<u64> {
        let ahead = self.read_ahead.get(&key)?;
        ahead.records.get(&offset).map(|record| record.timestamp_ms)
    }

    /// Every partition queue's own consistency, and the journal's operations in flight
    /// against the node's (`Node::check_invariants`).
    pub(super) fn check(&self, journal_ios: usize, deep: bool) -> Result<(), String> {
        let expected = self.journal.ops_in_flight();
        if journal_ios != expected {
            return Err(format!(
                "consumer journal: {journal_ios} operations in flight, {expected} awaited"
            ));
        }
        if deep {
            for (key, queue) in &self.queues {
                queue.check().map_err(|e| format!("queue of {key}: {e}"))?;
            }
        }
        self.watches.check()
    }
}

/// Records a receive's read brought beyond what it reserved, kept for the next receives of the
/// partition so that most of them need no read: committed records never change, so a copy is
/// as good as the file. Bounded in bytes; an entry goes once its offset is settled.
#[derive(Default)]
struct ReadAhead {
    records: BTreeMap<u64, WireConsumed>,
    bytes: usize,
}

/// Records a receive's read asks for at least (its own, then read-ahead).
const READ_AHEAD_RECORDS: u64 = 256;
/// Payload bytes kept read ahead per partition.
const READ_AHEAD_BYTES: usize = 1 << 20;

impl ReadAhead {
    fn keep(&mut self, record: WireConsumed) {
        let size = record.payload.len() + record.key.as_ref().map_or(0, |k| k.len());
        if self.bytes + size <= READ_AHEAD_BYTES && !self.records.contains_key(&record.offset) {
            self.bytes += size;
            self.records.insert(record.offset, record);
        }
    }

    fn drop_offset(&mut self, offset: u64) {
        if let Some(record) = self.records.remove(&offset) {
            self.bytes -= record.payload.len() + record.key.as_ref().map_or(0, |k| k.len());
        }
    }

    fn drop_below(&mut self, start: u64) {
        while let Some((&offset, _)) = self.records.first_key_value() {
            if offset >= start {
                break;
            }
            self.drop_offset(offset);
        }
    }

    fn has_all(&self, offsets: &[u64]) -> bool {
        offsets.iter().all(|o| self.records.contains_key(o))
    }
}

/// The answer of a receive that would park past `PARKED_MAX` (503: back off and retry).
fn parked_full(parked: usize) -> ClientError {
    ClientError::Overloaded(format!("{parked} long-polls are parked on this node; retry later"))
}

fn stale(what: &str) -> ClientError {
    ClientError::StaleHandle(format!("receipt handle {what}; do not retry"))
}

impl Node {
    /// `ClientOp::Receive`: validate, then try the topic's partitions in turn.
    pub(super) fn receive(
        &mut self,
        request: RequestId,
        topic: &str,
        partition: Option<u32>,
        (max, wait_ms): (u32, u64),
        who: &Principal,
    ) {
        let Some(info) = self.meta.topic(topic) else {
            let error = self.unknown_topic(topic);
            return self.reply(request, ClientReply::Error(error));
        };
        let (count, topic_id) = (info.partitions, info.id);
        let error = if !(1..=MAX_RECEIVE_MESSAGES).contains(&max) {
            Some(format!("max must be 1 to {MAX_RECEIVE_MESSAGES}, not {max}"))
        } else {
            partition.filter(|&p| p >= count).map(|p| {
                format!("partition {p} out of range: topic `{topic}` has {count} partitions")
            })
        };
        if let Some(message) = error {
            return self.reply(request, ClientReply::Error(ClientError::BadRequest(message)));
        }
        let partitions = match partition {
            Some(p) => vec![p],
            None => {
                let cursor = self.consumers.cursors.entry(topic_id).or_insert(0);
                let first = *cursor % count;
                *cursor = first + 1;
                (0..count).map(|i| (first + i) % count).collect()
            }
        };
        let id = self.consumers.next_id();
        let until = (wait_ms > 0).then(|| self.now.plus_millis(wait_ms.min(MAX_CONSUME_WAIT_MS)));
        let topic = topic.to_string();
        let pending = ClientReceive {
            request,
            who: who.clone(),
            topic,
            topic_id,
            partitions,
            next: 0,
            max,
            until,
            failed: 0,
            failure: None,
            leased: Vec::new(),
        };
        self.consumers.client_receives.insert(id, pending);
        self.next_partition(id);
    }

    /// Asks the next partition of a client receive, or answers it (with what earlier
    /// partitions leased, or nothing available).
    fn next_partition(&mut self, id: u64) {
        loop {
            let Some(pending) = self.consumers.client_receives.get_mut(&id) else { return };
            let next = pending.partitions.get(pending.next).copied();
            let filling = !pending.leased.is_empty();
            let me = self.config.node_id;
            let local = |p| self.meta.owner(PartitionKey { topic: pending.topic_id, partition: p });
            if filling && next.is_none_or(|p| local(p) != Some(me)) {
                // Only partitions this node owns fill a receive that has leased something: a
                // hop to another owner would hold those leases for its round trip, or timeout.
                return self.answer_receive_leased(id);
            }
            let Some(partition) = next else {
                if pending.failed == pending.partitions.len()
                    && let Some(error) = pending.failure.take()
                {
                    return self.answer_receive_empty(id, Err(error));
                }
                return match pending.until.filter(|&until| until > self.now) {
                    // A watch answered during the round: it runs again instead of parking.
                    Some(_) if self.consumers.watches.take_woken(id) => self.resume_receive(id),
                    Some(until) => self.park_receive(id, until),
                    None => self.answer_receive_empty(id, Ok(())),
                };
            };
            pending.next += 1;
            let key = PartitionKey { topic: pending.topic_id, partition };
            let max = pending.max - pending.leased.len() as u32;
            let single = pending.partitions.len() == 1;
            match self.meta.owner(key) {
                Some(owner) if owner == self.config.node_id => {
                    return self.lease_local(ReceiveAsker::Client(id), key, max);
                }
                Some(owner) if self.meta.is_alive(owner) => {
                    // One partition: its owner does the waiting. Several: each is asked
                    // without (this node waits on the ones it owns).
                    let wait_ms = match pending.until.filter(|_| single) {
                        Some(until) => until.0.saturating_sub(self.now.0) / 1_000,
                        None => 0,
                    };
                    if single {
                        pending.until = None;
                    }
                    let kind = Forwarded::Receive { pending: id };
                    let who = pending.who.clone();
                    return self.forward(owner, kind, |fid| PeerMessage::Receive {
                        id: fid,
                        who,
                        target: key,
                        max,
                        wait_ms,
                    });
                }
                owner if single => {
                    let who = owner.map_or_else(|| "unknown".into(), |n| format!("node {}", n.0));
                    let message = format!("the owner of this partition ({who}) is down");
                    return self.on_partition_leased(id, Err(ClientError::Unavailable(message)));
                }
                _ => {} // a dead owner's partition is skipped
            }
        }
    }

    /// One partition of a client receive answered.
    pub(super) fn on_partition_leased(
        &mut self,
        id: u64,
        result: Result<Vec<LeasedRecord>, ClientError>,
    ) {
        let Some(pending) = self.consumers.client_receives.get(&id) else { return };
        let single = pending.partitions.len() == 1;
        match result {
            Ok(leased) if leased.is_empty() => self.next_partition(id),
            Ok(leased) if !single => {
                let pending = self.consumers.client_receives.get_mut(&id).expect("present above");
                pending.leased.extend(leased);
                if pending.leased.len() < pending.max as usize {
                    self.next_partition(id);
                } else {
                    self.answer_receive_leased(id);
                }
            }
            // A later partition refused (its topic just deleted, say): answer what was leased.
            Err(_) if !pending.leased.is_empty() => self.answer_receive_leased(id),
            Err(error) if !single && error.http_status() >= 500 => {
                tracing::debug!(%error, "a partition of a queue receive failed; trying the next");
                if let Some(pending) = self.consumers.client_receives.get_mut(&id) {
                    pending.failed += 1;
                    pending.failure.get_or_insert(error);
                }
                self.next_partition(id);
            }
            result => {
                let done = self.consumers.client_receives.remove(&id).expect("present above");
                self.consumers.watches.forget(id);
                let reply = result.map_or_else(ClientReply::Error, ClientReply::Leased);
                self.reply(done.request, reply);
            }
        }
    }

    /// A client receive's partition was tried on another node and gave no answer.
    pub(super) fn on_receive_forward_failed(&mut self, id: u64, error: ClientError) {
        self.on_partition_leased(id, Err(error));
    }

    /// Leases up to `max` messages of our partition `key` for `asker`. A pass that only moved
    /// messages to the dead-letter topic goes again: an empty answer means nothing available.
    fn lease_local(&mut self, asker: ReceiveAsker, key: PartitionKey, max: u32) {
        while self.lease_pass(asker, key, max) == Pass::Again {}
    }

    /// One pass of `lease_local`.
    fn lease_pass(&mut self, asker: ReceiveAsker, key: PartitionKey, max: u32) -> Pass {
        if let Some(reason) = self.consumers.journal.latched() {
            let error = ClientError::Internal(format!(
                "consumer journal failed ({reason}); this node serves no queue receive until it \
                 restarts"
            ));
            self.finish_owner_receive(asker, key, Err(error));
            return Pass::Done;
        }
        let Some(log) = self.partitions.get(&key) else {
            self.finish_owner_receive(asker, key, Ok(Vec::new()));
            return Pass::Done;
        };
        let (start, end) = (log.log_start_offset(), log.high_watermark());
        let queue = self.consumers.queues.entry(key).or_default();
        queue.clamp_to_start(start);
        let reserved = queue.reserve(self.now, start, end, max as usize);
        let ahead = self.consumers.read_ahead.entry(key).or_default();
        ahead.drop_below(queue.frontier());
        if !reserved.is_empty() && ahead.has_all(&reserved) {
            let records: Vec<WireConsumed> =
                reserved.iter().map(|o| ahead.records[o].clone()).collect();
            let id = self.consumers.next_id();
            let receive = OwnerReceive { asker, key, max, reserved, granted: Vec::new() };
            return self.grant(id, receive, records);
        }
        let plan = match (reserved.first(), reserved.last()) {
            (Some(&first), Some(&last)) if log.refuse_read(first).is_none() => {
                let span = (last - first + 1).max(READ_AHEAD_RECORDS);
                log.read_plan(first, span, MAX_CONSUME_BYTES)
            }
            _ => None,
        };
        let Some(plan) = plan else {
            // Not readable now: nobody else could lease them either (no wake, or a parked
            // receive would spin on them).
            for offset in reserved {
                queue.release(offset);
            }
            self.finish_owner_receive(asker, key, Ok(Vec::new()));
            return Pass::Done;
        };
        let id = self.consumers.next_id();
        let receive = OwnerReceive { asker, key, max, reserved, granted: Vec::new() };
        self.consumers.owner_receives.insert(id, receive);
        let op = DiskOp::Read { file: plan.file, offset: plan.pos, len: plan.len };
        self.emit(IoPurpose::QueueRead { id, plan }, op);
        Pass::Done
    }

    /// The read of an owner receive completed: keep what it brought beyond the reserved
    /// offsets for the next receives, then grant the reserved ones.
    pub(super) fn on_queue_read(
        &mut self,
        id: u64,
        plan: ReadPlan,
        result: Result<DiskDone, DiskError>,
    ) {
        let Some(receive) = self.consumers.owner_receives.remove(&id) else { return };
        let key = receive.key;
        let decoded = match self.decode_consume(key, plan, result) {
            Ok(decoded) => decoded,
            Err(error) => {
                // A failed read makes nothing newly available (no wake: a damaged record would
                // have parked receives read it in a loop); a waiting receive retries after the
                // failure back-off instead (`park_receive`).
                if let Some(queue) = self.consumers.queues.get_mut(&key) {
                    for &offset in &receive.reserved {
                        queue.release(offset);
                    }
                }
                return self.finish_owner_receive(receive.asker, key, Err(error));
            }
        };
        let (asker, max) = (receive.asker, receive.max);
        let records: Vec<WireConsumed> =
            decoded.into_iter().map(super::client::wire_record).collect();
        if let (Some(queue), Some(ahead)) =
            (self.consumers.queues.get(&key), self.consumers.read_ahead.get_mut(&key))
        {
            for record in &records {
                let settled = record.offset < queue.frontier() || queue.is_acked(record.offset);
                if !settled && receive.reserved.binary_search(&record.offset).is_err() {
                    ahead.keep(record.clone());
                }
            }
        }
        if self.grant(id, receive, records) == Pass::Again {
            self.lease_local(asker, key, max);
        }
    }

    /// Grants the reserved offsets of `receive` found among `records` (the rest are released)
    /// and journals their delivery counts; the answer goes once they are durable. Offsets
    /// delivered `max_deliveries` times are moved to the dead-letter topic instead; if that is
    /// all there was, nothing is answered yet (`Pass::Again`: lease again).
    fn grant(&mut self, id: u64, mut receive: OwnerReceive, records: Vec<WireConsumed>) -> Pass {
        let key = receive.key;
        let expires = self.now.plus_millis(self.visibility_ms(key.topic));
        let secret = self.consumers.secret;
        let dead_letter = self.dead_letter_of(key);
        let Some(queue) = self.consumers.queues.get_mut(&key) else {
            let error = ClientError::NotFound("topic not found".into());
            self.finish_owner_receive(receive.asker, key, Err(error));
            return Pass::Done;
        };
        let mut reserved: BTreeSet<u64> = receive.reserved.iter().copied().collect();
        let spent = |queue: &PartitionQueue, offset: u64| {
            dead_letter.as_ref().is_some_and(|d| queue.deliveries(offset) >= d.max_deliveries)
        };
        // Answered at once unless some message's previous count is not durable yet (then the
        // whole receive waits for its entries, as a restart must not lose two counts in a row).
        let ahead = self.consumers.journal.latched().is_none()
            && records.iter().all(|r| {
                !reserved.contains(&r.offset)
                    || spent(queue, r.offset)
                    || queue.may_grant_ahead(r.offset)
            });
        let mut entries = Vec::new();
        let mut moves = Vec::new();
        for record in records {
            let offset = record.offset;
            queue.note_timestamp(offset, record.timestamp_ms);
            if spent(queue, offset) && reserved.remove(&offset) {
                moves.push(record);
            } else if reserved.remove(&offset) {
                let count = queue.next_count(offset);
                let nonce = nonce(secret, key, offset, count);
                if ahead {
                    queue.grant_ahead(offset, nonce, count, expires);
                } else {
                    queue.grant(offset, nonce, count, expires);
                }
                entries.push(JournalEntry::Delivered { key, offset, count });
                receive.granted.push(Granted { record, nonce, count });
            }
        }
        for offset in reserved {
            queue.release(offset);
            self.consumers.available_again.insert(key);
        }
        let moved = match dead_letter {
            Some(dead) => self.move_to_dead_letter(key, &moves, &dead),
            None => false,
        };
        if receive.granted.is_empty() {
            if moved {
                return Pass::Again;
            }
            self.finish_owner_receive(receive.asker, key, Ok(Vec::new()));
            return Pass::Done;
        }
        if ahead {
            self.grant_receive_ahead(receive, &entries);
            return Pass::Done;
        }
        self.consumers.owner_receives.insert(id, receive);
        if let Err(waiter) =
            self.consumers.journal.stage(&entries, JournalWaiter::Receive(id), self.now)
        {
            self.on_journal_waiter(waiter, false);
        }
        self.pump_journal();
        Pass::Done
    }

    /// Answers a receive granted ahead of its delivery entries, which go to the journal's next
    /// group commit with nobody waiting on them.
    fn grant_receive_ahead(&mut self, receive: OwnerReceive, entries: &[JournalEntry]) {
        let key = receive.key;
        let counts = receive.granted.iter().map(|g| (g.record.offset, g.count)).collect();
        let waiter = JournalWaiter::DeliveredAhead { key, counts };
        let staged = self.consumers.journal.stage(entries, waiter, self.now);
        assert!(staged.is_ok(), "invariant: the journal was not latched a moment ago");
        self.consumers.counters.deliveries += receive.granted.len() as u64;
        self.finish_owner_receive(receive.asker, key, Ok(receive.granted));
        self.pump_journal();
    }

    /// A journal group commit ended for `waiter`: durable (`ok`) or never.
    pub(super) fn on_journal_waiter(&mut self, waiter: JournalWaiter, ok: bool) {
        match waiter {
            JournalWaiter::Receive(id) => self.on_receive_journaled(id, ok),
            JournalWaiter::DeliveredAhead { key, counts } => {
                // Failed: the journal latched; the counts stay in memory until a restart.
                if let (true, Some(queue)) = (ok, self.consumers.queues.get_mut(&key)) {
                    for (offset, count) in counts {
                        queue.on_count_durable(offset, count);
                    }
                }
            }
            JournalWaiter::DeadLettered { key, offset } => {
                self.on_dead_letter_settled(key, offset, ok);
            }
            JournalWaiter::Ack { batch, slot, key, offset } => {
                if let Some(queue) = self.consumers.queues.get_mut(&key) {
                    if ok { queue.on_acked(offset) } else { queue.on_ack_failed(offset) }
                }
                if !ok {
                    self.consumers.available_again.insert(key);
                }
                if ok {
                    self.consumers.drop_read_ahead(key, offset);
                }
                self.consumers.counters.acks += u64::from(ok);
                let result = if ok {
                    Ok(())
                } else {
                    Err(ClientError::Internal(
                        "the consumer journal failed; the ack may not \
                                               hold"
                            .into(),
                    ))
                };
                self.fill_settle(batch, slot, result);
                self.finish_settle_if_done(batch);
            }
        }
    }

    fn on_receive_journaled(&mut self, id: u64, ok: bool) {
        let Some(receive) = self.consumers.owner_receives.remove(&id) else { return };
        let key = receive.key;
        let expires = self.now.plus_millis(self.visibility_ms(key.topic));
        let mut leased = Vec::with_capacity(receive.granted.len());
        if let Some(queue) = self.consumers.queues.get_mut(&key) {
            for granted in receive.granted {
                let offset = granted.record.offset;
                if ok {
                    queue.on_delivered(offset, granted.count, expires);
                    self.consumers.counters.deliveries += 1;
                    leased.push(granted);
                } else {
                    queue.on_delivery_failed(offset, granted.count);
                    self.consumers.available_again.insert(key);
                }
            }
        }
        let result = if ok {
            Ok(leased)
        } else {
            Err(ClientError::Internal("the consumer journal failed; nothing was leased".into()))
        };
        self.finish_owner_receive(receive.asker, key, result);
    }

    /// Answers whoever asked our partition `key` for messages.
    fn finish_owner_receive(
        &mut self,
        asker: ReceiveAsker,
        key: PartitionKey,
        result: Result<Vec<Granted>, ClientError>,
    ) {
        match asker {
            ReceiveAsker::Client(id) => {
                let Some(topic) = self.consumers.client_receives.get(&id).map(|p| p.topic.clone())
                else {
                    return;
                };
                let leased = result.map(|granted| {
                    granted.into_iter().map(|g| leased_record(&topic, key, g)).collect()
                });
                self.on_partition_leased(id, leased);
            }
            ReceiveAsker::Peer { from, id, max, until } => {
                if let (Ok(granted), Some(until)) = (&result, until)
                    && granted.is_empty()
                    && until > self.now
                {
                    return self.park_peer_receive(from, id, key, max, until);
                }
                let result = result
                    .map(|granted| {
                        granted
                            .into_iter()
                            .map(|g| WireLeased {
                                record: g.record,
                                nonce: g.nonce,
                                delivery_count: g.count,
                            })
                            .collect()
                    })
                    .map_err(|error| WireError::from_client(&error));
                self.send(from, &PeerMessage::ReceiveReply { id, result });
            }
        }
    }

    /// A peer asks one of our partitions for messages, waiting up to `wait_ms` for some.
    pub(super) fn on_peer_receive(
        &mut self,
        from: NodeId,
        id: u64,
        target: PartitionKey,
        (max, wait_ms): (u32, u64),
    ) {
        if self.meta.owner(target) != Some(self.config.node_id) {
            let error = ClientError::Unavailable("this node does not own that partition".into());
            let result = Err(WireError::from_client(&error));
            return self.send(from, &PeerMessage::ReceiveReply { id, result });
        }
        let until = (wait_ms > 0).then(|| self.now.plus_millis(wait_ms.min(MAX_CONSUME_WAIT_MS)));
        let max = max.clamp(1, MAX_RECEIVE_MESSAGES);
        self.lease_local(ReceiveAsker::Peer { from, id, max, until }, target, max);
    }

    /// A client receive's round found nothing and it may wait until `until`: it parks on the
    /// partitions of it this node owns, woken by their high watermarks, by a message becoming
    /// available again, or by the next expiry of a lease among them; the live owners of its
    /// other partitions watch theirs for it (`node/receive_watch.rs`). With no partition owned
    /// by a live node, or while the node shuts down, it is answered empty now.
    fn park_receive(&mut self, id: u64, until: Instant) {
        let Some(pending) = self.consumers.client_receives.get(&id) else { return };
        let (me, topic) = (self.config.node_id, pending.topic_id);
        let mut keys = Vec::new();
        let mut owners = BTreeSet::new();
        for &partition in &pending.partitions {
            let key = PartitionKey { topic, partition };
            match self.meta.owner(key) {
                Some(owner) if owner == me => keys.push(key),
                Some(owner) if self.meta.is_alive(owner) => {
                    owners.insert(owner);
                }
                _ => {}
            }
        }
        if (keys.is_empty() && owners.is_empty()) || self.shutting_down {
            return self.answer_receive_empty(id, Ok(()));
        }
        let (watches, mut deadline) = self.receive_watches(&keys, until);
        if pending.failed > 0 {
            // Some partition failed this round: try again after the usual back-off.
            deadline = deadline.min(self.now.plus_millis(crate::constants::FAILURE_BACKOFF_MS));
        }
        match self.parked.park(Waiter::Receive { id, until }, watches, deadline) {
            Ok(entry) => {
                self.consumers.watches.parked(id, entry);
                self.watch_remote_owners(id, topic, &owners, until);
            }
            Err(waiter) => self.answer_waiter(waiter, Err(parked_full(self.parked.len()))),
        }
    }

    /// A forwarded receive found nothing on our partition `key`: it parks like a client's.
    fn park_peer_receive(
        &mut self,
        from: NodeId,
        id: u64,
        key: PartitionKey,
        max: u32,
        until: Instant,
    ) {
        let waiter = Waiter::PeerReceive { from, id, key, max, until };
        if self.shutting_down {
            return self.answer_waiter(waiter, Ok(()));
        }
        let (watches, deadline) = self.receive_watches(&[key], until);
        if let Err(waiter) = self.parked.park(waiter, watches, deadline) {
            self.answer_waiter(waiter, Err(parked_full(self.parked.len())));
        }
    }

    /// What a parked receive watches on our partitions `keys` (each past its high watermark
    /// now), and when it wakes at the latest: `until`, or the next expiry of a lease there.
    pub(super) fn receive_watches(
        &self,
        keys: &[PartitionKey],
        until: Instant,
    ) -> (Vec<(PartitionKey, u64)>, Instant) {
        let mut deadline = until;
        let mut watches = Vec::with_capacity(keys.len());
        for &key in keys {
            let high_watermark = self.partitions.get(&key).map_or(0, |log| log.high_watermark());
            watches.push((key, high_watermark));
            if let Some(expiry) =
                self.consumers.queues.get(&key).and_then(|q| q.next_expiry(self.now))
            {
                deadline = deadline.min(expiry);
            }
        }
        (watches, deadline)
    }

    /// A parked client receive woke: it goes through its partitions again.
    pub(super) fn resume_receive(&mut self, id: u64) {
        self.consumers.watches.unparked(id);
        if let Some(pending) = self.consumers.client_receives.get_mut(&id) {
            (pending.next, pending.failed, pending.failure) = (0, 0, None);
            self.next_partition(id);
        }
    }

    /// A parked forwarded receive woke: our partition is asked again (parking again if it still
    /// has nothing before `until`).
    pub(super) fn resume_peer_receive(
        &mut self,
        from: NodeId,
        id: u64,
        key: PartitionKey,
        max: u32,
        until: Instant,
    ) {
        if self.meta.owner(key) != Some(self.config.node_id) {
            return self.answer_waiter(Waiter::PeerReceive { from, id, key, max, until }, Ok(()));
        }
        self.lease_local(ReceiveAsker::Peer { from, id, max, until: Some(until) }, key, max);
    }

    /// Answers a client receive with what its round leased.
    fn answer_receive_leased(&mut self, id: u64) {
        if let Some(done) = self.consumers.client_receives.remove(&id) {
            self.consumers.watches.forget(id);
            self.reply(done.request, ClientReply::Leased(done.leased));
        }
    }

    /// Answers a client receive with nothing (`Ok`: 204) or its error.
    pub(super) fn answer_receive_empty(&mut self, id: u64, result: Result<(), ClientError>) {
        if let Some(done) = self.consumers.client_receives.remove(&id) {
            self.consumers.watches.forget(id);
            let reply =
                result.map_or_else(ClientReply::Error, |()| ClientReply::Leased(Vec::new()));
            self.reply(done.request, reply);
        }
    }

    /// An owner answered a client receive's partition.
    pub(super) fn on_peer_receive_reply(
        &mut self,
        pending: u64,
        key: PartitionKey,
        result: Result<Vec<WireLeased>, WireError>,
    ) {
        let Some(topic) = self.consumers.client_receives.get(&pending).map(|p| p.topic.clone())
        else {
            return;
        };
        let result = result.map_err(WireError::into_client).map(|leased| {
            leased
                .into_iter()
                .map(|l| {
                    let granted =
                        Granted { record: l.record, nonce: l.nonce, count: l.delivery_count };
                    leased_record(&topic, key, granted)
                })
                .collect()
        });
        self.on_partition_leased(pending, result);
    }

    /// The partition a forwarded receive asked, if it is still waiting.
    pub(super) fn receive_partition(&self, pending: u64) -> Option<PartitionKey> {
        let receive = self.consumers.client_receives.get(&pending)?;
        let partition = *receive.partitions.get(receive.next.checked_sub(1)?)?;
        Some(PartitionKey { topic: receive.topic_id, partition })
    }

    /// `ClientOp::Settle`: each handle goes to its partition's owner.
    pub(super) fn settle(
        &mut self,
        request: RequestId,
        topic: &str,
        handles: &[String],
        action: SettleAction,
        who: &Principal,
    ) {
        let Some(info) = self.meta.topic(topic) else {
            let error = self.unknown_topic(topic);
            return self.reply(request, ClientReply::Error(error));
        };
        let (topic_id, count) = (info.id, info.partitions);
        if handles.is_empty() || handles.len() > MAX_SETTLE_HANDLES {
            let message =
                format!("1 to {MAX_SETTLE_HANDLES} receipt handles, not {}", handles.len());
            return self.reply(request, ClientReply::Error(ClientError::BadRequest(message)));
        }
        let batch = self.consumers.next_id();
        let results = vec![None; handles.len()];
        self.consumers
            .settles
            .insert(batch, SettleBatch { asker: SettleAsker::Client(request), results });
        let mut by_owner: BTreeMap<NodeId, (Vec<usize>, Vec<ReceiptHandle>)> = BTreeMap::new();
        for (slot, text) in handles.iter().enumerate() {
            let Some(handle) = ReceiptHandle::parse(text) else {
                let error = ClientError::BadRequest(format!(
                    "receipt handle `{text}` is not partition:offset:nonce"
                ));
                self.fill_settle(batch, slot, Err(error));
                continue;
            };
            if handle.partition >= count {
                self.fill_settle(
                    batch,
                    slot,
                    Err(stale("names a partition this topic does not have")),
                );
                continue;
            }
            let key = PartitionKey { topic: topic_id, partition: handle.partition };
            match self.meta.owner(key) {
                Some(owner) if owner == self.config.node_id => {
                    self.settle_local(batch, slot, key, handle, action);
                }
                Some(owner) if self.meta.is_alive(owner) => {
                    let (slots, list) = by_owner.entry(owner).or_default();
                    slots.push(slot);
                    list.push(handle);
                }
                _ => {
                    let error = ClientError::Unavailable("the partition's owner is down".into());
                    self.fill_settle(batch, slot, Err(error));
                }
            }
        }
        for (owner, (slots, handles)) in by_owner {
            let kind = Forwarded::Settle { batch, slots };
            self.forward(owner, kind, |id| PeerMessage::Settle {
                id,
                who: who.clone(),
                topic: topic_id,
                action,
                handles,
            });
        }
        self.finish_settle_if_done(batch);
        self.pump_journal();
    }

    /// Settles one handle of a partition we own.
    fn settle_local(
        &mut self,
        batch: u64,
        slot: usize,
        key: PartitionKey,
        handle: ReceiptHandle,
        action: SettleAction,
    ) {
        let (now, offset) = (self.now, handle.offset);
        let expires = now.plus_millis(self.visibility_ms(key.topic));
        let Some(queue) = self.consumers.queues.get_mut(&key) else {
            return self.fill_settle(batch, slot, Err(stale("matches no lease")));
        };
        let result = match action {
            SettleAction::Extend => queue.extend(now, offset, handle.nonce, expires),
            SettleAction::Nack => queue.nack(now, offset, handle.nonce),
            SettleAction::Ack => match queue.begin_ack(now, offset, handle.nonce) {
                Err(stale) => Err(stale),
                Ok(()) => {
                    let waiter = JournalWaiter::Ack { batch, slot, key, offset };
                    let entry = JournalEntry::Acked { key, offset };
                    if let Err(waiter) = self.consumers.journal.stage(&[entry], waiter, self.now) {
                        self.on_journal_waiter(waiter, false);
                    }
                    return;
                }
            },
        };
        if action == SettleAction::Nack && result.is_ok() {
            self.consumers.available_again.insert(key);
        }
        let result = result
            .map_err(|_| stale("matches no lease: it expired, was settled or was delivered again"));
        self.fill_settle(batch, slot, result);
    }

    /// The parked receives of every partition where a message became available again try
    /// again (`Consumers::available_again`). What the woken receives release on the way is for
    /// the next pump: a receive that woke, released what it reserved and parked again must not
    /// wake itself in a loop.
    pub(super) fn wake_available_receives(&mut self) {
        for key in std::mem::take(&mut self.consumers.available_again) {
            self.wake_receives(key);
        }
    }

    fn fill_settle(&mut self, batch: u64, slot: usize, result: Result<(), ClientError>) {
        if let Some(slot) =
            self.consumers.settles.get_mut(&batch).and_then(|b| b.results.get_mut(slot))
        {
            slot.get_or_insert(result);
        }
    }

    /// Answers a settle once every handle has its result.
    fn finish_settle_if_done(&mut self, batch: u64) {
        let done = self
            .consumers
            .settles
            .get(&batch)
            .is_some_and(|b| b.results.iter().all(Option::is_some));
        if !done {
            return;
        }
        let settle = self.consumers.settles.remove(&batch).expect("present above");
        let results = settle.results.into_iter().map(|r| r.expect("checked above"));
        match settle.asker {
            SettleAsker::Client(request) => {
                self.reply(request, ClientReply::Settled(results.collect()))
            }
            SettleAsker::Peer { from, id } => {
                let results = results.map(|r| r.map_err(|e| WireError::from_client(&e))).collect();
                self.send(from, &PeerMessage::SettleReply { id, results });
            }
        }
    }

    /// A peer settles handles of our partitions of `topic`.
    pub(super) fn on_peer_settle(
        &mut self,
        from: NodeId,
        id: u64,
        topic: TopicId,
        action: SettleAction,
        handles: &[ReceiptHandle],
    ) {
        let batch = self.consumers.next_id();
        let results = vec![None; handles.len()];
        let asker = SettleAsker::Peer { from, id };
        self.consumers.settles.insert(batch, SettleBatch { asker, results });
        for (slot, &handle) in handles.iter().enumerate() {
            let key = PartitionKey { topic, partition: handle.partition };
            if self.meta.owner(key) == Some(self.config.node_id) {
                self.settle_local(batch, slot, key, handle, action);
            } else {
                let error =
                    ClientError::Unavailable("this node does not own that partition".into());
                self.fill_settle(batch, slot, Err(error));
            }
        }
        self.finish_settle_if_done(batch);
        self.pump_journal();
    }

    /// An owner answered the handles `slots` of settle `batch` (or never will: `None`).
    pub(super) fn on_settle_results(
        &mut self,
        batch: u64,
        slots: &[usize],
        results: Option<Vec<Result<(), WireError>>>,
        failure: &str,
    ) {
        match results {
            Some(results) if results.len() == slots.len() => {
                for (&slot, result) in slots.iter().zip(results) {
                    self.fill_settle(batch, slot, result.map_err(WireError::into_client));
                }
            }
            answered => {
                let message = match answered {
                    Some(_) => "the owner's answer does not match the handles sent".to_string(),
                    None => failure.to_string(),
                };
                for &slot in slots {
                    self.fill_settle(batch, slot, Err(ClientError::Unavailable(message.clone())));
                }
            }
        }
        self.finish_settle_if_done(batch);
    }

    /// A consumer-journal operation completed.
    pub(super) fn on_journal_io(&mut self, io: JournalIo, result: Result<DiskDone, DiskError>) {
        let settled = self.consumers.journal.on_io(io, result, self.now);
        self.consumers.counters.journal_syncs += settled.synced;
        for waiter in settled.durable {
            self.on_journal_waiter(waiter, true);
        }
        for waiter in settled.failed {
            self.on_journal_waiter(waiter, false);
        }
        self.pump_journal();
    }

    /// Starts the journal's next image or group commit, and emits its operations.
    pub(super) fn pump_journal(&mut self) {
        if self.consumers.journal.wants_image() {
            let image = self.journal_image();
            self.consumers.journal.begin_image(image);
        }
        self.consumers.journal.pump(self.now);
        while let Some((io, op)) = self.consumers.journal.poll_io() {
            self.emit(IoPurpose::Journal(io), op);
        }
    }

    /// Every live partition queue's durable state (a new journal file's image).
    fn journal_image(&self) -> Vec<JournalEntry> {
        self.consumers
            .queues
            .iter()
            .filter(|(key, _)| self.meta.topic_by_id(key.topic).is_some())
            .map(|(key, queue)| {
                let durable = queue.durable();
                JournalEntry::State {
                    key: *key,
                    frontier: durable.frontier,
                    acked: durable.acked.iter().copied().collect(),
                    deliveries: durable.deliveries.iter().map(|(o, c)| (*o, *c)).collect(),
                }
            })
            .collect()
    }

    /// What a partition we hold reports: its log's numbers and its queue's (zeros for a
    /// partition without either).
    pub(super) fn numbers_of(&self, key: PartitionKey) -> crate::api::PartitionNumbers {
        let mut numbers = self.partitions.get(&key).map(|log| log.numbers()).unwrap_or_default();
        if let Some(queue) = self.consumers.queues.get(&key) {
            let start = numbers.log_start_offset;
            let below = queue.frontier().max(start) - start;
            let ahead = queue.acked_offsets().filter(|&o| o >= start).count() as u64;
            numbers.queue_settled = (below + ahead).min(numbers.high_watermark - start);
            numbers.queue_leased = queue.leased(self.now) as u64;
        }
        numbers.oldest_unsettled_ms = self.oldest_unsettled_ms(key);
        numbers
    }

    /// The lease a receive of `topic` gives: the topic's `visibility_timeout_ms`, or the node's
    /// default (`Config::queue_visibility_ms`) for a topic that set none.
    fn visibility_ms(&self, topic: TopicId) -> u64 {
        let default_ms = self.config.queue_visibility_ms;
        self.meta.topic_by_id(topic).map_or(default_ms, |info| info.queue.visibility_ms(default_ms))
    }
}

fn leased_record(topic: &str, key: PartitionKey, granted: Granted) -> LeasedRecord {
    let Granted { record, nonce, count } = granted;
    let handle = ReceiptHandle { partition: key.partition, offset: record.offset, nonce };
    LeasedRecord {
        record: ConsumedRecord {
            topic: topic.to_string(),
            partition: key.partition,
            offset: record.offset,
            key: record.key,
            payload: record.payload,
            timestamp_ms: record.timestamp_ms,
        },
        receipt_handle: handle.to_string(),
        delivery_count: count,
    }
}
