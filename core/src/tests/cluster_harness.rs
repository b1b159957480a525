//! A minimal in-memory runtime for several nodes: each has its own files (everything written
//! counts as durable), disk operations complete in emission order, peer messages are delivered
//! in order unless the link is cut, and virtual time advances to the earliest timer when nothing
//! else is pending. Nodes can be killed and restarted from their files.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::access::Principal;
use crate::api::{ClientOp, ClientReply};
use crate::ids::{Instant, NodeId, RequestId};
use crate::io::{DiskDone, DiskOp, Effect, FileId, Input};
use crate::node::{Config, Node};

/// Index of a node in the cluster (node id - 1).
pub type Ix = usize;

pub struct Cluster {
    pub nodes: Vec<Option<Node>>,
    pub files: Vec<BTreeMap<FileId, Vec<u8>>>,
    pub now: Instant,
    pending: VecDeque<(Ix, Input)>,
    pub replies: BTreeMap<RequestId, ClientReply>,
    /// One-way cuts: messages from `.0` to `.1` are dropped.
    pub cut: BTreeSet<(Ix, Ix)>,
    /// One-way clogs: messages from `.0` to `.1` are held (no error to the sender) until
    /// `release`, like a stalled stream that resumes.
    pub clogged: BTreeSet<(Ix, Ix)>,
    held: Vec<(Ix, Input)>,
    /// Every peer message sent, as (from, to, bytes), in order.
    pub sent: Vec<(Ix, Ix, Bytes)>,
    next_request: u64,
    size: usize,
}

fn config(ix: Ix, size: usize) -> Config {
    let voters = (1..=size as u32).map(NodeId).collect();
    let mut config = Config::cluster(NodeId(ix as u32 + 1), 7 + ix as u64, voters);
    config.http_addr = format!("127.0.0.1:{}", 7942 + ix);
    config.cluster_addr = format!("127.0.0.1:{}", 8942 + ix);
    config
}

impl Cluster {
    /// `size` fresh nodes, run until every one is ready.
    pub fn new(size: usize) -> Cluster {
        let mut cluster = Cluster {
            nodes: (0..size).map(|_| None).collect(),
            files: vec![BTreeMap::new(); size],
            now: Instant(1_700_000_000_000_000),
            pending: VecDeque::new(),
            replies: BTreeMap::new(),
            cut: BTreeSet::new(),
            clogged: BTreeSet::new(),
            held: Vec::new(),
            sent: Vec::new(),
            next_request: 1,
            size,
        };
        for ix in 0..size {
            cluster.start(ix);
        }
        cluster.run_until(30_000, |c| c.all_ready());
        assert!(cluster.all_ready(), "a fresh cluster becomes ready");
        cluster
    }

    pub fn all_ready(&self) -> bool {
        self.nodes.iter().flatten().all(Node::is_ready)
    }

    pub fn node(&self, ix: Ix) -> &Node {
        self.nodes[ix].as_ref().expect("node is up")
    }

    /// The node that leads the metastore now.
    pub fn leader(&self) -> Ix {
        let leads = |ix: &Ix| self.nodes[*ix].as_ref().is_some_and(|n| n.stats().meta_leader == 1);
        (0..self.nodes.len()).find(leads).expect("a leader")
    }

    /// Starts (or restarts) node `ix` from its files.
    pub fn start(&mut self, ix: Ix) {
        let snapshot = self.files[ix].iter().map(|(f, b)| (*f, Bytes::from(b.clone()))).collect();
        let node = Node::recover(config(ix, self.size), self.now, snapshot).expect("recovery");
        self.nodes[ix] = Some(node);
        self.drain(ix);
    }

    /// Kills node `ix`: everything in flight to or from it is gone.
    pub fn kill(&mut self, ix: Ix) {
        self.nodes[ix] = None;
        self.pending.retain(|(to, _)| *to != ix);
    }

    /// Cuts both directions between `a` and `b`.
    pub fn partition(&mut self, a: Ix, b: Ix) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Unclogs every link and delivers what it held, in the order it was sent.
    pub fn release(&mut self) {
        self.clogged.clear();
        self.pending.extend(self.held.drain(..));
    }

    /// Sends a client request to node `ix` (not run yet).
    pub fn submit(&mut self, ix: Ix, op: ClientOp) -> RequestId {
        self.submit_as(ix, op, Principal::Trusted)
    }

    /// Sends a client request from `who` to node `ix` (not run yet).
    pub fn submit_as(&mut self, ix: Ix, op: ClientOp, who: Principal) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        self.feed(ix, Input::Client { request, op, who });
        request
    }

    /// Sends a request and runs until it is answered (at most `max_ms` of virtual time).
    pub fn call(&mut self, ix: Ix, op: ClientOp, max_ms: u64) -> Option<ClientReply> {
        let request = self.submit(ix, op);
        self.run_until(max_ms, |c| c.replies.contains_key(&request));
        self.replies.remove(&request)
    }

    /// Sends a request from `who` and runs until it is answered (at most `max_ms`).
    pub fn call_as(
        &mut self,
        ix: Ix,
        op: ClientOp,
        who: &Principal,
        max_ms: u64,
    ) -> Option<ClientReply> {
        let request = self.submit_as(ix, op, who.clone());
        self.run_until(max_ms, |c| c.replies.contains_key(&request));
        self.replies.remove(&request)
    }

    /// Runs until `done` holds or `max_ms` of virtual time passed.
    pub fn run_until(&mut self, max_ms: u64, done: impl Fn(&Cluster) -> bool) {
        let horizon = self.now.plus_millis(max_ms);
        for _ in 0..50_000_000 {
            if done(self) {
                return;
            }
            if let Some((ix, input)) = self.pending.pop_front() {
                self.feed(ix, input);
                continue;
            }
            let next = self.nodes.iter().flatten().filter_map(Node::poll_timeout).min();
            match next {
                Some(at) if at <= horizon => {
                    self.now = self.now.max(at);
                    for ix in 0..self.size {
                        let due = self.nodes[ix].as_ref().and_then(Node::poll_timeout);
                        if due.is_some_and(|due| due <= self.now) {
                            let now = self.now;
                            self.nodes[ix].as_mut().expect("checked").handle_timeout(now);
                            self.drain(ix);
                        }
                    }
                }
                _ => {
                    self.now = horizon;
                    return;
                }
            }
        }
        panic!("cluster did not settle");
    }

    /// Runs for `ms` of virtual time.
    pub fn run_for(&mut self, ms: u64) {
        self.run_until(ms, |_| false);
    }

    /// Queues `bytes` for node `to` as if node `from` had sent them (a forged or faulty peer).
    pub fn deliver(&mut self, from: Ix, to: Ix, bytes: Bytes) {
        let from = NodeId(from as u32 + 1);
        self.pending.push_back((to, Input::Peer { from, bytes }));
    }

    fn feed(&mut self, ix: Ix, input: Input) {
        let Some(node) = self.nodes[ix].as_mut() else {
            return;
        };
        node.handle_input(self.now, input);
        self.drain(ix);
    }

    fn drain(&mut self, ix: Ix) {
        while let Some(effect) = self.nodes[ix].as_mut().and_then(Node::poll_effect) {
            match effect {
                Effect::Reply { request, reply } => {
                    assert!(self.replies.insert(request, reply).is_none(), "answered twice");
                }
                Effect::Disk { token, op } => {
                    let result = Ok(execute(&mut self.files[ix], op));
                    self.pending.push_back((ix, Input::Disk { token, result }));
                }
                Effect::Send { to, bytes } => {
                    let peer = to.0 as usize - 1;
                    let from = NodeId(ix as u32 + 1);
                    self.sent.push((ix, peer, bytes.clone()));
                    if self.clogged.contains(&(ix, peer)) {
                        self.held.push((peer, Input::Peer { from, bytes }));
                    } else if !self.cut.contains(&(ix, peer)) && self.nodes[peer].is_some() {
                        self.pending.push_back((peer, Input::Peer { from, bytes }));
                    } else {
                        // Like the real transport: no connection, so the sender hears of it.
                        self.pending.push_back((ix, Input::PeerUnreachable { to }));
                    }
                }
            }
        }
        while self.nodes[ix].as_mut().and_then(Node::poll_event).is_some() {}
    }
}

/// A create of topic `name` with `partitions` and every other setting at its default.
pub fn create_op(name: &str, partitions: u32) -> ClientOp {
    ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(partitions),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    }
}

/// Executes a disk operation on in-memory files (every write counts as durable).
pub fn execute(files: &mut BTreeMap<FileId, Vec<u8>>, op: DiskOp) -> DiskDone {
    match op {
        DiskOp::Create { file } => {
            files.insert(file, Vec::new());
            DiskDone::Done
        }
        DiskOp::Write { file, offset, data } => {
            let content = files.entry(file).or_default();
            let end = offset as usize + data.len();
            if content.len() < end {
                content.resize(end, 0);
            }
            content[offset as usize..end].copy_from_slice(&data);
            DiskDone::Done
        }
        DiskOp::Sync { .. } => DiskDone::Done,
        DiskOp::Read { file, offset, len } => {
            let content = &files[&file];
            DiskDone::Data(Bytes::copy_from_slice(
                &content[offset as usize..(offset + len) as usize],
            ))
        }
        DiskOp::ReadUpTo { file, offset, len } => {
            let content = &files[&file];
            let end = ((offset + len) as usize).min(content.len());
            DiskDone::Data(Bytes::copy_from_slice(&content[(offset as usize).min(end)..end]))
        }
        DiskOp::Truncate { file, len } => {
            files.entry(file).or_default().truncate(len as usize);
            DiskDone::Done
        }
        DiskOp::Delete { file } => {
            files.remove(&file);
            DiskDone::Done
        }
    }
}
