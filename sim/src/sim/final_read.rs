//! The final read, as a harness client: every node must list every live topic under the incarnation
//! the workload knows (paging through its list); each partition's watermark is taken from its
//! owner's own answer; every partition is read in full from offset 0, through a node chosen per
//! partition (in a cluster usually not the owner, so forwarded reads are checked too).

use std::collections::BTreeMap;

use narad_core::{
    ClientError, ClientOp, ClientReply, Input, Instant, PartitionKey, RequestId, TopicId,
};

use super::Simulation;
use crate::checker::{PageAsked, ReadKind, inv};
use crate::trace::What;
use crate::workload::DEAD_LETTER_TOPIC;

/// Topics per page of the final read's topic list: small, so that a seed's few topics still
/// take several pages and every page boundary is crossed.
const FINAL_PAGE_TOPICS: u32 = 2;

/// Longest wait for one harness request.
const CALL_TIMEOUT_MICROS: u64 = 10_000_000;
/// A consume that times out between nodes (503) is retried this many times.
const UNAVAILABLE_RETRIES: u32 = 8;

impl Simulation {
    /// Sends one request to node `node` as the harness and runs until it is answered.
    pub(super) fn call(&mut self, node: usize, op: ClientOp) -> Option<ClientReply> {
        if !self.hosts[node].is_up() {
            return None;
        }
        let request = RequestId(self.world.next_harness);
        self.world.next_harness += 1;
        self.world.harness_request = Some(request);
        self.world.harness_reply = None;
        let now = self.world.queue.now();
        let what = What::Request {
            request: request.0,
            op: super::world::op_name(&op),
            topic: crate::trace::TopicTag::of(&op),
        };
        self.world.record(node as u32, what);
        self.hosts[node].deliver(
            now,
            Input::Client { request, op, who: narad_core::access::Principal::Trusted },
            &mut self.world,
        );
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
    pub(super) fn final_read(&mut self, kind: ReadKind) {
        let up: Vec<usize> = (0..self.nodes()).filter(|&n| self.hosts[n].is_up()).collect();
        for &node in &up {
            self.check_topic_list(node);
        }
        for (t, (name, inc, _)) in self.world.workload.topics.all_live().into_iter().enumerate() {
            self.read_topic(t, &name, inc, &up, kind);
        }
    }

    /// Reads the dead-letter topic again, after the queue drain moved more messages to it.
    pub(super) fn reread_dead_letters(&mut self) {
        let up: Vec<usize> = (0..self.nodes()).filter(|&n| self.hosts[n].is_up()).collect();
        let topics = self.world.workload.topics.all_live();
        let found =
            topics.into_iter().enumerate().find(|(_, (name, ..))| name == DEAD_LETTER_TOPIC);
        if let Some((t, (name, inc, _))) = found {
            self.read_topic(t, &name, inc, &up, ReadKind::Final);
        }
    }

    /// Reads every partition of topic `name` (incarnation `inc`, the `t`-th live topic) in
    /// full, each through one of the nodes `up`.
    fn read_topic(&mut self, t: usize, name: &str, inc: TopicId, up: &[usize], kind: ReadKind) {
        let name = name.to_string();
        let mut watermarks = BTreeMap::new();
        for &node in up {
            let reply = self.call(node, ClientOp::GetTopic { name: name.clone(), partition: None });
            let Some(ClientReply::Topic(info, partitions)) = reply else {
                let detail = format!("final lookup of live topic {name} on n{node}: {reply:?}");
                self.world.checker.violation(inv::TOPIC_LOST, detail);
                continue;
            };
            if info.id != inc {
                let detail = format!(
                    "topic {name} is incarnation {} on n{node}, expected {}",
                    info.id.0, inc.0
                );
                self.world.checker.violation(inv::TOPIC_LOST, detail);
                continue;
            }
            let lost = |owner: u32| owner >= 1 && self.lost_nodes & (1 << (owner - 1)) != 0;
            if partitions.iter().all(|p| lost(p.owner_node)) {
                // Every partition lives on a node whose disk is gone: no live sibling to
                // reroute to, so its records wait forever (docs/design.md §1, "one copy per
                // partition").
                self.world.checker.unavailable(inc);
            }
            for stats in partitions {
                if stats.owner_node as usize == node + 1 {
                    let hwm = stats.numbers.map_or(0, |n| n.high_watermark);
                    watermarks.insert(stats.index, hwm);
                }
            }
        }
        for (index, hwm) in watermarks {
            let key = PartitionKey { topic: inc, partition: index };
            self.world.checker.final_watermark(key, hwm);
            let via = up[(index as usize + t) % up.len()];
            self.read_partition(via, &name, key, hwm, kind);
        }
    }

    /// Reads `key` from offset 0 to `hwm` through node `via`. A failing read is retried one
    /// record at a time, so a damaged record (detected corruption) costs only itself.
    fn read_partition(
        &mut self,
        via: usize,
        name: &str,
        key: PartitionKey,
        hwm: u64,
        kind: ReadKind,
    ) {
        let mut offset = 0;
        let mut errors = 0;
        let mut unavailable = 0;
        let mut max = 1_000;
        while offset < hwm && errors < 1_000 {
            let topic = name.to_string();
            let op = ClientOp::Consume { topic, partition: key.partition, offset, max, wait_ms: 0 };
            match self.call(via, op) {
                Some(ClientReply::Records(records)) if !records.is_empty() => {
                    self.world.checker.consumed(key, offset, &records, kind);
                    offset += records.len() as u64;
                    max = 1_000;
                }
                Some(ClientReply::Error(ClientError::Gone { log_start_offset }))
                    if log_start_offset > offset && log_start_offset <= hwm =>
                {
                    self.world.checker.log_start_moved(key, offset, log_start_offset);
                    offset = log_start_offset;
                }
                Some(ClientReply::Error(ClientError::Unavailable(_)))
                    if unavailable < UNAVAILABLE_RETRIES =>
                {
                    // An owner not reachable yet, or the segment being deleted by retention:
                    // give it a moment (1 ms, doubling).
                    let now = self.world.queue.now();
                    self.run_to(Instant(now.0 + (1_000 << unavailable)));
                    unavailable += 1;
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
                        format!("{key}: final read via n{via} at {offset} below {hwm}: {other:?}");
                    self.world.checker.violation(inv::PROTOCOL, detail);
                    return;
                }
            }
        }
    }

    /// Pages through node `node`'s topic list, `FINAL_PAGE_TOPICS` at a time, judging each
    /// page; every acknowledged live topic must be on one.
    fn check_topic_list(&mut self, node: usize) {
        let mut listed = Vec::new();
        let mut page = Some(PageAsked::first(FINAL_PAGE_TOPICS));
        while let Some(asked) = page {
            let Some(ClientReply::Topics { topics, next }) = self.call(node, asked.op()) else {
                let detail = format!("final ListTopics on n{node} failed");
                self.world.checker.violation(inv::PROTOCOL, detail);
                return;
            };
            self.world.checker.topic_page(&asked, &topics, next.as_deref());
            listed.extend(topics);
            page = asked.following(next);
        }
        for (name, inc, _) in self.world.workload.topics.all_live() {
            if !listed.iter().any(|t| t.name == name && t.id == inc) {
                let detail =
                    format!("acknowledged topic {name}#{} missing from n{node}'s list", inc.0);
                self.world.checker.violation(inv::TOPIC_LOST, detail);
            }
        }
    }
}
