//! Lag in time (invariant `queue-oldest-unacked`, docs/design.md §4.8): once the workload has
//! stopped and retention passes have gone by, the owner of each partition reports the
//! timestamp of its oldest unacked message (the first offset at or above the log start that no
//! ack settled), exactly. The checker knows which offsets an ack answered 204 settled for sure,
//! which ones an ack may have settled (answered ambiguously, a 410 in a cluster, or a move to
//! the dead-letter topic: reported, or possible because the message was delivered while its
//! topic has one, as a move's ack may be durable though a crash hid its completion), and the
//! timestamp every commit placed at each offset; so:
//!
//! - a reported timestamp must be that of an offset past every surely settled one from the log
//!   start and not past the first offset nothing may have settled;
//! - no timestamp (none unacked) is allowed only when every offset from the log start to the
//!   high watermark may have been settled, or when retention deleted a segment of the
//!   partition so recently (less than a pass before) that the owner's probe of the new
//!   oldest record may not have landed: excused and counted (`oldest_excused`).
//!
//! Corruption-class faults may change what an offset holds: a mismatch is excused then.

use narad_core::api::PartitionNumbers;
use narad_core::{Instant, PartitionKey};

use super::queue::Settled;
use super::{Checker, inv};

impl Checker {
    /// The owner of `key` reported `numbers` (the workload stopped a while ago); a deletion
    /// after `probed_since` may have left the new oldest message not read yet.
    pub fn queue_oldest_reported(
        &mut self,
        key: PartitionKey,
        numbers: &PartitionNumbers,
        probed_since: Instant,
    ) {
        if self.is_deleted(key.topic) {
            return;
        }
        self.counters.oldest_checks += 1;
        let (start, end) = (numbers.log_start_offset, numbers.high_watermark);
        let mut candidates = Vec::new();
        let mut unsettled = None;
        for offset in start..end {
            match self.queue_settled_state((key, offset)) {
                Settled::Surely => continue,
                Settled::Maybe => candidates.push(offset),
                Settled::Not => {
                    candidates.push(offset);
                    unsettled = Some(offset);
                    break;
                }
            }
        }
        let trimmed_at = self.parts.get(&key).and_then(|p| p.trimmed_at);
        let probe_pending = trimmed_at.is_some_and(|at| at > probed_since);
        let problem = match (numbers.oldest_unsettled_ms, unsettled) {
            (None, Some(_)) if probe_pending => {
                self.counters.oldest_excused += 1;
                None
            }
            (None, Some(offset)) => Some(format!(
                "{key}: offset {offset} (log {start}..{end}) was never acked, yet no oldest \
                 unacked message is reported"
            )),
            (None, None) => None,
            (Some(ms), _) => {
                let stamps: Vec<Option<u64>> = candidates
                    .iter()
                    .map(|&offset| self.placed_stamps.get(&(key, offset)).copied())
                    .collect();
                let known = stamps.iter().all(Option::is_some);
                let matched = stamps.contains(&Some(ms));
                (known && !matched).then(|| {
                    format!(
                        "{key}: oldest unacked message reported at {ms} ms; the candidates \
                         (offsets {candidates:?} of log {start}..{end}) were stamped {stamps:?}"
                    )
                })
            }
        };
        match problem {
            Some(_) if self.corruption_hit => self.queue.verdict.excused_corruption += 1,
            Some(detail) => self.violation(inv::QUEUE_OLDEST, detail),
            None => {}
        }
    }
}
