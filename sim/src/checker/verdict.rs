//! The final verdict after heal and drain: every acknowledged record of a live topic is visible
//! (lost write otherwise, unless a corruption-class fault destroyed its only copy and that was
//! detected), duplicates counted and reported, never hidden.

use super::{Checker, inv};

/// The outcome of the history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Messages answered 202.
    pub acked: u64,
    /// Messages with at least one ambiguous attempt and no 202.
    pub ambiguous: u64,
    /// Distinct messages visible in the final read.
    pub visible: u64,
    /// Acked messages of live topics not visible (each one a violation).
    pub lost: u64,
    /// Acked messages not visible whose only copy a corruption-class fault destroyed.
    pub lost_to_corruption: u64,
    /// Extra copies beyond the first.
    pub duplicates: u64,
    /// Of those, copies of messages a client sent more than once (a retry of an ambiguous
    /// attempt made a second WAL record: at-least-once, nothing the broker can tell apart).
    pub duplicates_from_retries: u64,
    /// Of the others, copies on a partition that already held the message (what idempotent
    /// commits prevent); the rest landed on another partition (a reroute while the original
    /// commit landed after all).
    pub duplicates_same_partition: u64,
    /// Acked messages excused because their topic was deleted.
    pub deleted_topic: u64,
    /// Acked messages excused because retention deleted them (after they were committed, past
    /// their topic's retention: see `retention.rs`).
    pub deleted_by_retention: u64,
    /// Queue consume: deliveries, redeliveries by cause, acks (see `queue.rs`).
    pub queue: super::QueueVerdict,
}

impl Checker {
    /// Computes the verdict; records a lost-write violation per lost message (the first few).
    /// `read_complete` is false when the final read could not run (recovery refused on the
    /// only node); `lost_nodes` (a bit per node) are nodes that stayed down because their disk
    /// was damaged: what only they held is excused when a corruption-class fault hit.
    pub fn verdict(&mut self, read_complete: bool, lost_nodes: u32) -> Verdict {
        self.check_admin();
        self.check_access();
        self.check_quota();
        self.judge_half_applied_suspects();
        self.check_requests_whole(read_complete, lost_nodes);
        self.queue_verdict_checks(read_complete);
        let mut v = Verdict { queue: self.queue_verdict(), ..Verdict::default() };
        let mut lost_ids = Vec::new();
        // Records the node itself declared lost (damaged at rest in its WAL): at most that many
        // otherwise unexplained losses are excused (the checker cannot map WAL sequences of
        // damaged records back to message ids).
        let mut declared_lost = self.counters.declared_lost;
        for (id, msg) in self.msgs.iter().enumerate() {
            v.duplicates += u64::from(msg.visible.saturating_sub(1));
            if msg.wal_copies > 1 {
                v.duplicates_from_retries += u64::from(msg.visible.saturating_sub(1));
            } else {
                let same = u64::from(msg.visible) - msg.found_on.len() as u64;
                v.duplicates_same_partition += same;
            }
            if msg.visible > 0 {
                v.visible += 1;
            }
            if !msg.acked {
                v.ambiguous += u64::from(msg.ambiguous);
                continue;
            }
            v.acked += 1;
            if msg.visible > 0 {
                continue;
            }
            if msg.acked_incarnations().iter().all(|&inc| self.is_deleted(inc)) {
                v.deleted_topic += 1;
            } else if self.deleted_by_retention(&msg.placed) {
                v.deleted_by_retention += 1;
            } else if msg.damaged
                || (self.corruption_hit && (!read_complete || msg.held_by & lost_nodes != 0))
                || (self.corruption_hit && msg.abandoned)
                || msg.acked_incarnations().iter().all(|&inc| self.is_unavailable(inc))
            {
                v.lost_to_corruption += 1;
            } else if declared_lost > 0 {
                declared_lost -= 1;
                v.lost_to_corruption += 1;
            } else {
                v.lost += 1;
                lost_ids.push(id);
            }
        }
        for id in lost_ids.iter().take(5) {
            let msg = &self.msgs[*id];
            let topic = self.topic_name(msg.topic).unwrap_or("?").to_string();
            let staged: Vec<String> =
                (msg.stagings.iter().map(|(n, t)| format!("n{n}:topic#{}", t.0)))
                    .chain(msg.wal_seqs.iter().map(|(n, seq)| format!("n{n}:seq {seq}")))
                    .collect();
            let detail = format!(
                "message {id} (topic {topic}#{}) acked, not visible after drain (staged {}; held by nodes {:#b})",
                msg.topic.0,
                staged.join(","),
                msg.held_by
            );
            self.violation(inv::LOST, detail);
        }
        if lost_ids.len() > 5 {
            self.violation(inv::LOST, format!("... {} lost writes in all", lost_ids.len()));
        }
        v
    }
}
