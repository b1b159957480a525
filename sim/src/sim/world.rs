//! `World`: everything in a simulation except the node hosts — the event queue, the disks, the
//! network, the workload, the checker and the trace. It implements `HostRuntime`, so a host's
//! effects become scheduled events (disk completions, peer messages through the network), replies
//! reach the clients and node events reach the checker.

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::{
    ClientOp, ClientReply, DiskOp, FileId, Instant, IoToken, NodeEvent, PartitionKey, RequestId,
    codec,
};
use narad_sim_runtime::{
    EventQueue, Fate, FaultClass, FaultHits, FileMatch, HostRuntime, Link, SimDisk, SimNetwork,
};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::checker::Checker;
use crate::outcome::ClusterTotals;
use crate::payload::parse_id;
use crate::schedule::FaultAction;
use crate::trace::{OpKind, Trace, TraceRecord, What};
use crate::workload::Workload;

/// Something scheduled to happen.
#[derive(Clone, Debug)]
pub enum Event {
    /// A disk operation of incarnation `epoch` of `node` completes.
    Disk { node: u32, epoch: u32, token: IoToken, op: DiskOp },
    /// A node's timer fires.
    Timer { node: u32, generation: u64 },
    /// A client wakes up.
    ClientWake { client: u32 },
    /// A request has waited too long.
    ClientTimeout { request: RequestId },
    /// A fault strikes (`scheduled` ones are dropped once faults are healed).
    Fault { node: u32, action: FaultAction, scheduled: bool },
    /// Poll whether the graceful shutdown of incarnation `epoch` finished.
    ShutdownCheck { node: u32, epoch: u32, deadline: Instant },
    /// A peer message arrives at `to`, if its process is still incarnation `epoch` and no cut
    /// stops it on the way.
    Deliver { from: u32, to: u32, epoch: u32, bytes: Bytes },
    /// Look at the cluster (who leads the metastore), every 100 ms of a cluster run.
    Observe,
    /// Incarnation `epoch` of `node` learns from its transport that `to` is unreachable.
    Unreachable { node: u32, epoch: u32, to: u32 },
}

/// How long a transport takes to notice that a peer cannot be reached.
const UNREACHABLE_AFTER_MICROS: u64 = 1_000;

/// An open network window: the links it cut or clogged.
#[derive(Clone, Debug)]
pub struct NetWindow {
    pub links: Vec<Link>,
    pub kind: WindowKind,
}

/// What a network window does to its links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    Symmetric,
    OneWay,
    Clog,
}

/// Requests the harness itself makes (final reads) have ids from here up.
pub const HARNESS_REQUEST_BASE: u64 = 1 << 62;

/// The simulation minus the hosts.
pub struct World {
    pub queue: EventQueue<Event>,
    pub disks: Vec<SimDisk>,
    pub net: SimNetwork,
    pub workload: Workload,
    pub checker: Checker,
    pub trace: Trace,
    /// Process-level fault hits (disk hits live in each `SimDisk`).
    pub hits: FaultHits,
    pub fault_rng: ChaCha8Rng,
    /// Which node each client request goes to.
    pub route_rng: ChaCha8Rng,
    /// Faults are off (heal and final phases).
    pub healed: bool,
    pub restart_on_latch: bool,
    /// Per node: a graceful restart after a WAL latch is already scheduled.
    pub latch_restart_pending: Vec<bool>,
    /// A crash armed to strike right after an operation lands (see `ArmedCrash`).
    pub armed_crash: Option<ArmedCrash>,
    pub harness_request: Option<RequestId>,
    pub harness_reply: Option<ClientReply>,
    pub next_harness: u64,
    /// Per node: `Some(epoch)` while its process runs (a message to a node that is down, or
    /// that restarted since it was sent, is lost with its connection).
    pub running: Vec<Option<u32>>,
    /// Open network windows by id.
    pub windows: BTreeMap<u32, NetWindow>,
    /// The metastore leader last observed (cluster runs).
    pub leader: Option<u32>,
    /// The transport reports unreachable peers (`Input::PeerUnreachable`) in this run.
    pub report_unreachable: bool,
    /// Links with an unreachable report on its way.
    pub unreachable_pending: std::collections::BTreeSet<Link>,
    /// Counters of incarnations that ended.
    pub totals: ClusterTotals,
    /// Scenarios: client requests of producers and readers (`.0`) or the admin (`.1`) go to this
    /// node instead of a random one.
    pub pinned: (Option<u32>, Option<u32>),
}

impl World {
    /// Appends a trace line for `node` at the current time.
    pub fn record(&mut self, node: u32, what: What) {
        let t = crate::clock::since_start(self.queue.now());
        let record = TraceRecord { t, e: self.queue.popped(), node, what };
        self.trace.push(record);
    }

    /// Counts a process-level fault hit.
    pub fn hit(&mut self, class: FaultClass) {
        self.hits.hit(class);
    }

    /// Schedules the delivery of `bytes` on `link` after `delay` (lost if the receiver is down).
    pub fn schedule_delivery(&mut self, link: Link, bytes: Bytes, delay: u64) {
        let (from, to) = link;
        if let Some(epoch) = self.running[to as usize] {
            self.queue.push_after(delay, Event::Deliver { from, to, epoch, bytes });
        }
    }

    /// The transport of `node` noticed it has no connection to `to`: tell the node soon (once
    /// per link at a time), when this seed's transport reports it at all.
    fn report_unreachable(&mut self, node: u32, to: u32) {
        let Some(epoch) = self.running[node as usize] else { return };
        if self.report_unreachable && self.unreachable_pending.insert((node, to)) {
            self.queue.push_after(UNREACHABLE_AFTER_MICROS, Event::Unreachable { node, epoch, to });
        }
    }

    /// Whether node `node`'s WAL holds, durably, a dead-letter copy of the message at
    /// `key`@`offset`. `None` when it cannot be judged: the checker does not know which message
    /// that is, or the copy is in a file whose fsync lied (the node rightly believes it
    /// durable; the damage is the disk's, reported at the power loss).
    fn dead_letter_copy_durable(&self, node: u32, key: PartitionKey, offset: u64) -> Option<bool> {
        let id = self.checker.message_at(key, offset)?;
        let holds_copy = |data: &[u8]| {
            codec::scan(data).frames.iter().any(|frame| {
                narad_core::wal::WalRecord::decode(frame.body(data)).is_some_and(|record| {
                    self.checker.is_dead_letter_topic(record.topic_id)
                        && parse_id(&record.payload) == Some(id)
                })
            })
        };
        let wal = self.disks[node as usize]
            .files()
            .filter(|(file, _)| matches!(file, FileId::WalSegment { .. }));
        let mut lied = false;
        for (_, f) in wal {
            if holds_copy(&f.durable_data()) {
                return Some(true);
            }
            lied |= f.lied && holds_copy(f.data());
        }
        (!lied).then_some(false)
    }

    /// Wakes `client` after `delay` microseconds.
    pub fn wake_client(&mut self, client: usize, delay: u64) {
        self.queue.push_after(delay, Event::ClientWake { client: client as u32 });
    }
}

/// HTTP-like status of a reply, for traces.
pub fn status_of(reply: &ClientReply) -> (u16, u64) {
    match reply {
        ClientReply::TopicCreated(_) => (201, 1),
        ClientReply::TopicDeleted => (204, 0),
        ClientReply::TopicUpdated(_) => (200, 0),
        ClientReply::Topics { topics, .. } => (200, topics.len() as u64),
        ClientReply::Topic(_, parts) => (200, parts.len() as u64),
        ClientReply::Produced { accepted } => (202, *accepted as u64),
        ClientReply::Records(records) => (200, records.len() as u64),
        ClientReply::Members(members) => (200, members.len() as u64),
        ClientReply::Leased(leased) => {
            (if leased.is_empty() { 204 } else { 200 }, leased.len() as u64)
        }
        ClientReply::Settled(results) => (200, results.iter().filter(|r| r.is_ok()).count() as u64),
        ClientReply::UserCreated(_) => (201, 1),
        ClientReply::UserChanged(_) | ClientReply::User(_) => (200, 1),
        ClientReply::UserDeleted => (204, 0),
        ClientReply::Users(users) => (200, users.len() as u64),
        ClientReply::Error(e) => (e.http_status(), 0),
    }
}

/// The trace record of a node event (`None`: not traced; topic changes are the core's to log,
/// dead letters the checker's to judge).
pub fn traced(event: &NodeEvent) -> Option<What> {
    Some(match event {
        NodeEvent::Committed { key, first_offset, origins, .. } => {
            What::Committed { key: *key, first: *first_offset, count: origins.len() as u64 }
        }
        NodeEvent::CheckpointDurable { checkpoint } => What::Checkpoint { checkpoint: *checkpoint },
        NodeEvent::Discarded { seq, topic } => What::Discarded { seq: *seq, topic: topic.0 },
        NodeEvent::WalLatched => What::Latched,
        NodeEvent::CommitFailed { key, .. } => What::CommitFailed { key: *key },
        NodeEvent::RecordsLost { seqs } => {
            What::RecordsLost { first: seqs.start, count: seqs.end - seqs.start }
        }
        NodeEvent::TopicApplied { .. }
        | NodeEvent::RecordsAbandoned { .. }
        | NodeEvent::DeadLettered { .. }
        | NodeEvent::QuotaSpent { .. }
        | NodeEvent::UserApplied { .. }
        | NodeEvent::UsersReplaced { .. } => return None,
        NodeEvent::SegmentDeleted { key, trimmed, .. } => What::SegmentDeleted {
            key: *key,
            log_start: trimmed.log_start_offset,
            records: trimmed.records,
        },
    })
}

/// Short name of a client operation, for traces.
pub fn op_name(op: &ClientOp) -> &'static str {
    match op {
        ClientOp::CreateTopic { .. } => "create-topic",
        ClientOp::DeleteTopic { .. } => "delete-topic",
        ClientOp::UpdateTopic { .. } => "update-topic",
        ClientOp::ListTopics { .. } => "list-topics",
        ClientOp::GetTopic { .. } => "get-topic",
        ClientOp::Produce { batch: true, .. } => "produce-batch",
        ClientOp::Produce { .. } => "produce",
        ClientOp::Consume { .. } => "consume",
        ClientOp::Members => "members",
        ClientOp::Receive { .. } => "receive",
        ClientOp::Settle { .. } => "settle",
        ClientOp::CreateUser { .. } => "create-user",
        ClientOp::ListUsers => "list-users",
        ClientOp::GetUser { .. } => "get-user",
        ClientOp::DeleteUser { .. } => "delete-user",
        ClientOp::SetGrants { .. } => "set-grants",
        ClientOp::SetPassword { .. } => "set-password",
    }
}

/// The message type tag of encoded peer bytes (after the version byte), for traces.
pub fn peer_tag(bytes: &[u8]) -> u8 {
    bytes.get(1).copied().unwrap_or(0)
}

impl HostRuntime for World {
    fn send(&mut self, node: u32, to: narad_core::NodeId, bytes: Bytes) {
        let to = to.0.checked_sub(1).filter(|&to| (to as usize) < self.running.len());
        let Some(to) = to else {
            panic!("node {node} sent a peer message to a node outside the cluster");
        };
        let (tag, len) = (peer_tag(&bytes), bytes.len() as u64);
        let fate = if self.running[to as usize].is_none() {
            Fate::Unreachable
        } else {
            self.net.send((node, to), bytes.clone())
        };
        let code = match fate {
            Fate::Deliver(delays) => {
                let copies = delays.len() as u8;
                for delay in delays {
                    self.schedule_delivery((node, to), bytes.clone(), delay);
                }
                copies
            }
            Fate::Held => 3,
            Fate::Dropped => 0,
            Fate::Unreachable => {
                self.report_unreachable(node, to);
                4
            }
        };
        self.record(node, What::Send { to, tag, len, fate: code });
    }

    fn ready(
        &mut self,
        node: u32,
        numbers: &[(narad_core::PartitionKey, narad_core::api::PartitionNumbers)],
        clock_ms: u64,
    ) {
        self.checker.on_restart(node, numbers, clock_ms);
    }

    fn disk_op(&mut self, node: u32, epoch: u32, token: IoToken, op: DiskOp) {
        crate::observe::note_stagings(&mut self.checker, node, &op);
        let now = self.queue.now();
        let at = self.disks[node as usize].schedule(now, &op);
        let (kind, offset, len) = OpKind::of(&op);
        let file = op.file();
        let done_in = at.0 - now.0;
        self.record(node, What::DiskIssue { token: token.0, kind, file, offset, len, at: done_in });
        self.queue.push_at(at, Event::Disk { node, epoch, token, op });
    }

    fn reply(&mut self, node: u32, request: RequestId, reply: ClientReply) {
        let (status, count) = status_of(&reply);
        self.record(node, What::Reply { request: request.0, status, count });
        if Some(request) == self.harness_request {
            self.harness_request = None;
            self.harness_reply = Some(reply);
            return;
        }
        self.checker.quota_answered(request, &reply);
        if let Some((client, delay)) =
            self.workload.on_reply(node, request, &reply, &mut self.checker)
        {
            self.wake_client(client, delay);
        }
    }

    fn event(&mut self, node: u32, event: NodeEvent) {
        if let NodeEvent::DeadLettered { key, offset } = &event {
            let durable = self.dead_letter_copy_durable(node, *key, *offset);
            return self.checker.dead_lettered(node, *key, *offset, durable);
        }
        let Some(what) = traced(&event) else {
            return self.checker.on_event(node, &event);
        };
        self.record(node, what);
        self.checker.on_event(node, &event);
        if matches!(event, NodeEvent::WalLatched)
            && self.restart_on_latch
            && !self.healed
            && !self.latch_restart_pending[node as usize]
        {
            self.latch_restart_pending[node as usize] = true;
            let delay = self.fault_rng.random_range(20_000..500_000);
            let action = FaultAction::GracefulRestart;
            self.queue.push_after(delay, Event::Fault { node, action, scheduled: true });
        }
    }

    fn arm_timer(&mut self, node: u32, at: Instant, generation: u64) {
        self.queue.push_at(at, Event::Timer { node, generation });
    }
}

/// Crash `node` right after the next successful operation of kind `after` on a file matching
/// `target` lands, before the node hears of it (`power`: a power loss, else a process kill).
#[derive(Clone, Copy, Debug)]
pub struct ArmedCrash {
    pub node: u32,
    pub target: FileMatch,
    pub power: bool,
    pub after: OpKind,
}
