//! Checks driven by the nodes' own events and by restarts: watermarks never go backwards (also
//! across a crash) and only the partition's owner commits to it, each node's checkpoint never
//! passes a record of its WAL that was not committed (on any node) or discarded, discards only
//! hit deleted topics, and a latched WAL acks nothing until its node restarts.

use narad_core::{NodeEvent, PartitionKey};

use super::{Checker, inv};

impl Checker {
    /// An event of node `node`, in the order the node reported it.
    pub fn on_event(&mut self, node: u32, event: &NodeEvent) {
        match event {
            NodeEvent::Committed { key, first_offset, origin, origins } => {
                let origin = origin.0.saturating_sub(1);
                self.on_committed(node, *key, *first_offset, origin, origins);
            }
            NodeEvent::CheckpointDurable { checkpoint } => self.on_checkpoint(node, *checkpoint),
            NodeEvent::Discarded { seq, topic } => {
                self.counters.discarded += 1;
                self.counters.first_discard_at.get_or_insert(self.now);
                if !self.is_deleted(*topic) {
                    let detail = format!(
                        "n{node}: seq {seq} of topic#{} discarded: no delete was sent while it existed",
                        topic.0
                    );
                    self.violation(inv::DISCARD, detail);
                }
                self.mark_done(node, *seq);
            }
            NodeEvent::WalLatched => {
                self.counters.latches += 1;
                self.node(node).latched = true;
            }
            NodeEvent::CommitFailed { .. } => self.counters.commits_failed += 1,
            NodeEvent::TopicApplied { index, change, topic } => {
                if *change != narad_core::TopicApplied::Deleted {
                    self.retention_applied(topic);
                }
                self.topic_applied(node, *index, *change, topic);
            }
            NodeEvent::UserApplied { index, change } => self.user_applied(node, *index, change),
            NodeEvent::UsersReplaced { index } => self.users_replaced(node, *index),
            NodeEvent::SegmentDeleted { key, trimmed, now_ms } => {
                self.segment_deleted(node, *key, trimmed, *now_ms);
            }
            // The world asks the disk whether the copy is durable (`World::event`).
            NodeEvent::DeadLettered { key, offset } => {
                self.dead_lettered(node, *key, *offset, None)
            }
            // Never acknowledged: a message among them that was is a lost write (`verdict`).
            // Judged from the answers (`quota.rs`); the runtime's gate is its only user.
            NodeEvent::QuotaSpent { .. } => {}
            NodeEvent::RecordsAbandoned { seqs } => {
                for &seq in seqs {
                    self.mark_done(node, seq);
                    if let Some(&id) = self.by_origin.get(&(node, seq)) {
                        self.msgs[id as usize].abandoned = true;
                    }
                }
            }
            NodeEvent::RecordsLost { seqs } => {
                // Only a disk that damaged data at rest may cost records; they count as done
                // for the checkpoint check and their messages are excused as lost to corruption.
                if !self.corruption_hit {
                    let detail = format!(
                        "n{node}: WAL seqs {seqs:?} declared lost without any corruption fault"
                    );
                    self.violation(inv::LOST, detail);
                }
                self.counters.declared_lost += seqs.end - seqs.start;
                for seq in seqs.clone() {
                    self.mark_done(node, seq);
                }
            }
        }
    }

    fn on_committed(
        &mut self,
        node: u32,
        key: PartitionKey,
        first_offset: u64,
        origin: u32,
        origins: &[u64],
    ) {
        for &seq in origins {
            self.mark_done(origin, seq);
        }
        self.held(node, origin, origins);
        self.placed(origin, origins, key, first_offset);
        let owner = *self.owners.entry(key).or_insert(node);
        if owner != node {
            let detail = format!("{key}: n{node} committed to a partition n{owner} committed to");
            self.violation(inv::WATERMARK, detail);
        }
        if self.is_deleted(key.topic) {
            return;
        }
        let state = self.parts.entry(key).or_default();
        let (hwm, amnesia) = (state.hwm, state.amnesia);
        state.hwm = first_offset + origins.len() as u64;
        state.amnesia = false;
        state.tail_written = false;
        self.note_visible(key, first_offset + origins.len() as u64);
        if first_offset != hwm && !amnesia {
            let what = if first_offset < hwm { "below" } else { "leaving a gap above" };
            let detail = format!("{key}: commit at offset {first_offset} {what} watermark {hwm}");
            self.violation(inv::WATERMARK, detail);
        }
    }

    fn mark_done(&mut self, node: u32, seq: u64) {
        let done = &mut self.node(node).done;
        let seq = seq as usize;
        if done.len() <= seq {
            done.resize(seq + 1, false);
        }
        done[seq] = true;
    }

    fn on_checkpoint(&mut self, node: u32, checkpoint: u64) {
        let floor = self.node(node).checkpoint_floor;
        if checkpoint < floor {
            if !self.corruption_hit {
                let detail = format!("n{node}: durable checkpoint {checkpoint} < earlier {floor}");
                self.violation(inv::CHECKPOINT, detail);
            }
            self.node(node).checkpoint_floor = checkpoint;
            return;
        }
        let done = &self.node(node).done;
        let first_missing =
            (floor..checkpoint).find(|&seq| !done.get(seq as usize).copied().unwrap_or(false));
        if let Some(seq) = first_missing {
            let detail = format!(
                "n{node}: checkpoint {checkpoint} passed seq {seq}, never committed or discarded"
            );
            self.violation(inv::CHECKPOINT, detail);
        }
        self.node(node).checkpoint_floor = checkpoint;
    }

    /// Records node `node` finds committed in its partition logs as it recovers count as done
    /// for their origin node (their commit may have landed durably while a crash hid its
    /// answer), and as held by `node`.
    pub fn recovered_origins(&mut self, node: u32, origins: &[(u32, u64)]) {
        let owners = &self.owners;
        let on_this_disk = |key: &PartitionKey| owners.get(key).is_none_or(|&o| o == node);
        for (_, state) in self.parts.iter_mut().filter(|(k, s)| s.damage_unread && on_this_disk(k))
        {
            state.amnesia = true;
            state.damage_unread = false;
        }
        for &(origin, seq) in origins {
            self.mark_done(origin, seq);
            self.held(node, origin, &[seq]);
        }
    }

    /// The process of `node` died: nothing is latched any more once it restarts.
    pub fn on_crash(&mut self, node: u32) {
        self.node(node).latched = false;
        self.queue_restarted(node);
    }

    /// `node` recovered with these partition watermarks: nothing visible may have vanished.
    pub fn on_restart(
        &mut self,
        node: u32,
        numbers: &[(PartitionKey, narad_core::api::PartitionNumbers)],
        clock_ms: u64,
    ) {
        let state = self.node(node);
        let restarted = state.started_once;
        state.started_once = true;
        state.latched = false;
        self.queue_restarted(node);
        if restarted {
            self.counters.restarts += 1;
        }
        for (key, numbers) in numbers {
            let (key, hwm) = (*key, &numbers.high_watermark);
            let before = self.parts.get(&key).map_or(0, |s| s.hwm);
            if *hwm > before {
                // Also for a deleted incarnation: a node whose replica still holds it may serve
                // what its recovery found there (a queue receive resolving the name to it), and
                // the checker must know that record's incarnation (`delivered_key`).
                self.recovered_unreported(key, before..*hwm);
            }
            if self.is_deleted(key.topic) {
                continue;
            }
            self.restart_log_start(node, key, numbers, clock_ms);
            let state = self.parts.entry(key).or_default();
            let (before, amnesia, tail_written) = (state.hwm, state.amnesia, state.tail_written);
            state.hwm = *hwm;
            state.amnesia = false;
            state.tail_written = false;
            self.note_visible(key, *hwm);
            if *hwm < before && !amnesia {
                let detail =
                    format!("{key}: watermark {before} before the crash, {hwm} after recovery");
                self.violation(inv::VISIBLE_THEN_GONE, detail);
            }
            if *hwm > before && !tail_written && !amnesia {
                let detail = format!(
                    "{key}: watermark {before} before the crash, {hwm} after recovery, yet no write landed past it"
                );
                self.violation(inv::RECOVERED_UNWRITTEN, detail);
            }
        }
    }

    /// A write to `key`'s log landed (in the page cache at least): records past the reported
    /// watermark may be in the file until the next reported commit (a recovery may find them,
    /// or not: a cut-back, a failed sync or a power loss may remove them again).
    pub fn partition_write_landed(&mut self, key: PartitionKey) {
        self.parts.entry(key).or_default().tail_written = true;
    }

    /// A lying disk lost acknowledged bytes of `key`'s log: its watermark may restart lower and
    /// offsets may be reused.
    pub fn amnesia(&mut self, key: PartitionKey) {
        let state = self.parts.entry(key).or_default();
        state.amnesia = true;
        state.damage_unread = true;
        self.long_poll_amnesia(key);
        let stale: Vec<(PartitionKey, u64)> =
            self.seen.range((key, 0)..=(key, u64::MAX)).map(|(k, _)| *k).collect();
        for k in stale {
            self.seen.remove(&k);
        }
    }

    /// The disk damaged segment `base` of `key`'s log: a recovery that scans it may cut the log.
    pub fn segment_damaged(&mut self, key: PartitionKey, base: u64) {
        self.damaged_segments.insert((key, base));
        self.amnesia(key);
    }

    /// The disk damaged the seal of segment `base` of `key`'s log: the next recovery scans the
    /// segment, and finds damage a recovery that adopted the seal did not read.
    pub fn seal_damaged(&mut self, key: PartitionKey, base: u64) {
        if self.damaged_segments.contains(&(key, base)) {
            self.amnesia(key);
        }
    }

    /// Recovery refused to start.
    pub fn recovery_failed(&mut self, error: String) {
        if !self.corruption_hit {
            self.violation(inv::RECOVERY, format!("no disk lied, yet recovery refused: {error}"));
        }
        self.recovery_refused = Some(error);
    }

    /// The watermark the final read found for `key`: nothing visible may have vanished.
    pub fn final_watermark(&mut self, key: PartitionKey, hwm: u64) {
        let state = self.parts.entry(key).or_default();
        let (before, amnesia) = (state.hwm, state.amnesia);
        state.hwm = hwm;
        if hwm < before && !amnesia {
            let detail = format!("{key}: watermark was {before}, the final read finds {hwm}");
            self.violation(inv::VISIBLE_THEN_GONE, detail);
        }
    }

    /// True while `node`'s WAL is latched (until its next restart).
    pub fn is_latched(&self, node: u32) -> bool {
        self.nodes.get(node as usize).is_some_and(|n| n.latched)
    }

    /// The watermark the checker knows for `key`.
    pub fn known_hwm(&self, key: PartitionKey) -> u64 {
        self.parts.get(&key).map_or(0, |s| s.hwm)
    }
}

#[cfg(test)]
mod tests {
    use narad_core::{NodeEvent, NodeId, PartitionKey, TopicId};

    use crate::checker::{Checker, inv};

    const KEY: PartitionKey = PartitionKey { topic: TopicId(1), partition: 0 };

    fn committed(checker: &mut Checker, first_offset: u64, count: u64) {
        let origins = (first_offset..first_offset + count).collect();
        let event = NodeEvent::Committed { key: KEY, first_offset, origin: NodeId(1), origins };
        checker.on_event(0, &event);
    }

    /// The numbers of a log holding `0..hwm`.
    fn at(hwm: u64) -> [(PartitionKey, narad_core::api::PartitionNumbers); 1] {
        let numbers =
            narad_core::api::PartitionNumbers { high_watermark: hwm, ..Default::default() };
        [(KEY, numbers)]
    }

    fn unwritten(checker: &Checker) -> usize {
        checker.violations().0.iter().filter(|v| v.invariant == inv::RECOVERED_UNWRITTEN).count()
    }

    /// A restart may find more records than were reported only if a write landed since the
    /// last reported commit (that commit's answer was lost in the crash).
    #[test]
    fn a_restart_recovers_unreported_records_only_after_a_landed_write() {
        let mut checker = Checker::new(false);
        checker.topic_live("t1", KEY.topic);
        checker.on_restart(0, &at(0), 0);
        committed(&mut checker, 0, 3);
        checker.partition_write_landed(KEY);
        checker.on_restart(0, &at(5), 0);
        assert_eq!(unwritten(&checker), 0, "a write in flight at the crash landed durably");
        committed(&mut checker, 5, 2);
        // A failed commit's frames left behind a later, shorter commit: nothing landed since
        // the last report, yet recovery finds two more records.
        checker.on_restart(0, &at(9), 0);
        assert_eq!(unwritten(&checker), 1);
    }
}
