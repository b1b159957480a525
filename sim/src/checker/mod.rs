//! The checkers of docs/design.md §5, kept apart from the fault models. The checker sees what a
//! Jepsen history would (every request, every answer, every record read) plus the node's own events
//! (commits, checkpoints, discards, latches), and names anomalies in Jepsen's vocabulary: lost
//! write, duplicate, phantom, non-monotonic watermark.
//!
//! Corruption-class faults (bit flips, misdirected writes, lying fsyncs) may destroy the only copy
//! of a record (docs/design.md §1, "one copy per partition"). Records whose bytes they hit are
//! reported as `lost_to_corruption`, never as lost writes, but the damage must be *detected*:
//! reading a corrupt record is always a violation.
//!
//! In a cluster, per-node state (WAL sequences, checkpoints, latches) is kept per node, and the
//! checker learns from each node's WAL writes under which topic incarnation every attempt was
//! really staged (a node's replica may lag behind a delete and re-create of the same name): a
//! record may only ever be visible in an incarnation it was staged for, and an acknowledged record
//! is excused only when the incarnation its acknowledging node staged it for was deleted.

mod access;
mod admin;
mod dead_letter;
mod events;
mod long_poll;
mod queue;
mod queue_lag;
mod queue_wait;
mod quota;
mod reads;
mod retention;
mod topic_pages;
mod verdict;
mod whole_requests;

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::{Instant, PartitionKey, TopicId};

pub use access::{AccessAsk, AccessNeed, AsUser};
pub use admin::AdminAsk;
pub use long_poll::LongPollSent;
pub use queue::{QueueVerdict, SettleSeen};
pub use reads::ReadKind;
pub use topic_pages::{PageAsked, page_fault};
pub use verdict::Verdict;

/// Invariant names used in violations.
pub mod inv {
    pub const LOST: &str = "lost-write";
    pub const PHANTOM: &str = "phantom";
    pub const CORRUPT: &str = "corrupt-read";
    pub const VISIBLE_THEN_GONE: &str = "visible-then-gone";
    pub const WATERMARK: &str = "non-monotonic-watermark";
    pub const ABOVE_WATERMARK: &str = "served-above-watermark";
    pub const CHECKPOINT: &str = "checkpoint-passed-uncommitted";
    pub const DISCARD: &str = "discard-of-live-topic";
    pub const LATCH: &str = "ack-after-latch";
    pub const WAL_BOUND: &str = "wal-unbounded";
    pub const LIVENESS: &str = "liveness";
    /// Tier 2: a message one node's driver handed to the transport was neither fed to its
    /// destination's node nor reported unreachable to its sender (see `tier2/peer_ledger.rs`).
    pub const PEER_MESSAGE_LOST: &str = "peer-message-lost";
    pub const HALF_APPLIED: &str = "half-applied";
    pub const PROTOCOL: &str = "protocol";
    /// A page of the topic list out of order, past its limit, or with a token that does not
    /// move on (see `topic_pages.rs`).
    pub const TOPIC_PAGE: &str = "topic-page";
    /// Tier 2: a node's driver task panicked (the production process would exit 1).
    pub const NODE_PANICKED: &str = "node-panicked";
    pub const RECOVERY: &str = "recovery-refused";
    pub const TOPIC_LOST: &str = "topic-lost";
    /// An answer to a topic create, delete or lookup that the applied metastore history
    /// contradicts (see `admin.rs`).
    pub const ADMIN: &str = "admin-answer";
    /// A restart recovered records past a partition's reported watermark that no unfinished
    /// commit wrote (a failed commit's frames left in the file, taken for committed ones).
    pub const RECOVERED_UNWRITTEN: &str = "recovered-unwritten";
    /// Retention deleted a record inside its topic's retention, or one never committed.
    pub const RETENTION_EARLY: &str = "retention-early";
    /// A log start offset moved backwards, or a 410 named a start no deletion left.
    pub const LOG_START: &str = "log-start";
    /// Queue consume (see `queue.rs`): a message delivered again after its ack was answered
    /// 204; two unexpired leases of one message; delivery counts that do not grow; an
    /// acknowledged, readable message the final drain never delivered; a delivery carrying
    /// another record than the log holds at its offset.
    pub const QUEUE_ACKED_REDELIVERED: &str = "queue-acked-redelivered";
    pub const QUEUE_DOUBLE_LEASE: &str = "queue-double-lease";
    pub const QUEUE_COUNT: &str = "queue-delivery-count";
    /// Two deliveries carried the same receipt handle: a stale handle could settle the later.
    pub const QUEUE_HANDLE_REUSED: &str = "queue-handle-reused";
    pub const QUEUE_UNDELIVERED: &str = "queue-undelivered";
    pub const QUEUE_WRONG_RECORD: &str = "queue-wrong-record";
    /// A partition reported another timestamp for its oldest unacked message than the first
    /// unacked offset's, or none while a message was never acked (`queue_lag.rs`).
    pub const QUEUE_OLDEST: &str = "queue-oldest-unacked";
    /// Dead letters (`dead_letter.rs`): a message left its topic before its dead-letter copy
    /// was durable, is missing from the dead-letter topic at the end, or was delivered again
    /// after it was moved.
    pub const QUEUE_DEAD_LETTER: &str = "queue-dead-letter";
    /// A waiting queue receive answered empty although a message had been available for long
    /// (`queue_wait.rs`).
    pub const QUEUE_WAIT: &str = "queue-wait-slept";
    /// A long-poll consume answered empty although a record at its offset had been visible
    /// for longer than the wake bound (`long_poll.rs`): it slept through its wake.
    pub const LONG_POLL: &str = "long-poll-slept";
    /// A client request answered twice (docs/design.md §5, invariant 11).
    pub const ANSWERED_TWICE: &str = "answered-twice";
    /// A node allowed a request no version of the user's grants it could have used allows.
    pub const ACCESS_GRANTED: &str = "access-beyond-grants";
    /// A node refused (401, 403) a request every version it could have used allows.
    pub const ACCESS_REFUSED: &str = "access-refused-wrongly";
    /// Two replicas applied different user changes at one log index.
    pub const USERS_DIVERGED: &str = "users-diverged";
    /// A node accepted more of a payer's produces than its quota lets through.
    pub const QUOTA_OVERRUN: &str = "quota-overrun";
    /// A node refused a produce (429) while its payer was within its quota.
    pub const QUOTA_REFUSED_EARLY: &str = "quota-refused-early";
}

/// One message the workload produced (or tried to).
#[derive(Clone, Debug)]
pub struct Msg {
    pub topic: TopicId,
    pub key: Option<Bytes>,
    pub payload: Bytes,
    /// Some attempt reached the node.
    pub sent: bool,
    /// Some attempt was answered 202.
    pub acked: bool,
    /// Some attempt ended ambiguously (5xx, timeout, connection reset).
    pub ambiguous: bool,
    /// A corruption-class fault hit bytes holding this message.
    pub damaged: bool,
    /// A start-up dropped its WAL record as part of a chunked request whose last chunk was
    /// missing (`NodeEvent::RecordsAbandoned`). Were it acknowledged, only a disk that lost the
    /// last chunk after its fsync could explain that.
    pub abandoned: bool,
    /// Copies seen by the final read.
    pub visible: u32,
    /// (node, incarnation) of every WAL staging of this message seen so far.
    pub stagings: Vec<(u32, TopicId)>,
    /// Incarnations the acknowledging nodes staged it for.
    pub acked_under: Vec<TopicId>,
    /// Nodes that held it: in their WAL, or committed in a partition log (a bit per node).
    pub held_by: u32,
    /// Partitions the final read found it on (once each).
    pub found_on: Vec<PartitionKey>,
    /// WAL records written for it (more than one: a client retried an ambiguous attempt).
    pub wal_copies: u32,
    /// (node, WAL sequence) of its WAL records, for failure reports.
    pub wal_seqs: Vec<(u32, u64)>,
    /// Where commits placed it: (partition of an incarnation, offset).
    pub placed: Vec<(PartitionKey, u64)>,
    /// Its dead-letter copies: (node, incarnation) of their WAL stagings, where commits placed
    /// them, and how many the final read found (none of them counts above).
    pub dead_letter_stagings: Vec<(u32, TopicId)>,
    pub dead_letter_placed: Vec<(PartitionKey, u64)>,
    pub dead_letter_visible: u32,
}

impl Msg {
    /// True when some attempt was staged for incarnation `topic` (before any staging was seen:
    /// when it is the incarnation the workload aimed at), or a dead-letter copy was.
    pub fn reached(&self, topic: TopicId) -> bool {
        let copied = self.dead_letter_stagings.iter().any(|&(_, t)| t == topic);
        if self.stagings.is_empty() {
            self.topic == topic || copied
        } else {
            self.stagings.iter().any(|&(_, t)| t == topic) || copied
        }
    }

    /// The incarnations its 202s vouch for (the one aimed at, if no staging was seen).
    pub fn acked_incarnations(&self) -> Vec<TopicId> {
        if self.acked_under.is_empty() { vec![self.topic] } else { self.acked_under.clone() }
    }
}

/// A broken invariant.
#[derive(Clone, Debug)]
pub struct Violation {
    pub at: Instant,
    pub invariant: &'static str,
    pub detail: String,
}

#[derive(Clone, Debug)]
struct Incarnation {
    name: String,
    delete_requested: bool,
    /// Every partition is owned by a node whose damaged disk keeps it down.
    unavailable: bool,
}

/// What the checker knows about one partition's visible prefix.
#[derive(Clone, Copy, Debug, Default)]
struct PartState {
    hwm: u64,
    /// A lying disk lost acknowledged bytes of this log: its watermark may restart lower.
    amnesia: bool,
    /// The damage behind `amnesia` is on disk but no recovery has read it yet: the next start
    /// of a process reads it, so `amnesia` holds again then (a restart already in flight when
    /// the damage struck may consume `amnesia` first, with the old bytes).
    damage_unread: bool,
    /// A write to the log file landed since the last reported commit or restart: only then
    /// may a restart recover more records than were reported.
    tail_written: bool,
    /// Offsets below it were deleted by retention (as deletions and restarts reported).
    log_start: u64,
    /// When retention last deleted a segment of this log.
    trimmed_at: Option<Instant>,
}

/// What the checker tracks per node.
#[derive(Clone, Debug, Default)]
struct NodeCheck {
    /// WAL sequences committed (anywhere), discarded or declared lost, by sequence number.
    done: Vec<bool>,
    checkpoint_floor: u64,
    latched: bool,
    /// The node became ready at least once (later readiness follows a restart).
    started_once: bool,
}

/// Counters for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// Produces refused 429 for their payer's quota.
    pub quota_refusals: u64,
    /// Pages of the topic list judged (`topic_pages.rs`).
    pub topic_pages: u64,
    /// Answers to the access client's requests judged against the users' history.
    pub access_probes_judged: u64,
    /// Answers to requests made with the bootstrap admin's credentials (tier 2 with access
    /// control on: every other client's), judged likewise.
    pub access_admin_judged: u64,
    /// Requests the access client sent (a seed that ran it has some).
    pub access_requests: u64,
    pub commits_failed: u64,
    pub latches: u64,
    pub discarded: u64,
    pub restarts: u64,
    /// Records the node reported damaged: WAL records declared lost (`NodeEvent::RecordsLost`)
    /// and partition records the final read found damaged. Each excuses at most one loss.
    pub declared_lost: u64,
    pub consume_errors: u64,
    pub records_read: u64,
    /// Produce attempts that ended ambiguously (5xx, timeout, connection reset).
    pub ambiguous_attempts: u64,
    /// WAL sequences staged again for another message after the first message under them was
    /// committed (a disk lost WAL data it claimed durable): the owner's idempotent check must
    /// tell the two records apart by their content, or it drops the second.
    pub reused_sequences: u64,
    /// When the first record was discarded (scenarios check it waited for the leader).
    pub first_discard_at: Option<Instant>,
    /// Segments retention deleted, and the records they held.
    pub segments_deleted: u64,
    pub records_deleted: u64,
    /// Partitions whose oldest unacked message was checked (`queue_lag.rs`), and those whose
    /// "not read yet" answer was excused by a deletion too recent for the probe to follow.
    pub oldest_checks: u64,
    pub oldest_excused: u64,
}

const MAX_VIOLATIONS: usize = 64;

/// The history and its checks.
#[derive(Default)]
pub struct Checker {
    msgs: Vec<Msg>,
    /// See `answers_cross_a_network`.
    answers_cross_a_network: bool,
    /// Records read before any answer to their message arrived (`reads.rs`).
    half_applied_suspects: Vec<(u64, String)>,
    /// The ids of each batch request of more than one message (`whole_requests.rs`).
    batches: Vec<std::ops::Range<u64>>,
    incarnations: BTreeMap<TopicId, Incarnation>,
    by_name: BTreeMap<String, Vec<TopicId>>,
    parts: BTreeMap<PartitionKey, PartState>,
    /// The node that committed to each partition (owners never move).
    owners: BTreeMap<PartitionKey, u32>,
    seen: BTreeMap<(PartitionKey, u64), u64>,
    /// Segments the disk damaged (by base), ever: a damaged seal of one re-arms `amnesia`.
    damaged_segments: std::collections::BTreeSet<(PartitionKey, u64)>,
    /// The message each (node, WAL sequence) staged last.
    by_origin: BTreeMap<(u32, u64), u64>,
    nodes: Vec<NodeCheck>,
    now: Instant,
    violations: Vec<Violation>,
    violation_count: usize,
    admin: admin::AdminHistory,
    /// The users' history and the access client's probes (`access.rs`).
    access: access::AccessHistory,
    /// Retention settings every incarnation ever had.
    retention: BTreeMap<TopicId, retention::RetentionSeen>,
    /// Timestamp of each WAL record (node, sequence), and of each placed record (key, offset).
    stamps: BTreeMap<(u32, u64), u64>,
    placed_stamps: BTreeMap<(PartitionKey, u64), u64>,
    /// The record whose frame last landed at each (key, offset): (origin node, WAL sequence,
    /// timestamp). A restart that recovers records no reported commit covered tells the
    /// checker where they are from this.
    landed: BTreeMap<(PartitionKey, u64), ((u32, u64), u64)>,
    /// What queue workers saw (`queue.rs`).
    queue: queue::QueueHistory,
    /// The dead-letter topic and the messages moved to it (`dead_letter.rs`).
    dead_letter: dead_letter::DeadLetterHistory,
    /// Empty answers to waiting queue receives (`queue_wait.rs`), and whether they are judged.
    queue_waits: Vec<queue_wait::EmptyWait>,
    read_faults: bool,
    /// Counters for the report.
    pub counters: Counters,
    /// A corruption-class fault hit (damage may be detected loudly).
    pub corruption_hit: bool,
    /// Recovery refused to start (with the error), if it did.
    pub recovery_refused: Option<String>,
    /// Several nodes: live reads may come from a lagging replica (see `consumed`).
    pub cluster: bool,
    /// Long-poll consumes: visibility timelines and what disturbs their delays.
    pub long_poll: long_poll::LongPollState,
    /// Produces and their answers, while a produce quota is set (`quota.rs`).
    quota: quota::QuotaHistory,
}

impl Checker {
    /// A checker for one node (`cluster` false) or several.
    pub fn new(cluster: bool) -> Checker {
        Checker { cluster, ..Checker::default() }
    }

    /// Stamps later violations with `now`.
    pub fn set_now(&mut self, now: Instant) {
        self.now = now;
    }

    /// Records a broken invariant.
    pub fn violation(&mut self, invariant: &'static str, detail: String) {
        self.violation_count += 1;
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation { at: self.now, invariant, detail });
        }
    }

    /// Violations so far (at most 64 kept) and how many there were.
    pub fn violations(&self) -> (&[Violation], usize) {
        (&self.violations, self.violation_count)
    }

    fn node(&mut self, node: u32) -> &mut NodeCheck {
        let node = node as usize;
        if self.nodes.len() <= node {
            self.nodes.resize_with(node + 1, NodeCheck::default);
        }
        &mut self.nodes[node]
    }

    /// A topic create was acknowledged (or the topic was found by lookup).
    pub fn topic_live(&mut self, name: &str, id: TopicId) {
        let name = name.to_string();
        self.incarnations.entry(id).or_insert(Incarnation {
            name: name.clone(),
            delete_requested: false,
            unavailable: false,
        });
        if self.dead_letter.name.as_deref() == Some(name.as_str()) {
            self.dead_letter.ids.insert(id);
        }
        let ids = self.by_name.entry(name).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    /// A delete of topic `name` was sent: it deletes whichever incarnation the metastore holds
    /// when it applies, so every incarnation known under that name is excused from here on.
    pub fn delete_requested(&mut self, name: &str) {
        let ids = self.by_name.get(name).cloned().unwrap_or_default();
        for id in ids {
            if let Some(inc) = self.incarnations.get_mut(&id) {
                inc.delete_requested = true;
            }
            self.parts.retain(|key, _| key.topic != id);
        }
    }

    /// Every partition of `id` is owned by a node lost to disk damage: its records cannot
    /// become visible (no live sibling to reroute to).
    pub fn unavailable(&mut self, id: TopicId) {
        if let Some(inc) = self.incarnations.get_mut(&id) {
            inc.unavailable = true;
        }
    }

    fn is_unavailable(&self, id: TopicId) -> bool {
        self.incarnations.get(&id).is_some_and(|inc| inc.unavailable)
    }

    /// True once a delete of incarnation `id` was asked for (or it was never created).
    pub fn is_deleted(&self, id: TopicId) -> bool {
        self.incarnations.get(&id).is_none_or(|inc| inc.delete_requested)
    }

    /// Registers a new message; returns its id.
    pub fn new_message(&mut self, topic: TopicId, key: Option<Bytes>, payload: Bytes) -> u64 {
        let id = self.msgs.len() as u64;
        self.msgs.push(Msg {
            topic,
            key,
            payload,
            sent: false,
            acked: false,
            ambiguous: false,
            damaged: false,
            abandoned: false,
            visible: 0,
            stagings: Vec::new(),
            acked_under: Vec::new(),
            held_by: 0,
            found_on: Vec::new(),
            wal_copies: 0,
            wal_seqs: Vec::new(),
            placed: Vec::new(),
            dead_letter_stagings: Vec::new(),
            dead_letter_placed: Vec::new(),
            dead_letter_visible: 0,
        });
        id
    }

    /// Node `node` wrote message `id` to its WAL as sequence `seq`, for incarnation `topic`.
    pub fn staged(&mut self, node: u32, seq: u64, id: u64, topic: TopicId, timestamp_ms: u64) {
        self.stamped(node, seq, timestamp_ms);
        if self.is_dead_letter_topic(topic) {
            return self.dead_letter_staged(node, seq, id, topic);
        }
        let Some(msg) = self.msgs.get_mut(id as usize) else { return };
        msg.held_by |= 1 << node;
        msg.wal_copies += 1;
        msg.wal_seqs.push((node, seq));
        if !msg.stagings.contains(&(node, topic)) {
            msg.stagings.push((node, topic));
        }
        let before = self.by_origin.insert((node, seq), id);
        if before.is_some_and(|old| old != id && !self.msgs[old as usize].placed.is_empty()) {
            self.counters.reused_sequences += 1;
        }
    }

    /// Node `node` committed these WAL sequences of `origin` to one of its partitions.
    fn held(&mut self, node: u32, origin: u32, seqs: &[u64]) {
        for seq in seqs {
            if let Some(&id) = self.by_origin.get(&(origin, *seq)) {
                self.msgs[id as usize].held_by |= 1 << node;
            }
        }
    }

    /// A commit placed these WAL sequences of `origin` in `key` from `first_offset` on.
    fn placed(&mut self, origin: u32, seqs: &[u64], key: PartitionKey, first_offset: u64) {
        for (offset, seq) in (first_offset..).zip(seqs) {
            self.stamp_placed(origin, *seq, key, offset);
            if let Some(&id) = self.by_origin.get(&(origin, *seq)) {
                let msg = &mut self.msgs[id as usize];
                if self.dead_letter.ids.contains(&key.topic) {
                    msg.dead_letter_placed.push((key, offset));
                    continue;
                }
                msg.placed.push((key, offset));
            }
        }
    }

    /// The payload a message will carry (its id must be `next_id`).
    pub fn next_id(&self) -> u64 {
        self.msgs.len() as u64
    }

    /// The message with id `id`.
    pub fn msg(&self, id: u64) -> &Msg {
        &self.msgs[id as usize]
    }

    /// The clients hear answers over a network (the second tier), so an answer may arrive
    /// after what it answered became visible: "no 202 after the WAL latched" is judged where the
    /// node answers (`node_answered_produce`), and a record read before any answer to its
    /// message arrived is judged once every answer is in (`verdict`).
    pub fn answers_cross_a_network(&mut self) {
        self.answers_cross_a_network = true;
    }

    /// Node `node` answered some request with 202 for `accepted` records (second tier).
    pub fn node_answered_produce(&mut self, node: u32, accepted: usize) {
        if self.node(node).latched {
            let detail = format!("n{node}: 202 for {accepted} records after WalLatched");
            self.violation(inv::LATCH, detail);
        }
    }

    /// An attempt carrying `ids` reached the node.
    pub fn sent(&mut self, ids: &[u64]) {
        for &id in ids {
            self.msgs[id as usize].sent = true;
        }
    }

    /// Node `node` answered an attempt carrying `ids` with 202 (`accepted` records).
    pub fn acked(&mut self, node: u32, ids: &[u64], accepted: usize) {
        if self.node(node).latched && !self.answers_cross_a_network {
            let detail = format!("n{node}: 202 for {} records after WalLatched", ids.len());
            self.violation(inv::LATCH, detail);
        }
        if accepted != ids.len() {
            let detail = format!("202 accepted {accepted} of {} messages", ids.len());
            self.violation(inv::PROTOCOL, detail);
        }
        for &id in ids {
            let msg = &mut self.msgs[id as usize];
            msg.acked = true;
            for &(staged_on, topic) in &msg.stagings {
                if staged_on == node && !msg.acked_under.contains(&topic) {
                    msg.acked_under.push(topic);
                }
            }
        }
    }

    /// An attempt carrying `ids` ended ambiguously.
    pub fn ambiguous(&mut self, ids: &[u64]) {
        self.counters.ambiguous_attempts += 1;
        for &id in ids {
            self.msgs[id as usize].ambiguous = true;
        }
    }

    /// A corruption-class fault hit bytes holding these ids.
    pub fn damaged(&mut self, ids: &[u64]) {
        self.corruption_hit = true;
        for &id in ids {
            if let Some(msg) = self.msgs.get_mut(id as usize) {
                msg.damaged = true;
            }
        }
    }

    /// The topic name and partition of `key`, if the checker knows the incarnation.
    pub fn topic_name(&self, id: TopicId) -> Option<&str> {
        self.incarnations.get(&id).map(|inc| inc.name.as_str())
    }
}
