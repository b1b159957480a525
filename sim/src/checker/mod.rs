//! The checkers of SPEC.md §5, kept apart from the fault models. The checker sees what a Jepsen
//! history would (every request, every answer, every record read) plus the node's own events
//! (commits, checkpoints, discards, latches), and names anomalies in Jepsen's vocabulary:
//! lost write, duplicate, phantom, non-monotonic watermark.
//!
//! Corruption-class faults (bit flips, misdirected writes, lying fsyncs) may destroy the only
//! copy of a record (SPEC §1 "Disk loss"). Records whose bytes they hit are reported as
//! `lost_to_corruption`, never as lost writes, but the damage must be *detected*: reading a
//! corrupt record is always a violation.

mod events;
mod reads;
mod verdict;

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::{Instant, PartitionKey, TopicId};

pub use reads::ReadKind;
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
    pub const HALF_APPLIED: &str = "half-applied";
    pub const PROTOCOL: &str = "protocol";
    pub const RECOVERY: &str = "recovery-refused";
    pub const TOPIC_LOST: &str = "topic-lost";
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
    /// Copies seen by the final read.
    pub visible: u32,
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
}

/// What the checker knows about one partition's visible prefix.
#[derive(Clone, Copy, Debug, Default)]
struct PartState {
    hwm: u64,
    /// A lying disk lost acknowledged bytes of this log: its watermark may restart lower.
    amnesia: bool,
}

/// Counters for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
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
}

const MAX_VIOLATIONS: usize = 64;

/// The history and its checks.
#[derive(Default)]
pub struct Checker {
    msgs: Vec<Msg>,
    incarnations: BTreeMap<TopicId, Incarnation>,
    by_name: BTreeMap<String, TopicId>,
    parts: BTreeMap<PartitionKey, PartState>,
    seen: BTreeMap<(PartitionKey, u64), u64>,
    done: Vec<bool>,
    checkpoint_floor: u64,
    latched: bool,
    now: Instant,
    violations: Vec<Violation>,
    violation_count: usize,
    /// Counters for the report.
    pub counters: Counters,
    /// A corruption-class fault hit (damage may be detected loudly).
    pub corruption_hit: bool,
    /// Recovery refused to start (with the error), if it did.
    pub recovery_refused: Option<String>,
    /// The node became ready at least once (later readiness follows a restart).
    started_once: bool,
}

impl Checker {
    /// Stamps later violations with `now`.
    pub fn set_now(&mut self, now: Instant) {
        self.now = now;
    }

    /// Records a broken invariant.
    pub fn violation(&mut self, invariant: &'static str, detail: String) {
        self.violation_count += 1;
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation {
                at: self.now,
                invariant,
                detail,
            });
        }
    }

    /// Violations so far (at most 64 kept) and how many there were.
    pub fn violations(&self) -> (&[Violation], usize) {
        (&self.violations, self.violation_count)
    }

    /// A topic create was acknowledged (or the topic was found by lookup).
    pub fn topic_live(&mut self, name: &str, id: TopicId) {
        let name = name.to_string();
        self.incarnations.entry(id).or_insert(Incarnation {
            name: name.clone(),
            delete_requested: false,
        });
        self.by_name.insert(name, id);
    }

    /// A delete of incarnation `id` was sent: its records are excused from here on.
    pub fn delete_requested(&mut self, id: TopicId) {
        if let Some(inc) = self.incarnations.get_mut(&id) {
            inc.delete_requested = true;
        }
        self.parts.retain(|key, _| key.topic != id);
    }

    fn is_deleted(&self, id: TopicId) -> bool {
        self.incarnations
            .get(&id)
            .is_none_or(|inc| inc.delete_requested)
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
            visible: 0,
        });
        id
    }

    /// The payload a message will carry (its id must be `next_id`).
    pub fn next_id(&self) -> u64 {
        self.msgs.len() as u64
    }

    /// The message with id `id`.
    pub fn msg(&self, id: u64) -> &Msg {
        &self.msgs[id as usize]
    }

    /// An attempt carrying `ids` reached the node.
    pub fn sent(&mut self, ids: &[u64]) {
        for &id in ids {
            self.msgs[id as usize].sent = true;
        }
    }

    /// An attempt carrying `ids` was answered 202 with `accepted`.
    pub fn acked(&mut self, ids: &[u64], accepted: usize) {
        if self.latched {
            self.violation(
                inv::LATCH,
                format!("202 for {} records after WalLatched", ids.len()),
            );
        }
        if accepted != ids.len() {
            let detail = format!("202 accepted {accepted} of {} messages", ids.len());
            self.violation(inv::PROTOCOL, detail);
        }
        for &id in ids {
            self.msgs[id as usize].acked = true;
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
