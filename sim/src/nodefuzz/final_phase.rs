//! The end of a run: heal (no more injected errors; a latched or shutting-down node is shut
//! down gracefully and restarted), let the dispatch backlog drain (liveness), check the WAL's
//! disk bound, then read every partition of every topic in full and check that every
//! acknowledged record is there unless its topic incarnation is gone. Optionally cut the power
//! once more, recover, and read again: nothing visible may vanish or change.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use narad_core::constants::WAL_ROTATE_DISPATCHED_BYTES;
use narad_core::{ClientOp, ClientReply, Input, TopicId};

use super::FINAL_STEPS;
use super::harness::Harness;
use super::input::CrashKind;
use super::values::NODE;

/// Simulated time the backlog gets to drain once healed (the simulator's single-node limit).
const DRAIN_MICROS: u64 = 60_000_000;
/// How long a graceful shutdown may take.
const SHUTDOWN_MICROS: u64 = 10_000_000;
/// Idle time after the drain for the checkpoint to become durable and the WAL to compact.
const SETTLE_MICROS: u64 = 1_500_000;
/// How long one final read request may take.
const READ_MICROS: u64 = 5_000_000;

/// One record as read: key and payload.
pub type Record = (Option<Bytes>, Bytes);

/// What a final read found.
#[derive(Debug, Default)]
pub struct Contents {
    /// Every topic incarnation the node lists.
    pub live: BTreeSet<TopicId>,
    /// Every record of every non-empty partition: (incarnation, partition) → (key, payload)
    /// in offset order.
    pub partitions: BTreeMap<(TopicId, u32), Vec<Record>>,
}

impl Harness {
    /// See the module docs. Returns false if the checks were skipped (a forged member).
    pub fn final_phase(&mut self, power_loss: bool) -> bool {
        self.step_limit = self.steps + FINAL_STEPS;
        self.heal();
        if !self.drain_backlog() {
            return false;
        }
        self.run_until(SETTLE_MICROS, |_| false);
        self.check_wal_bound();
        let first = self.read_everything();
        self.check_acked(&first);
        if power_loss {
            self.crash_and_restart(CrashKind::PowerLoss, &[]);
            if !self.drain_backlog() {
                return false;
            }
            let second = self.read_everything();
            self.check_acked(&second);
            check_nothing_vanished(&first, &second);
        }
        true
    }

    /// A node that cannot acknowledge produces any more (latched WAL) or was told to shut down
    /// finishes its shutdown and is restarted, as the simulator's heal does.
    fn heal(&mut self) {
        let latched = self.latched || self.node().stats().wal_failed > 0;
        if !latched && !self.shutting_down {
            return;
        }
        if !self.shutting_down {
            self.shutting_down = true;
            self.input(Input::BeginShutdown);
        }
        // Shut down, every request answered: nothing is left for the restart to drop.
        let shut = self
            .run_until(SHUTDOWN_MICROS, |h| h.node().is_shut_down() && h.oracle.outstanding() == 0);
        assert!(
            shut,
            "INVARIANT liveness: graceful shutdown did not finish with every request answered \
             in 10 s ({} disk operations in flight, {} requests unanswered)",
            self.disk.in_flight(),
            self.oracle.outstanding()
        );
        self.crash_and_restart(CrashKind::Process, &[]);
    }

    /// Runs until ready with an empty backlog and every request answered. False if a forged
    /// member (from a fake Raft message) may legitimately hold records back.
    fn drain_backlog(&mut self) -> bool {
        let drained_or_latched = |h: &Harness| {
            let drained =
                h.ready() && h.node().stats().dispatch_backlog == 0 && h.oracle.outstanding() == 0;
            drained || h.node().stats().wal_failed > 0
        };
        let mut drained = self.run_until(DRAIN_MICROS, drained_or_latched);
        if drained && self.node().stats().wal_failed > 0 {
            // An error injected before the heal failed a group commit after it: the WAL latched
            // late, and a latched node is restarted as at the heal (a chunked request open at
            // the latch is dispatched only once a start-up has decided it).
            self.heal();
            drained = self.run_until(DRAIN_MICROS, drained_or_latched)
                && self.node().stats().wal_failed == 0;
        }
        if drained {
            return true;
        }
        if self.foreign_member() {
            return false;
        }
        let stats = self.node().stats();
        panic!(
            "INVARIANT liveness: {} s after the heal: ready {}, dispatch backlog {}, {} requests \
             unanswered, {} disk operations in flight, {} steps (limit {})",
            DRAIN_MICROS / 1_000_000,
            self.ready(),
            stats.dispatch_backlog,
            self.oracle.outstanding(),
            self.disk.in_flight(),
            self.steps,
            self.step_limit
        );
    }

    /// True when the metastore lists a member other than our node (only forged Raft traffic
    /// can do that: the fake peer is no voter).
    fn foreign_member(&mut self) -> bool {
        match self.ask(ClientOp::Members, READ_MICROS) {
            Some(ClientReply::Members(members)) => members.iter().any(|m| m.id != NODE.0),
            _ => true,
        }
    }

    /// After the drain and settle, the WAL is under 1 MiB plus at most one segment in rotation.
    fn check_wal_bound(&self) {
        let sizes = self.disk.wal_segment_sizes();
        let newest = sizes.last().copied().unwrap_or(0);
        assert!(
            sizes.len() <= 2 && newest < WAL_ROTATE_DISPATCHED_BYTES,
            "INVARIANT wal-bound: after the drain: {} WAL segments, sizes {sizes:?}",
            sizes.len()
        );
    }

    /// Reads every partition of every topic from offset 0 to its end.
    pub fn read_everything(&mut self) -> Contents {
        // The fuzzer's few names fit one page of the most.
        let topics = match self.ask(ClientOp::list_topics(), READ_MICROS) {
            Some(ClientReply::Topics { topics, next: None }) => topics,
            other => panic!("INVARIANT final-read: ListTopics after the heal answered {other:?}"),
        };
        let mut contents = Contents::default();
        for topic in topics {
            for partition in self.partitions_with_records(&topic.name) {
                let records = self.read_partition(&topic.name, partition);
                contents.partitions.insert((topic.id, partition), records);
            }
            contents.live.insert(topic.id);
        }
        contents
    }

    /// The partitions of `topic` whose high watermark is above 0 (`GetTopic`): reading the
    /// empty ones of a 4,096-partition topic one by one would dominate the run.
    fn partitions_with_records(&mut self, topic: &str) -> Vec<u32> {
        let op = ClientOp::GetTopic { name: topic.into(), partition: None };
        let stats = match self.ask(op, READ_MICROS) {
            Some(ClientReply::Topic(_, stats)) => stats,
            other => {
                panic!("INVARIANT final-read: GetTopic {topic} after the heal answered {other:?}")
            }
        };
        let has_records = |p: &&narad_core::api::PartitionStats| {
            p.numbers.is_none_or(|n| n.high_watermark > n.log_start_offset)
        };
        stats.iter().filter(has_records).map(|p| p.index).collect()
    }

    fn read_partition(&mut self, topic: &str, partition: u32) -> Vec<Record> {
        let mut out = Vec::new();
        loop {
            let offset = out.len() as u64;
            let op = ClientOp::Consume {
                topic: topic.into(),
                partition,
                offset,
                max: 1_000,
                wait_ms: 0,
            };
            let records = match self.ask(op, READ_MICROS) {
                Some(ClientReply::Records(records)) => records,
                other => panic!(
                    "INVARIANT final-read: consume {topic}/p{partition} from {offset} after the \
                     heal answered {other:?}"
                ),
            };
            self.oracle.check_records(narad_core::RequestId(0), offset, &records);
            if records.is_empty() {
                return out;
            }
            out.extend(records.into_iter().map(|r| (r.key, r.payload)));
        }
    }

    /// Every acknowledged record of a topic incarnation that still exists is on one of its
    /// partitions (as many copies as were acknowledged, at least).
    fn check_acked(&self, contents: &Contents) {
        let mut visible: BTreeMap<(TopicId, &Option<Bytes>, &Bytes), usize> = BTreeMap::new();
        for ((topic, _), records) in &contents.partitions {
            for (key, payload) in records {
                *visible.entry((*topic, key, payload)).or_default() += 1;
            }
        }
        for acked in self.oracle.acked.iter().filter(|a| contents.live.contains(&a.topic)) {
            let slot = visible.get_mut(&(acked.topic, &acked.key, &acked.payload));
            match slot {
                Some(count) if *count > 0 => *count -= 1,
                _ => panic!(
                    "INVARIANT acked-visible: a record acknowledged 202 on topic#{} (key {:?}, \
                     {} payload bytes starting {:?}) is on none of its partitions after the heal \
                     ({} restarts)",
                    acked.topic.0,
                    acked.key.as_ref().map(Bytes::len),
                    acked.payload.len(),
                    &acked.payload[..acked.payload.len().min(8)],
                    self.starts
                ),
            }
        }
    }
}

/// Every partition read before the last power loss reads the same afterwards, plus maybe more.
fn check_nothing_vanished(before: &Contents, after: &Contents) {
    for (key, old) in &before.partitions {
        if !after.live.contains(&key.0) {
            continue; // a deletion applied at restart: its records may go
        }
        let new = after.partitions.get(key).map_or(&[][..], Vec::as_slice);
        assert!(
            new.len() >= old.len() && new[..old.len()] == old[..],
            "INVARIANT visible-stays: topic#{}/p{} held {} records before the final power loss, \
             {} after, and they differ",
            key.0.0,
            key.1,
            old.len(),
            new.len()
        );
    }
}
