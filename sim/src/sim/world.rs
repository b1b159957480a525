//! `World`: everything in a simulation except the node hosts — the event queue, the disks, the
//! workload, the checker and the trace. It implements `HostRuntime`, so a host's effects become
//! scheduled events, replies reach the clients and node events reach the checker.

use narad_core::{ClientOp, ClientReply, DiskOp, Instant, IoToken, NodeEvent, RequestId};
use narad_sim_runtime::{EventQueue, FaultClass, FaultHits, FileMatch, HostRuntime, SimDisk};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::checker::Checker;
use crate::schedule::FaultAction;
use crate::trace::{OpKind, Trace, TraceRecord, What};
use crate::workload::Workload;

/// Something scheduled to happen.
#[derive(Clone, Debug)]
pub enum Event {
    /// A disk operation of incarnation `epoch` of `node` completes.
    Disk {
        node: u32,
        epoch: u32,
        token: IoToken,
        op: DiskOp,
    },
    /// A node's timer fires.
    Timer { node: u32, generation: u64 },
    /// A client wakes up.
    ClientWake { client: u32 },
    /// A request has waited too long.
    ClientTimeout { request: RequestId },
    /// A fault strikes (`scheduled` ones are dropped once faults are healed).
    Fault {
        node: u32,
        action: FaultAction,
        scheduled: bool,
    },
    /// Poll whether a graceful shutdown finished.
    ShutdownCheck { node: u32, deadline: Instant },
}

/// Requests the harness itself makes (final reads) have ids from here up.
pub const HARNESS_REQUEST_BASE: u64 = 1 << 62;

/// The simulation minus the hosts.
pub struct World {
    pub queue: EventQueue<Event>,
    pub disks: Vec<SimDisk>,
    pub workload: Workload,
    pub checker: Checker,
    pub trace: Trace,
    /// Process-level fault hits (disk hits live in each `SimDisk`).
    pub hits: FaultHits,
    pub fault_rng: ChaCha8Rng,
    /// Faults are off (heal and final phases).
    pub healed: bool,
    pub restart_on_latch: bool,
    pub latch_restart_pending: bool,
    /// Crash `node` right after the next successful sync of a matching file.
    pub crash_after_sync: Option<(u32, FileMatch, bool)>,
    pub harness_request: Option<RequestId>,
    pub harness_reply: Option<ClientReply>,
    pub next_harness: u64,
}

impl World {
    /// Appends a trace line for `node` at the current time.
    pub fn record(&mut self, node: u32, what: What) {
        let t = self.queue.now().0 - super::START.0;
        let record = TraceRecord {
            t,
            e: self.queue.popped(),
            node,
            what,
        };
        self.trace.push(record);
    }

    /// Counts a process-level fault hit.
    pub fn hit(&mut self, class: FaultClass) {
        self.hits.hit(class);
    }

    /// Wakes `client` after `delay` microseconds.
    pub fn wake_client(&mut self, client: usize, delay: u64) {
        self.queue.push_after(
            delay,
            Event::ClientWake {
                client: client as u32,
            },
        );
    }
}

/// HTTP-like status of a reply, for traces.
pub fn status_of(reply: &ClientReply) -> (u16, u64) {
    match reply {
        ClientReply::TopicCreated(_) => (201, 1),
        ClientReply::TopicDeleted => (204, 0),
        ClientReply::Topics(list) => (200, list.len() as u64),
        ClientReply::Topic(_, parts) => (200, parts.len() as u64),
        ClientReply::Produced { accepted } => (202, *accepted as u64),
        ClientReply::Records(records) => (200, records.len() as u64),
        ClientReply::Stats(_) => (200, 0),
        ClientReply::Members(members) => (200, members.len() as u64),
        ClientReply::Error(e) => (e.http_status(), 0),
    }
}

/// Short name of a client operation, for traces.
pub fn op_name(op: &ClientOp) -> &'static str {
    match op {
        ClientOp::CreateTopic { .. } => "create-topic",
        ClientOp::DeleteTopic { .. } => "delete-topic",
        ClientOp::ListTopics => "list-topics",
        ClientOp::GetTopic { .. } => "get-topic",
        ClientOp::Produce { batch: true, .. } => "produce-batch",
        ClientOp::Produce { .. } => "produce",
        ClientOp::Consume { .. } => "consume",
        ClientOp::Stats => "stats",
        ClientOp::Members => "members",
    }
}

impl HostRuntime for World {
    fn send(&mut self, node: u32, to: narad_core::NodeId, _bytes: bytes::Bytes) {
        // Single-node simulations: a node never has a peer to talk to.
        panic!("node {node} sent a peer message to node {} in a single-node simulation", to.0);
    }

    fn ready(&mut self, _node: u32, watermarks: &[(narad_core::PartitionKey, u64)]) {
        self.checker.on_restart(watermarks);
    }

    fn disk_op(&mut self, node: u32, epoch: u32, token: IoToken, op: DiskOp) {
        let now = self.queue.now();
        let at = self.disks[node as usize].schedule(now, &op);
        let (kind, offset, len) = OpKind::of(&op);
        let file = op.file();
        let done_in = at.0 - now.0;
        self.record(
            node,
            What::DiskIssue {
                token: token.0,
                kind,
                file,
                offset,
                len,
                at: done_in,
            },
        );
        self.queue.push_at(
            at,
            Event::Disk {
                node,
                epoch,
                token,
                op,
            },
        );
    }

    fn reply(&mut self, node: u32, request: RequestId, reply: ClientReply) {
        let (status, count) = status_of(&reply);
        self.record(
            node,
            What::Reply {
                request: request.0,
                status,
                count,
            },
        );
        if Some(request) == self.harness_request {
            self.harness_request = None;
            self.harness_reply = Some(reply);
            return;
        }
        if let Some((client, delay)) = self.workload.on_reply(request, &reply, &mut self.checker) {
            self.wake_client(client, delay);
        }
    }

    fn event(&mut self, node: u32, event: NodeEvent) {
        let what = match &event {
            NodeEvent::Committed {
                key,
                first_offset,
                origins,
                ..
            } => What::Committed {
                key: *key,
                first: *first_offset,
                count: origins.len() as u64,
            },
            NodeEvent::CheckpointDurable { checkpoint } => What::Checkpoint {
                checkpoint: *checkpoint,
            },
            NodeEvent::Discarded { seq, topic } => What::Discarded {
                seq: *seq,
                topic: topic.0,
            },
            NodeEvent::WalLatched => What::Latched,
            NodeEvent::CommitFailed { key, .. } => What::CommitFailed { key: *key },
            NodeEvent::RecordsLost { seqs } => What::RecordsLost {
                first: seqs.start,
                count: seqs.end - seqs.start,
            },
        };
        self.record(node, what);
        self.checker.on_event(&event);
        if matches!(event, NodeEvent::WalLatched)
            && self.restart_on_latch
            && !self.healed
            && !self.latch_restart_pending
        {
            self.latch_restart_pending = true;
            let delay = self.fault_rng.random_range(20_000..500_000);
            let action = FaultAction::GracefulRestart;
            self.queue.push_after(
                delay,
                Event::Fault {
                    node,
                    action,
                    scheduled: true,
                },
            );
        }
    }

    fn arm_timer(&mut self, node: u32, at: Instant, generation: u64) {
        self.queue.push_at(at, Event::Timer { node, generation });
    }
}
