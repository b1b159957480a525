//! A produce request applies whole or not at all (SPEC §2): after the final read, the messages
//! of one batch request (every attempt of it carries the same ids) are all visible or none.
//!
//! What it catches: a bulk request written in chunks (`core/src/wal/staging.rs`) whose first
//! chunks were dispatched before its last one was durable, or whose chunks a restart dispatched
//! without the last one: a crash between chunks then leaves part of a batch visible that no
//! client was ever told was accepted. Messages a fault may have destroyed one by one (damage,
//! a node lost with its disk, retention, a deleted topic) excuse their request.

use std::ops::Range;

use super::{Checker, inv};

impl Checker {
    /// The workload made the messages `ids` as one batch request.
    pub fn batch_made(&mut self, ids: Range<u64>) {
        if ids.end - ids.start > 1 {
            self.batches.push(ids);
        }
    }

    /// Every batch request's messages are all visible or none.
    pub(super) fn check_requests_whole(&mut self, read_complete: bool, lost_nodes: u32) {
        if !read_complete || self.corruption_hit || self.counters.declared_lost > 0 {
            return;
        }
        for ids in std::mem::take(&mut self.batches) {
            let msgs = &self.msgs[ids.start as usize..ids.end as usize];
            let visible = msgs.iter().filter(|msg| msg.visible > 0).count();
            if visible == 0 || visible == msgs.len() {
                continue;
            }
            let excused = msgs.iter().any(|msg| {
                msg.damaged
                    || msg.held_by & lost_nodes != 0
                    || self.is_deleted(msg.topic)
                    || self.is_unavailable(msg.topic)
                    || self.deleted_by_retention(&msg.placed)
            });
            if !excused {
                let detail = format!(
                    "messages {}..{} were produced in one request; {visible} of {} are visible",
                    ids.start,
                    ids.end,
                    msgs.len()
                );
                self.violation(inv::HALF_APPLIED, detail);
            }
        }
    }
}
