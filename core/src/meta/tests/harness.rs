//! A tiny deterministic world for metastore tests: N replicas, a message queue with per-link
//! cuts, an in-memory disk per node that separates written from synced bytes (a crash keeps only
//! what was synced), and virtual time driven by one event queue ordered by (time, sequence).
//! Every output is appended to `trace`, so two runs of a scenario can be compared byte for byte.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::api::ClientError;
use crate::ids::{Instant, NodeId};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use crate::meta::{Applied, MetaCommand, MetaConfig, MetaIo, MetaOutput, Metastore, ProposeError};

pub const T0: Instant = Instant(1_700_000_000_000_000);
const NET_DELAY_MS: u64 = 2;

enum Event {
    Tick,
    Net { from: NodeId, bytes: Bytes },
    Disk { io: MetaIo, result: Result<DiskDone, DiskError> },
    Forward { command: MetaCommand },
}

/// One node's process and disk.
pub struct Host {
    pub meta: Option<Metastore<u64>>,
    pub config: MetaConfig,
    /// Bytes as written (what a read would see now).
    pub files: BTreeMap<FileId, Vec<u8>>,
    /// Bytes as of each file's last sync (what survives a crash).
    pub synced: BTreeMap<FileId, Vec<u8>>,
    epoch: u64,
    pub disk_delay_ms: u64,
    /// Fails every disk operation on this file, when set.
    pub fail_file: Option<FileId>,
    /// One-shot: the next write to this file at this offset fails (a transient EIO).
    pub fail_write_once: Option<(FileId, u64)>,
    /// Ops on this file hang: never executed, never completed.
    pub stalled: Option<FileId>,
    /// Stall the Raft log from the moment a snapshot record is written.
    pub stall_log_on_snapshot: bool,
}

pub struct World {
    pub hosts: BTreeMap<NodeId, Host>,
    pub now: Instant,
    events: BTreeMap<(Instant, u64), (NodeId, u64, Event)>,
    seq: u64,
    /// Directed links that drop everything.
    pub cut: BTreeSet<(NodeId, NodeId)>,
    pub trace: Vec<String>,
    /// Results delivered to waiters, by waiter id.
    pub results: BTreeMap<u64, Result<Applied, ClientError>>,
    pub barriers: BTreeMap<u64, bool>,
    /// Every `Applied` per node, in order (waiter or not).
    pub applied: BTreeMap<NodeId, Vec<Result<Applied, ClientError>>>,
    pub liveness: Vec<(NodeId, NodeId, bool)>,
    /// Nodes whose membership heartbeats the world sends (proposes or forwards to the leader).
    pub heartbeating: BTreeSet<NodeId>,
    /// Which node led each term (checked after every event: never two).
    pub leaders_by_term: BTreeMap<u64, NodeId>,
    /// When set, the network delays (1-30 ms, so it reorders), drops 5% and duplicates 2% of
    /// messages, and a crash keeps a random prefix of each file's unsynced tail (a torn write).
    pub chaos: Option<ChaCha8Rng>,
    next_waiter: u64,
}

pub fn config(node: u32, voters: u32, seed: u64) -> MetaConfig {
    let voters = (1..=voters).map(NodeId).collect();
    let mut config = MetaConfig::new(NodeId(node), voters, seed);
    config.http_addr = format!("127.0.0.1:{}", 7940 + node);
    config.cluster_addr = format!("127.0.0.1:{}", 8940 + node);
    config
}

impl World {
    pub fn new(nodes: u32, seed: u64) -> World {
        World::with_configs((1..=nodes).map(|n| config(n, nodes, seed)).collect())
    }

    pub fn with_configs(configs: Vec<MetaConfig>) -> World {
        let mut world = World {
            hosts: BTreeMap::new(),
            now: T0,
            events: BTreeMap::new(),
            seq: 0,
            cut: BTreeSet::new(),
            trace: Vec::new(),
            results: BTreeMap::new(),
            barriers: BTreeMap::new(),
            applied: BTreeMap::new(),
            liveness: Vec::new(),
            heartbeating: BTreeSet::new(),
            leaders_by_term: BTreeMap::new(),
            chaos: None,
            next_waiter: 1,
        };
        for config in configs {
            let id = config.node_id;
            let host = Host {
                meta: None,
                config,
                files: BTreeMap::new(),
                synced: BTreeMap::new(),
                epoch: 0,
                disk_delay_ms: 1,
                fail_file: None,
                fail_write_once: None,
                stalled: None,
                stall_log_on_snapshot: false,
            };
            world.hosts.insert(id, host);
            world.start(id);
        }
        world
    }

    pub fn meta(&self, node: u32) -> &Metastore<u64> {
        self.hosts[&NodeId(node)].meta.as_ref().expect("node is up")
    }

    fn meta_mut(&mut self, node: NodeId) -> &mut Metastore<u64> {
        self.hosts.get_mut(&node).unwrap().meta.as_mut().expect("node is up")
    }

    /// Starts (or restarts) a node from its synced files.
    pub fn start(&mut self, node: NodeId) {
        let host = self.hosts.get_mut(&node).unwrap();
        host.files = host.synced.clone();
        let log = host.files.get(&FileId::MetaRaftLog).cloned().map(Bytes::from);
        let snap = host.files.get(&FileId::MetaSnapshot).cloned().map(Bytes::from);
        let meta = Metastore::recover(host.config.clone(), self.now, log.as_ref(), snap.as_ref())
            .expect("recovery");
        let next = meta.next_tick();
        host.meta = Some(meta);
        self.schedule(node, next, Event::Tick);
        self.drain(node);
    }

    /// Kills a node: unsynced bytes are lost (under chaos, a prefix of them may survive, torn),
    /// and its pending events are dropped.
    pub fn crash(&mut self, node: NodeId) {
        let host = self.hosts.get_mut(&node).unwrap();
        host.meta = None;
        host.epoch += 1;
        if let Some(rng) = self.chaos.as_mut() {
            for (file, synced) in host.synced.iter_mut() {
                let Some(written) = host.files.get(file) else {
                    continue;
                };
                if written.len() > synced.len() && written.starts_with(synced) {
                    let keep = rng.random_range(synced.len()..=written.len());
                    *synced = written[..keep].to_vec();
                }
            }
        }
        host.files = host.synced.clone();
    }

    fn schedule(&mut self, node: NodeId, at: Instant, event: Event) {
        self.seq += 1;
        let epoch = self.hosts[&node].epoch;
        self.events.insert((at, self.seq), (node, epoch, event));
    }

    /// Runs every event up to `now + millis`.
    pub fn run_for(&mut self, millis: u64) {
        let until = self.now.plus_millis(millis);
        while let Some(entry) = self.events.first_entry() {
            if entry.key().0 > until {
                break;
            }
            let ((at, _), (node, epoch, event)) = entry.remove_entry();
            self.now = self.now.max(at);
            let host = &self.hosts[&node];
            if host.epoch != epoch || host.meta.is_none() {
                continue;
            }
            self.handle(node, event);
            self.check_one_leader_per_term(node);
        }
        self.now = until;
    }

    /// Runs until `done` holds (checked every 10 ms), at most `max_ms`. Returns whether it held.
    pub fn run_until(&mut self, max_ms: u64, mut done: impl FnMut(&World) -> bool) -> bool {
        for _ in 0..max_ms / 10 {
            if done(self) {
                return true;
            }
            self.run_for(10);
        }
        done(self)
    }

    fn check_one_leader_per_term(&mut self, node: NodeId) {
        let Some(meta) = self.hosts[&node].meta.as_ref() else {
            return;
        };
        if meta.is_leader() {
            let first = *self.leaders_by_term.entry(meta.term()).or_insert(node);
            assert_eq!(first, node, "two leaders in term {}", meta.term());
        }
    }

    fn handle(&mut self, node: NodeId, event: Event) {
        let now = self.now;
        match event {
            Event::Tick => {
                let meta = self.meta_mut(node);
                meta.handle_tick(now);
                let next = meta.next_tick();
                self.schedule(node, next, Event::Tick);
                if self.heartbeating.contains(&node) {
                    self.heartbeat(node);
                }
            }
            Event::Net { from, bytes } => self.meta_mut(node).handle_message(now, from, &bytes),
            Event::Disk { io, result } => self.meta_mut(node).on_disk(io, result),
            Event::Forward { command } => {
                let waiter = self.next_waiter;
                self.next_waiter += 1;
                let _ = self.meta_mut(node).propose(now, command, waiter);
            }
        }
        self.drain(node);
    }

    fn heartbeat(&mut self, node: NodeId) {
        let now = self.now;
        let meta = self.meta_mut(node);
        let Some(command) = meta.poll_heartbeat(now) else {
            return;
        };
        let waiter = self.next_waiter;
        self.next_waiter += 1;
        let meta = self.meta_mut(node);
        if let Err(ProposeError::NotLeader { leader: Some(leader) }) =
            meta.propose(now, command.clone(), waiter)
            && !self.cut.contains(&(node, leader))
        {
            let at = now.plus_millis(NET_DELAY_MS);
            self.schedule(leader, at, Event::Forward { command });
        }
    }

    /// Drains a node's outputs: executes disk ops, queues messages, records results.
    pub fn drain(&mut self, node: NodeId) {
        while let Some(output) =
            self.hosts.get_mut(&node).unwrap().meta.as_mut().unwrap().poll_output()
        {
            self.trace.push(format!("{} n{} {:?}", self.now.0, node.0, output));
            match output {
                MetaOutput::Disk { io, op } => self.disk(node, io, op),
                MetaOutput::Send { to, bytes } => self.send(node, to, bytes),
                MetaOutput::Applied { waiter, result, .. } => {
                    self.applied.entry(node).or_default().push(result.clone());
                    if let Some(waiter) = waiter {
                        assert!(self.results.insert(waiter, result).is_none(), "one answer");
                    }
                }
                MetaOutput::Barrier { ctx, ok } => {
                    assert!(self.barriers.insert(ctx, ok).is_none(), "one answer");
                }
                MetaOutput::MembershipChanged { node: member, alive } => {
                    self.liveness.push((node, member, alive));
                }
                MetaOutput::UsersReplaced { .. } => {}
            }
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, bytes: Bytes) {
        let up = self.hosts.get(&to).is_some_and(|h| h.meta.is_some());
        if !up || self.cut.contains(&(from, to)) {
            return;
        }
        let (delay, copies) = match self.chaos.as_mut() {
            None => (NET_DELAY_MS, 1),
            Some(rng) => {
                let roll = rng.random_range(0..100);
                let copies = match roll {
                    0..5 => 0,
                    5..7 => 2,
                    _ => 1,
                };
                (rng.random_range(1..=30), copies)
            }
        };
        for _ in 0..copies {
            let at = self.now.plus_millis(delay);
            self.schedule(to, at, Event::Net { from, bytes: bytes.clone() });
        }
    }

    fn disk(&mut self, node: NodeId, io: MetaIo, op: DiskOp) {
        let host = self.hosts.get_mut(&node).unwrap();
        if host.stall_log_on_snapshot
            && matches!(op, DiskOp::Write { file: FileId::MetaSnapshot, .. })
        {
            host.stalled = Some(FileId::MetaRaftLog);
        }
        if host.stalled == Some(op.file()) {
            return;
        }
        let once = match &op {
            DiskOp::Write { file, offset, .. } => host.fail_write_once == Some((*file, *offset)),
            _ => false,
        };
        if once {
            host.fail_write_once = None;
        }
        let result = if once || host.fail_file == Some(op.file()) {
            Err(DiskError::Io("injected".into()))
        } else {
            host.execute(&op);
            Ok(DiskDone::Done)
        };
        let at = self.now.plus_millis(host.disk_delay_ms);
        self.schedule(node, at, Event::Disk { io, result });
    }

    /// Proposes on `node`; returns the waiter id.
    pub fn propose(&mut self, node: u32, command: MetaCommand) -> Result<u64, ProposeError> {
        let waiter = self.next_waiter;
        self.next_waiter += 1;
        let now = self.now;
        let result = self.meta_mut(NodeId(node)).propose(now, command, waiter);
        self.drain(NodeId(node));
        result.map(|()| waiter)
    }

    /// Proposes on the current leader and runs until the result arrives.
    pub fn propose_and_wait(&mut self, command: MetaCommand) -> Result<Applied, ClientError> {
        let leader = self.leader().expect("a leader");
        let waiter = self.propose(leader, command).expect("leader accepts");
        assert!(self.run_until(10_000, |w| w.results.contains_key(&waiter)));
        self.results[&waiter].clone()
    }

    pub fn read_barrier(&mut self, node: u32) -> u64 {
        let ctx = self.next_waiter;
        self.next_waiter += 1;
        let now = self.now;
        self.meta_mut(NodeId(node)).read_barrier(now, ctx);
        self.drain(NodeId(node));
        ctx
    }

    /// The node every live replica that knows a leader agrees is leader, if it leads.
    pub fn leader(&self) -> Option<u32> {
        let leaders: Vec<u32> = self
            .hosts
            .iter()
            .filter_map(|(id, h)| h.meta.as_ref().filter(|m| m.is_leader()).map(|_| id.0))
            .collect();
        match leaders.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Isolates a node from every other (both directions).
    pub fn isolate(&mut self, node: u32) {
        for other in self.hosts.keys().copied().collect::<Vec<_>>() {
            if other.0 != node {
                self.cut.insert((NodeId(node), other));
                self.cut.insert((other, NodeId(node)));
            }
        }
    }
}

impl Host {
    fn execute(&mut self, op: &DiskOp) {
        match op {
            DiskOp::Create { file } => {
                self.files.insert(*file, Vec::new());
                self.synced.insert(*file, Vec::new());
            }
            DiskOp::Write { file, offset, data } => {
                let bytes = self.files.entry(*file).or_default();
                let end = *offset as usize + data.len();
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[*offset as usize..end].copy_from_slice(data);
            }
            DiskOp::Sync { file } => {
                let bytes = self.files.get(file).cloned().unwrap_or_default();
                self.synced.insert(*file, bytes);
            }
            DiskOp::Truncate { file, len } => {
                self.files.entry(*file).or_default().resize(*len as usize, 0);
            }
            DiskOp::Delete { file } => {
                self.files.remove(file);
                self.synced.remove(file);
            }
            DiskOp::Read { .. } | DiskOp::ReadUpTo { .. } => {
                unreachable!("the metastore never reads")
            }
        }
    }
}

pub fn heartbeat(node: u32) -> MetaCommand {
    MetaCommand::Heartbeat {
        node: NodeId(node),
        http_addr: format!("127.0.0.1:{}", 7940 + node),
        cluster_addr: format!("127.0.0.1:{}", 8940 + node),
        now_ms: 1,
    }
}

/// A create whose proposer had seen every incarnation so far (never refused as late).
pub fn create(name: &str, partitions: u32) -> MetaCommand {
    MetaCommand::CreateTopic {
        name: name.into(),
        partitions: Some(partitions),
        retention_ms: None,
        retention_bytes: None,
        now_ms: 1,
        seen_next_id: u64::MAX,
        queue: Default::default(),
    }
}
