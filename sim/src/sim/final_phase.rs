//! The end of a run: heal every fault, restart what is down or latched, let the dispatch backlog
//! drain (liveness, bounded in simulated time), let the node settle, check the WAL's disk bound,
//! then read every partition of every live topic in full. Optionally cut the power once more
//! and re-read: nothing that was visible may vanish or change.

use narad_core::constants::WAL_ROTATE_DISPATCHED_BYTES;
use narad_core::{ClientOp, ClientReply, FileId, Input, Instant, PartitionKey, RequestId};

use super::Simulation;
use crate::checker::{ReadKind, inv};
use crate::trace::What;

/// Simulated time the backlog gets to drain once faults are healed.
const DRAIN_LIMIT_MICROS: u64 = 60_000_000;
/// Idle time after the drain for the checkpoint to become durable and the WAL to be compacted.
const SETTLE_MICROS: u64 = 1_500_000;
/// Longest wait for one harness request.
const CALL_TIMEOUT_MICROS: u64 = 10_000_000;

impl Simulation {
    /// Heal, drain, check. Returns whether the final read could run.
    pub(super) fn final_phase(&mut self) -> bool {
        self.world.record(0, What::Phase { name: "heal" });
        self.heal();
        let now = self.world.queue.now();
        let drained = self.run_until(Instant(now.0 + DRAIN_LIMIT_MICROS), 10_000, |s| s.drained());
        if !self.hosts[0].is_up() {
            return false;
        }
        if !drained && !self.world.checker.corruption_hit {
            let backlog = self.hosts[0]
                .node()
                .map_or(0, |n| n.stats().dispatch_backlog);
            let detail = format!("dispatch backlog still {backlog} 60 s after faults healed");
            self.world.checker.violation(inv::LIVENESS, detail);
        }
        let now = self.world.queue.now();
        self.run_to(Instant(now.0 + SETTLE_MICROS));
        if drained {
            self.check_wal_bound();
        }
        self.world.record(0, What::Phase { name: "final-read" });
        self.final_read(ReadKind::Final);
        if self.cfg.faults.final_power_loss && self.hosts[0].is_up() {
            self.world.record(
                0,
                What::Phase {
                    name: "final-power-loss",
                },
            );
            self.crash(0, true, true);
            self.restart(0);
            let now = self.world.queue.now();
            self.run_until(Instant(now.0 + 5_000_000), 1_000, |s| s.ready());
            if self.hosts[0].is_up() {
                self.final_read(ReadKind::Recheck);
            }
        }
        true
    }

    fn heal(&mut self) {
        self.world.healed = true;
        self.world.crash_after_sync = None;
        self.world.workload.stop();
        for disk in &mut self.world.disks {
            disk.heal();
        }
        let now = self.world.queue.now();
        for n in 0..self.hosts.len() {
            self.hosts[n].resume(now, &mut self.world);
            self.restart(n);
        }
        if self.world.checker.is_latched() && self.hosts[0].is_up() {
            self.hosts[0].deliver(now, Input::BeginShutdown, &mut self.world);
            let deadline = Instant(now.0 + 10_000_000);
            let shut = self.run_until(deadline, 1_000, |s| {
                s.hosts[0].node().is_none_or(|n| n.is_shut_down())
            });
            if !shut {
                self.world.checker.violation(
                    inv::LIVENESS,
                    "graceful shutdown did not finish in 10 s".into(),
                );
            }
            self.crash(0, false, false);
            self.restart(0);
        }
    }

    fn ready(&self) -> bool {
        self.hosts[0].node().is_some_and(|n| n.is_ready())
    }

    fn drained(&self) -> bool {
        self.hosts[0]
            .node()
            .is_none_or(|n| n.is_ready() && n.stats().dispatch_backlog == 0)
    }

    /// Invariant 8: after the drain, the WAL is < 1 MiB plus one segment in rotation.
    fn check_wal_bound(&mut self) {
        let segments: Vec<u64> = self.world.disks[0]
            .files()
            .filter(|(id, _)| matches!(id, FileId::WalSegment { .. }))
            .map(|(_, f)| f.len())
            .collect();
        let newest = segments.last().copied().unwrap_or(0);
        if segments.len() > 2 || newest >= WAL_ROTATE_DISPATCHED_BYTES {
            let detail = format!(
                "after drain: {} WAL segments, sizes {segments:?}",
                segments.len()
            );
            self.world.checker.violation(inv::WAL_BOUND, detail);
        }
    }

    /// Sends one request as the harness and runs until it is answered.
    fn call(&mut self, op: ClientOp) -> Option<ClientReply> {
        if !self.hosts[0].is_up() {
            return None;
        }
        let request = RequestId(self.world.next_harness);
        self.world.next_harness += 1;
        self.world.harness_request = Some(request);
        self.world.harness_reply = None;
        let now = self.world.queue.now();
        self.world.record(
            0,
            What::Request {
                request: request.0,
                op: super::world::op_name(&op),
            },
        );
        self.hosts[0].deliver(now, Input::Client { request, op }, &mut self.world);
        let deadline = Instant(now.0 + CALL_TIMEOUT_MICROS);
        while self.world.harness_reply.is_none() && !self.aborted {
            match self.world.queue.peek_time() {
                Some(t) if t <= deadline => {
                    let event = self.world.queue.pop().expect("invariant: peeked");
                    self.step(event);
                }
                _ => break,
            }
        }
        self.world.harness_request = None;
        self.world.harness_reply.take()
    }

    /// Reads every partition of every live topic in full.
    fn final_read(&mut self, kind: ReadKind) {
        self.check_topic_list();
        for (name, inc, _) in self.world.workload.topics.live() {
            let reply = self.call(ClientOp::GetTopic { name: name.clone() });
            let Some(ClientReply::Topic(info, partitions)) = reply else {
                let detail = format!("final lookup of live topic {name}: {reply:?}");
                self.world.checker.violation(inv::TOPIC_LOST, detail);
                continue;
            };
            if info.id != inc {
                let detail = format!(
                    "topic {name} is incarnation {}, expected {}",
                    info.id.0, inc.0
                );
                self.world.checker.violation(inv::TOPIC_LOST, detail);
                continue;
            }
            for stats in partitions {
                let key = PartitionKey {
                    topic: inc,
                    partition: stats.index,
                };
                self.world
                    .checker
                    .final_watermark(key, stats.high_watermark.unwrap_or(0));
                self.read_partition(&name, key, stats.high_watermark.unwrap_or(0), kind);
            }
        }
    }

    /// Reads `key` from offset 0 to `hwm`. A failing read is retried one record at a time, so a
    /// damaged record (detected corruption) costs only itself.
    fn read_partition(&mut self, name: &str, key: PartitionKey, hwm: u64, kind: ReadKind) {
        let mut offset = 0;
        let mut errors = 0;
        let mut max = 1_000;
        while offset < hwm && errors < 1_000 {
            let topic = name.to_string();
            let op = ClientOp::Consume { topic, partition: key.partition, offset, max };
            match self.call(op) {
                Some(ClientReply::Records(records)) if !records.is_empty() => {
                    self.world.checker.consumed(key, offset, &records, kind);
                    offset += records.len() as u64;
                    max = 1_000;
                }
                Some(ClientReply::Error(_)) if self.world.checker.corruption_hit => {
                    self.world.checker.counters.consume_errors += 1;
                    errors += 1;
                    if max == 1 {
                        offset += 1; // the damaged record itself: skip it
                        // The node detected and reported this damage: the message it held may
                        // count as lost to corruption (the checker cannot always tell which).
                        self.world.checker.counters.declared_lost += 1;
                    }
                    max = 1;
                }
                other => {
                    let detail =
                        format!("{key}: final read at offset {offset} below watermark {hwm}: {other:?}");
                    self.world.checker.violation(inv::PROTOCOL, detail);
                    return;
                }
            }
        }
    }

    fn check_topic_list(&mut self) {
        let Some(ClientReply::Topics(listed)) = self.call(ClientOp::ListTopics) else {
            self.world
                .checker
                .violation(inv::PROTOCOL, "final ListTopics failed".into());
            return;
        };
        for (name, inc, _) in self.world.workload.topics.live() {
            if !listed.iter().any(|t| t.name == name && t.id == inc) {
                let detail = format!("acknowledged topic {name}#{} missing from the list", inc.0);
                self.world.checker.violation(inv::TOPIC_LOST, detail);
            }
        }
    }
}
