//! The final queue drain of seeds with queue workers, after the final read (so the time it
//! takes lets retention delete nothing the read should have seen): every partition of every
//! live topic is received from (through the nodes in turn) and everything leased is acked,
//! until a receive finds nothing twice, a visibility timeout apart (leases a worker dropped
//! expire meanwhile). The checker sees every delivery and ack like a worker's, and then
//! requires every acknowledged produce the final read found, and retention did not delete
//! meanwhile, to have been delivered (`checker/queue.rs`, invariant 4). A node whose consumer
//! journal latched answers 500 until it restarts: the drain restarts it, as an operator would.

use narad_core::api::SettleAction;
use narad_core::{ClientError, ClientOp, ClientReply, Instant, TopicId};

use super::Simulation;
use crate::checker::{SettleSeen, inv};
use crate::trace::What;

/// Failed receives or acks of one partition before the drain gives up on it.
const MAX_FAILURES: u32 = 24;
/// Restarts of a latched owner per partition.
const MAX_RESTARTS: u32 = 3;
/// A failed receive waits this long before the next try.
const RETRY_WAIT_MICROS: u64 = 50_000;

/// One partition being drained.
struct Drain {
    name: String,
    inc: TopicId,
    partition: u32,
    /// Which node the next request goes through (rotates).
    turn: usize,
    failures: u32,
    restarts: u32,
}

impl Simulation {
    /// Drains every live topic (queue seeds only).
    pub(super) fn queue_drain(&mut self) {
        if self.cfg.workload.queue_workers == 0 || self.aborted {
            return;
        }
        self.world.record(0, What::Phase { name: "queue-drain" });
        let mut complete = true;
        for (t, (name, inc, partitions)) in
            self.world.workload.topics.live().into_iter().enumerate()
        {
            for partition in 0..partitions {
                let turn = t + partition as usize;
                let mut drain =
                    Drain { name: name.clone(), inc, partition, turn, failures: 0, restarts: 0 };
                if !self.drain_partition(&mut drain) {
                    complete = false;
                    if !self.world.checker.corruption_hit {
                        let detail = format!(
                            "queue drain of {name}/p{partition} gave up after {} failures",
                            drain.failures
                        );
                        self.world.checker.violation(inv::LIVENESS, detail);
                    }
                }
            }
        }
        if complete && !self.aborted {
            self.world.checker.queue_drained();
        }
    }

    /// The next node to send through.
    fn drain_via(&mut self, drain: &mut Drain) -> Option<usize> {
        let up: Vec<usize> = (0..self.nodes()).filter(|&n| self.hosts[n].is_up()).collect();
        drain.turn += 1;
        (!up.is_empty()).then(|| up[drain.turn % up.len()])
    }

    /// Receives and acks until the partition is empty; false if it gave up.
    fn drain_partition(&mut self, drain: &mut Drain) -> bool {
        let wait = self.cfg.workload.queue_visibility_ms * 1_000 + 10_000;
        let mut empty = 0;
        while empty < 2 && drain.failures < MAX_FAILURES && !self.aborted {
            let Some(via) = self.drain_via(drain) else { return false };
            let op = ClientOp::Receive {
                topic: drain.name.clone(),
                partition: Some(drain.partition),
                max: 10,
                wait_ms: 0,
            };
            let sent = self.world.queue.now();
            match self.call(via, op) {
                Some(ClientReply::Leased(records)) if !records.is_empty() => {
                    self.world.checker.queue_delivered(drain.inc, sent, &records);
                    let handles = records.into_iter().map(|r| r.receipt_handle).collect();
                    self.drain_ack(drain, handles);
                    empty = 0;
                }
                Some(ClientReply::Leased(_)) => {
                    empty += 1;
                    if empty < 2 {
                        let now = self.world.queue.now();
                        self.run_to(Instant(now.0 + wait));
                    }
                }
                Some(ClientReply::Error(ClientError::Internal(e)))
                    if e.contains("consumer journal") =>
                {
                    drain.failures += 1;
                    self.restart_owner(drain);
                }
                other => {
                    if !matches!(&other, Some(ClientReply::Error(e)) if e.http_status() < 500) {
                        self.world.checker.queue_receive_unseen(drain.inc);
                    }
                    drain.failures += 1;
                    let now = self.world.queue.now();
                    self.run_to(Instant(now.0 + RETRY_WAIT_MICROS));
                }
            }
        }
        empty >= 2
    }

    /// Acks `handles`, retrying ambiguous answers through the next node; what stays unacked is
    /// delivered again once its lease expires.
    fn drain_ack(&mut self, drain: &mut Drain, mut handles: Vec<String>) {
        for _ in 0..4 {
            if handles.is_empty() {
                return;
            }
            let Some(via) = self.drain_via(drain) else { return };
            let op = ClientOp::Settle {
                topic: drain.name.clone(),
                handles: handles.clone(),
                action: SettleAction::Ack,
                batch: true,
            };
            let sent = self.world.queue.now();
            let seen: Vec<SettleSeen> = match self.call(via, op) {
                Some(ClientReply::Settled(results)) if results.len() == handles.len() => results
                    .iter()
                    .map(|r| match r {
                        Ok(()) => SettleSeen::Ok,
                        Err(ClientError::StaleHandle(_)) => SettleSeen::Stale,
                        Err(e) if e.http_status() >= 500 => SettleSeen::Ambiguous,
                        Err(_) => SettleSeen::Refused,
                    })
                    .collect(),
                _ => vec![SettleSeen::Ambiguous; handles.len()],
            };
            let mut again = Vec::new();
            for (handle, seen) in handles.into_iter().zip(seen) {
                self.world.checker.queue_settled(&handle, SettleAction::Ack, sent, seen);
                if seen == SettleSeen::Ambiguous {
                    again.push(handle);
                }
            }
            if !again.is_empty() {
                drain.failures += 1;
            }
            handles = again;
        }
    }

    /// The owner of the drained partition answered 500 because its consumer journal latched:
    /// restart it, as an operator would, and wait until it is ready.
    fn restart_owner(&mut self, drain: &mut Drain) {
        if drain.restarts >= MAX_RESTARTS {
            let now = self.world.queue.now();
            return self.run_to(Instant(now.0 + RETRY_WAIT_MICROS));
        }
        drain.restarts += 1;
        let Some(via) = self.drain_via(drain) else { return };
        let owner = match self
            .call(via, ClientOp::GetTopic { name: drain.name.clone(), partition: None })
        {
            Some(ClientReply::Topic(_, parts)) => parts
                .iter()
                .find(|p| p.index == drain.partition)
                .and_then(|p| p.owner_node.checked_sub(1)),
            _ => None,
        };
        let Some(owner) = owner.map(|o| o as usize).filter(|&o| o < self.nodes()) else { return };
        self.world.record(owner as u32, What::Fault { action: "drain-restart" });
        self.crash(owner, false, false);
        self.restart(owner);
        if !self.hosts[owner].is_up() {
            // Its recovery refused a damaged disk: it stays down, like a node lost in the heal.
            self.lost_nodes |= 1 << owner;
            return;
        }
        let now = self.world.queue.now();
        self.run_until(Instant(now.0 + 10_000_000), 1_000, |s| s.ready());
    }
}
