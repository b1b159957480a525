//! Checks driven by the node's own events and by restarts: watermarks never go backwards (also
//! across a crash), the checkpoint never passes a record whose commit was not acknowledged,
//! discards only hit deleted topics, and a latched WAL acks nothing until restart.

use narad_core::{NodeEvent, PartitionKey};

use super::{Checker, inv};

impl Checker {
    /// A node event, in the order the node reported it.
    pub fn on_event(&mut self, event: &NodeEvent) {
        match event {
            NodeEvent::Committed {
                key,
                first_offset,
                origins,
                ..
            } => {
                self.on_committed(*key, *first_offset, origins);
            }
            NodeEvent::CheckpointDurable { checkpoint } => self.on_checkpoint(*checkpoint),
            NodeEvent::Discarded { seq, topic } => {
                self.counters.discarded += 1;
                if !self.is_deleted(*topic) {
                    let detail = format!(
                        "seq {seq} of topic#{} discarded, delete never asked",
                        topic.0
                    );
                    self.violation(inv::DISCARD, detail);
                }
                self.mark_done(*seq);
            }
            NodeEvent::WalLatched => {
                self.counters.latches += 1;
                self.latched = true;
            }
            NodeEvent::CommitFailed { .. } => self.counters.commits_failed += 1,
            NodeEvent::RecordsLost { seqs } => {
                // Only a disk that damaged data at rest may cost records; they count as done
                // for the checkpoint check and their messages are excused as lost to corruption.
                if !self.corruption_hit {
                    let detail = format!("WAL seqs {seqs:?} declared lost without any corruption fault");
                    self.violation(inv::LOST, detail);
                }
                self.counters.declared_lost += seqs.end - seqs.start;
                for seq in seqs.clone() {
                    self.mark_done(seq);
                }
            }
        }
    }

    fn on_committed(&mut self, key: PartitionKey, first_offset: u64, origins: &[u64]) {
        for &seq in origins {
            self.mark_done(seq);
        }
        if self.is_deleted(key.topic) {
            return;
        }
        let state = self.parts.entry(key).or_default();
        let (hwm, amnesia) = (state.hwm, state.amnesia);
        state.hwm = first_offset + origins.len() as u64;
        state.amnesia = false;
        if first_offset != hwm && !amnesia {
            let what = if first_offset < hwm {
                "below"
            } else {
                "leaving a gap above"
            };
            let detail = format!("{key}: commit at offset {first_offset} {what} watermark {hwm}");
            self.violation(inv::WATERMARK, detail);
        }
    }

    fn mark_done(&mut self, seq: u64) {
        let seq = seq as usize;
        if self.done.len() <= seq {
            self.done.resize(seq + 1, false);
        }
        self.done[seq] = true;
    }

    fn on_checkpoint(&mut self, checkpoint: u64) {
        if checkpoint < self.checkpoint_floor {
            if !self.corruption_hit {
                let detail = format!(
                    "durable checkpoint {checkpoint} < earlier {}",
                    self.checkpoint_floor
                );
                self.violation(inv::CHECKPOINT, detail);
            }
            self.checkpoint_floor = checkpoint;
            return;
        }
        let first_missing = (self.checkpoint_floor..checkpoint)
            .find(|&seq| !self.done.get(seq as usize).copied().unwrap_or(false));
        if let Some(seq) = first_missing {
            let detail =
                format!("checkpoint {checkpoint} passed seq {seq}, never committed or discarded");
            self.violation(inv::CHECKPOINT, detail);
        }
        self.checkpoint_floor = checkpoint;
    }

    /// Records the recovering node finds committed in its partition logs count as done (their
    /// commit may have landed durably while a crash hid its answer).
    pub fn recovered_origins(&mut self, seqs: &[u64]) {
        for &seq in seqs {
            self.mark_done(seq);
        }
    }

    /// The process died: nothing is latched any more once it restarts.
    pub fn on_crash(&mut self) {
        self.latched = false;
    }

    /// The node recovered with these partition watermarks: nothing visible may have vanished.
    pub fn on_restart(&mut self, watermarks: &[(PartitionKey, u64)]) {
        if self.started_once {
            self.counters.restarts += 1;
        }
        self.started_once = true;
        self.latched = false;
        for &(key, ref hwm) in watermarks {
            if self.is_deleted(key.topic) {
                continue;
            }
            let state = self.parts.entry(key).or_default();
            let (before, amnesia) = (state.hwm, state.amnesia);
            state.hwm = *hwm;
            state.amnesia = false;
            if *hwm < before && !amnesia {
                let detail =
                    format!("{key}: watermark {before} before the crash, {hwm} after recovery");
                self.violation(inv::VISIBLE_THEN_GONE, detail);
            }
        }
    }

    /// A lying disk lost acknowledged bytes of `key`'s log: its watermark may restart lower and
    /// offsets may be reused.
    pub fn amnesia(&mut self, key: PartitionKey) {
        self.parts.entry(key).or_default().amnesia = true;
        let stale: Vec<(PartitionKey, u64)> = self
            .seen
            .range((key, 0)..=(key, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            self.seen.remove(&k);
        }
    }

    /// Recovery refused to start.
    pub fn recovery_failed(&mut self, error: String) {
        if !self.corruption_hit {
            self.violation(
                inv::RECOVERY,
                format!("no disk lied, yet recovery refused: {error}"),
            );
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

    /// True while the WAL is latched (until the next restart).
    pub fn is_latched(&self) -> bool {
        self.latched
    }

    /// The watermark the checker knows for `key`.
    pub fn known_hwm(&self, key: PartitionKey) -> u64 {
        self.parts.get(&key).map_or(0, |s| s.hwm)
    }
}
