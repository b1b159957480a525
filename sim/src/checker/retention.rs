//! Retention's checks: an acknowledged record may be absent only because retention deleted the
//! segment holding it after it was committed, and only once it was past its topic's retention on
//! its owner's clock (or the topic had a size bound); deletions go from the front only (a log
//! start offset never moves backwards, also across a crash, and never passes what was
//! committed); a consume below the start answers 410 with the start the deletions left.
//!
//! The checker judges each deleted record by the timestamp its WAL record carried (what the
//! owner judges too) against the owner's clock when the deletion completed, and the shortest
//! retention the topic ever had on any replica (an owner may apply a change late, never early).
//! A size bound excuses young records without a size check of its own: the checker does not
//! model frame sizes, so size retention is checked only for order and for what it may delete.

use narad_core::PartitionKey;
#[cfg(test)]
use narad_core::TopicId;
use narad_core::api::{PartitionNumbers, TopicInfo};
use narad_core::partition::Trimmed;

use super::{Checker, inv};

/// The retention settings an incarnation ever had, as far as any replica applied them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RetentionSeen {
    /// The shortest non-zero `retention_ms` in force at any time (`None`: always forever).
    min_ms: Option<u64>,
    /// Some `retention_bytes` was set at some time.
    sized: bool,
}

impl Checker {
    /// A replica applied `topic` as it is now (a create or an update).
    pub(super) fn retention_applied(&mut self, topic: &TopicInfo) {
        let seen = self.retention.entry(topic.id).or_default();
        let ms = topic.retention_ms_in_force();
        if ms > 0 {
            seen.min_ms = Some(seen.min_ms.map_or(ms, |before| before.min(ms)));
        }
        seen.sized |= topic.retention_bytes.is_some();
    }

    /// The WAL record `(node, seq)` carried this timestamp (its owner judges its age by it).
    pub(super) fn stamped(&mut self, node: u32, seq: u64, timestamp_ms: u64) {
        self.stamps.insert((node, seq), timestamp_ms);
    }

    /// A commit placed WAL record `(origin, seq)` at `key@offset`: remember its timestamp there.
    pub(super) fn stamp_placed(&mut self, origin: u32, seq: u64, key: PartitionKey, offset: u64) {
        if let Some(&ts) = self.stamps.get(&(origin, seq)) {
            self.placed_stamps.insert((key, offset), ts);
        }
    }

    /// A partition write landed a frame of WAL record `origin` (node, sequence) at `key@offset`.
    pub fn frame_landed(&mut self, key: PartitionKey, offset: u64, origin: (u32, u64), ts: u64) {
        self.landed.insert((key, offset), (origin, ts));
    }

    /// A restart recovered `range` of `key` although no reported commit covered it (the answer
    /// of the commit that wrote it was lost in the crash): the frames that landed there last
    /// are what it holds, so retention may later delete them as committed records.
    pub(super) fn recovered_unreported(&mut self, key: PartitionKey, range: std::ops::Range<u64>) {
        for offset in range {
            let Some(&((origin, seq), ts)) = self.landed.get(&(key, offset)) else { continue };
            self.placed_stamps.insert((key, offset), ts);
            if let Some(&id) = self.by_origin.get(&(origin, seq)) {
                let msg = &mut self.msgs[id as usize];
                let placed = if self.dead_letter.ids.contains(&key.topic) {
                    &mut msg.dead_letter_placed
                } else {
                    &mut msg.placed
                };
                if !placed.contains(&(key, offset)) {
                    placed.push((key, offset));
                }
            }
        }
    }

    /// Node `node` deleted the oldest segment of `key` at `now_ms` on its clock.
    pub(super) fn segment_deleted(
        &mut self,
        node: u32,
        key: PartitionKey,
        trimmed: &Trimmed,
        now_ms: u64,
    ) {
        self.counters.segments_deleted += 1;
        if self.is_deleted(key.topic) {
            return;
        }
        let state = self.parts.entry(key).or_default();
        let (before, hwm) = (state.log_start, state.hwm);
        let start = trimmed.log_start_offset;
        if start <= before {
            let detail = format!("{key}: n{node} deleted a segment, log start {before} -> {start}");
            self.violation(inv::LOG_START, detail);
            return;
        }
        if start > hwm {
            let detail =
                format!("{key}: n{node} deleted up to {start}, only {hwm} records were committed");
            self.violation(inv::RETENTION_EARLY, detail);
        }
        let now = self.now;
        let state = self.parts.entry(key).or_default();
        state.log_start = start;
        state.trimmed_at = Some(now);
        self.judge_trimmed(node, key, before..start.min(hwm), now_ms, "deleted");
    }

    /// Records `range` of `key` are gone: each must have been past retention at `now_ms`.
    fn judge_trimmed(
        &mut self,
        node: u32,
        key: PartitionKey,
        range: std::ops::Range<u64>,
        now_ms: u64,
        how: &str,
    ) {
        self.counters.records_deleted += range.end.saturating_sub(range.start);
        let seen = self.retention.get(&key.topic).copied().unwrap_or_default();
        if seen.sized {
            return;
        }
        let young = range.clone().find_map(|offset| {
            let ts = *self.placed_stamps.get(&(key, offset))?;
            let expires = seen.min_ms.map_or(u64::MAX, |ms| ts.saturating_add(ms));
            (now_ms < expires).then_some((offset, ts))
        });
        if let Some((offset, ts)) = young {
            let detail = format!(
                "{key}: n{node} {how} offsets {range:?} at {now_ms} ms; offset {offset} is stamped {ts} ms, \
                 retention at least {:?} ms",
                seen.min_ms
            );
            self.violation(inv::RETENTION_EARLY, detail);
        }
    }

    /// After a restart: the log must start where the completed deletions left it, or later (a
    /// crash may take the news of a completed deletion with it: judged at the restart's clock).
    pub(super) fn restart_log_start(
        &mut self,
        node: u32,
        key: PartitionKey,
        numbers: &PartitionNumbers,
        clock_ms: u64,
    ) {
        let state = self.parts.entry(key).or_default();
        let before = state.log_start;
        let start = numbers.log_start_offset;
        if start < before {
            let detail =
                format!("{key}: log start {before} before the restart of n{node}, {start} after");
            self.violation(inv::LOG_START, detail);
        } else if start > before {
            state.log_start = start;
            let end = start.min(state.hwm.max(numbers.high_watermark));
            // A lying disk may lose a whole segment file (its directory entry never durable):
            // the log then starts later without retention having deleted anything.
            if !(state.amnesia || self.corruption_hit) {
                self.judge_trimmed(node, key, before..end, clock_ms, "recovered without");
            }
        }
    }

    /// A read at `offset` of `key` was answered 410 with `log_start_offset`: no deletion left
    /// a start that high yet (damage aside: a disk that lost a log's files moves it too).
    pub fn log_start_moved(&mut self, key: PartitionKey, offset: u64, log_start_offset: u64) {
        // A deletion may complete between the answer and the checker's look at it (both come
        // out of one batch of inputs): the answer may name an older start, never a newer one.
        let known = self.parts.get(&key).map_or(0, |s| s.log_start);
        if offset < log_start_offset && log_start_offset <= known || self.corruption_hit {
            return;
        }
        let detail = format!(
            "{key}: a read at {offset} answered 410, log start {log_start_offset}, deletions left {known}"
        );
        self.violation(inv::LOG_START, detail);
    }

    /// A live read at `offset` of `key` was answered 410 with `log_start_offset`: no deletion
    /// reported so far may have left a start that high (one reported later is in flight). In
    /// a cluster a lagging replica may resolve the name to another incarnation: not checked.
    pub fn live_gone(&mut self, key: PartitionKey, offset: u64, log_start_offset: u64) {
        let known = self.parts.get(&key).map_or(0, |s| s.log_start);
        let wrong = log_start_offset > known || offset >= log_start_offset;
        if wrong && !self.cluster && !self.corruption_hit && !self.is_deleted(key.topic) {
            let detail = format!(
                "{key}: a live read at {offset} answered 410, log start {log_start_offset}, deletions left {known}"
            );
            self.violation(inv::LOG_START, detail);
        }
    }

    /// True when retention deleted every place a commit put message `placed` at.
    pub(super) fn deleted_by_retention(&self, placed: &[(PartitionKey, u64)]) -> bool {
        !placed.is_empty()
            && placed.iter().all(|(key, offset)| {
                self.parts.get(key).is_some_and(|state| *offset < state.log_start)
            })
    }

    /// The incarnations whose retention the checker tracks (for tests).
    #[cfg(test)]
    pub(super) fn retention_of(&self, topic: TopicId) -> Option<(Option<u64>, bool)> {
        self.retention.get(&topic).map(|seen| (seen.min_ms, seen.sized))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use narad_core::api::{PartitionNumbers, TopicInfo};
    use narad_core::partition::Trimmed;
    use narad_core::{NodeEvent, NodeId, PartitionKey, TopicApplied, TopicId};

    use crate::checker::{Checker, inv};

    const KEY: PartitionKey = PartitionKey { topic: TopicId(1), partition: 0 };

    fn topic(retention_ms: Option<u64>, retention_bytes: Option<u64>) -> TopicInfo {
        let name = "t1".to_string();
        TopicInfo {
            name,
            id: KEY.topic,
            partitions: 1,
            retention_ms,
            retention_bytes,
            created_ms: 0,
            queue: Default::default(),
        }
    }

    /// A checker with one live topic applied with `retention_ms`, and `count` messages staged
    /// on node 0 (WAL sequences 0.., stamped 1,000 ms apart from 0) and committed at 0...
    fn with_records(retention_ms: Option<u64>, count: u64) -> Checker {
        let mut checker = Checker::new(false);
        checker.topic_live("t1", KEY.topic);
        let applied = NodeEvent::TopicApplied {
            index: 1,
            change: TopicApplied::Created,
            topic: topic(retention_ms, None),
        };
        checker.on_event(0, &applied);
        for seq in 0..count {
            let id = checker.new_message(KEY.topic, None, Bytes::from_static(b"x"));
            checker.staged(0, seq, id, KEY.topic, seq * 1_000);
        }
        let origins = (0..count).collect();
        let committed =
            NodeEvent::Committed { key: KEY, first_offset: 0, origin: NodeId(1), origins };
        checker.on_event(0, &committed);
        checker
    }

    fn deleted(checker: &mut Checker, log_start_offset: u64, now_ms: u64) {
        let trimmed = Trimmed { log_start_offset, records: 0, bytes: 0, newest_ms: 0 };
        checker.on_event(0, &NodeEvent::SegmentDeleted { key: KEY, trimmed, now_ms });
    }

    fn count(checker: &Checker, invariant: &str) -> usize {
        checker.violations().0.iter().filter(|v| v.invariant == invariant).count()
    }

    #[test]
    fn a_deletion_past_retention_is_fine_and_one_inside_it_is_not() {
        let mut checker = with_records(Some(5_000), 10);
        // Records 0..3 are stamped 0, 1 s and 2 s: past 5 s retention at 7 s.
        deleted(&mut checker, 3, 7_000);
        assert_eq!(count(&checker, inv::RETENTION_EARLY), 0);
        // Record 3 is stamped 3 s: inside retention at 7.5 s.
        deleted(&mut checker, 4, 7_500);
        assert_eq!(count(&checker, inv::RETENTION_EARLY), 1);
    }

    #[test]
    fn a_topic_kept_forever_deletes_nothing_and_a_shorter_retention_ever_applied_counts() {
        let mut forever = with_records(Some(0), 4);
        deleted(&mut forever, 1, u64::MAX / 2);
        assert_eq!(count(&forever, inv::RETENTION_EARLY), 1);
        let mut shortened = with_records(Some(0), 4);
        let update = NodeEvent::TopicApplied {
            index: 2,
            change: TopicApplied::Updated,
            topic: topic(Some(1_000), None),
        };
        shortened.on_event(1, &update);
        assert_eq!(shortened.retention_of(KEY.topic), Some((Some(1_000), false)));
        deleted(&mut shortened, 2, 2_000);
        assert_eq!(count(&shortened, inv::RETENTION_EARLY), 0);
    }

    #[test]
    fn log_starts_never_go_backwards_nor_past_the_committed_records() {
        let mut checker = with_records(Some(1_000), 10);
        deleted(&mut checker, 4, 100_000);
        deleted(&mut checker, 4, 100_000);
        assert_eq!(count(&checker, inv::LOG_START), 1, "a deletion must move the start");
        deleted(&mut checker, 11, 100_000);
        assert_eq!(count(&checker, inv::RETENTION_EARLY), 1, "only 10 records were committed");
        let back =
            PartitionNumbers { log_start_offset: 3, high_watermark: 10, ..Default::default() };
        checker.on_restart(0, &[(KEY, back)], 100_000);
        assert_eq!(count(&checker, inv::LOG_START), 2, "a restart found a deleted segment back");
    }

    #[test]
    fn a_restart_past_an_unreported_deletion_judges_it_at_the_restart() {
        let mut checker = with_records(Some(5_000), 10);
        let on = |start| PartitionNumbers {
            log_start_offset: start,
            high_watermark: 10,
            ..Default::default()
        };
        checker.on_restart(0, &[(KEY, on(2))], 6_500);
        assert_eq!(count(&checker, inv::RETENTION_EARLY), 0);
        checker.on_restart(0, &[(KEY, on(5))], 6_500);
        assert_eq!(count(&checker, inv::RETENTION_EARLY), 1, "record 2 is stamped 2 s");
    }

    #[test]
    fn a_410_must_name_the_start_deletions_left_and_excuses_only_what_they_deleted() {
        let mut checker = with_records(Some(1_000), 6);
        deleted(&mut checker, 3, 10_000);
        checker.log_start_moved(KEY, 0, 3);
        checker.log_start_moved(KEY, 0, 2);
        assert_eq!(
            count(&checker, inv::LOG_START),
            0,
            "an answer computed before the last deletion"
        );
        checker.log_start_moved(KEY, 3, 4);
        assert_eq!(count(&checker, inv::LOG_START), 1, "a start no deletion left");
        assert!(checker.deleted_by_retention(&[(KEY, 2)]));
        assert!(!checker.deleted_by_retention(&[(KEY, 3)]));
        assert!(!checker.deleted_by_retention(&[]), "never committed: not excused");
    }
}
