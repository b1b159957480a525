//! A minimal in-memory runtime for whole-node tests: executes disk effects against a map of file
//! contents, completes them in emission order (which satisfies the per-file FIFO contract), and
//! collects replies. Faults are injected by predicates on the operation.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::access::Principal;
use crate::api::{ClientOp, ClientReply, ConsumedRecord};
use crate::ids::{Instant, RequestId};
use crate::io::{DiskError, DiskOp, Effect, FileId, Input};
use crate::node::{Config, Node};

use super::cluster_harness::execute;

type FaultFn = Box<dyn FnMut(&DiskOp) -> Option<DiskError>>;

pub struct Harness {
    pub node: Node,
    pub files: BTreeMap<FileId, Vec<u8>>,
    pub now: Instant,
    pending: VecDeque<Input>,
    pub replies: BTreeMap<RequestId, ClientReply>,
    next_request: u64,
    pub fault: Option<FaultFn>,
    config: Config,
    /// Every disk operation executed, in order, and the step (input or timeout fed, counted
    /// from 1; 0: start-up) that emitted it.
    pub ops: Vec<DiskOp>,
    pub op_steps: Vec<u64>,
    steps: u64,
}

impl Harness {
    /// A fresh node, run until it is ready (its metastore elected itself).
    pub fn new() -> Harness {
        let mut harness = Harness::from_files(BTreeMap::new());
        harness.run();
        assert!(harness.node.is_ready(), "a fresh single node becomes ready");
        harness
    }

    /// A harness whose disk fails the operations `fault` picks, from the very first one.
    pub fn from_files_with_fault(files: BTreeMap<FileId, Vec<u8>>, fault: FaultFn) -> Harness {
        Harness::build(files, Some(fault), Harness::config())
    }

    pub fn from_files(files: BTreeMap<FileId, Vec<u8>>) -> Harness {
        Harness::build(files, None, Harness::config())
    }

    /// A node started from `files` with `config` (kept across restarts).
    pub fn with_config(files: BTreeMap<FileId, Vec<u8>>, config: Config) -> Harness {
        Harness::build(files, None, config)
    }

    /// The default configuration of a harness node.
    pub fn config() -> Config {
        Config::single(crate::ids::NodeId(1), 42)
    }

    fn build(files: BTreeMap<FileId, Vec<u8>>, fault: Option<FaultFn>, config: Config) -> Harness {
        let now = Instant(1_700_000_000_000_000);
        let snapshot = files.iter().map(|(f, b)| (*f, Bytes::from(b.clone()))).collect();
        let node = Node::recover(config.clone(), now, snapshot).expect("recovery");
        let mut harness = Harness {
            node,
            files,
            now,
            pending: VecDeque::new(),
            replies: BTreeMap::new(),
            next_request: 1,
            fault,
            config,
            ops: Vec::new(),
            op_steps: Vec::new(),
            steps: 0,
        };
        harness.drain_effects();
        harness
    }

    /// Restarts the node from the current files (everything written counts as durable here).
    pub fn restart(self) -> Harness {
        Harness::build(self.files, None, self.config)
    }

    /// Sends a request and runs until idle; returns its reply.
    pub fn call(&mut self, op: ClientOp) -> ClientReply {
        let request = self.submit(op);
        self.run();
        self.replies.remove(&request).expect("every request is answered once idle")
    }

    /// The first 100 records of `topic`'s partition 0.
    pub fn read_partition_zero(&mut self, topic: &str) -> Vec<ConsumedRecord> {
        let op = ClientOp::Consume {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            max: 100,
            wait_ms: 0,
        };
        match self.call(op) {
            ClientReply::Records(records) => records,
            other => panic!("{other:?}"),
        }
    }

    pub fn submit(&mut self, op: ClientOp) -> RequestId {
        self.submit_as(op, Principal::Trusted)
    }

    pub fn submit_as(&mut self, op: ClientOp, who: Principal) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        self.feed(Input::Client { request, op, who });
        request
    }

    /// Feeds one input and collects its effects (without running them).
    pub fn deliver(&mut self, input: Input) {
        self.feed(input);
    }

    fn feed(&mut self, input: Input) {
        self.steps += 1;
        self.node.handle_input(self.now, input);
        self.drain_effects();
    }

    /// Fires the node's timer at `at` (moving the clock there) and collects its effects.
    pub fn fire_timeout(&mut self, at: Instant) {
        self.now = self.now.max(at);
        self.steps += 1;
        self.node.handle_timeout(self.now);
        self.drain_effects();
    }

    /// Completes disk operations without firing any timer (e.g. before a delayed checkpoint).
    pub fn run_io_only(&mut self) {
        while let Some(input) = self.pending.pop_front() {
            self.feed(input);
        }
    }

    /// How long a lone producer's records may wait on an idle node before their commit starts:
    /// the dispatch linger (`LINGER_FLOOR_MS`, as the harness's disk answers at once) and then the
    /// flush pairing hold (`node/flush_pairing.rs`).
    pub const LONE_COMMIT_WAIT_US: u64 =
        crate::constants::LINGER_FLOOR_MS * 1_000 + crate::constants::FLUSH_PAIRING_US;

    /// Completes disk operations and fires timers for 3 simulated seconds (the metastore ticks
    /// forever, so there is no "idle"; 3 s covers every backoff and checkpoint delay).
    pub fn run(&mut self) {
        self.run_for_micros(3_000_000);
    }

    /// Completes disk operations and fires the timers due in the next `micros`.
    pub fn run_for_micros(&mut self, micros: u64) {
        let horizon = self.now.plus_micros(micros);
        for _ in 0..1_000_000 {
            if let Some(input) = self.pending.pop_front() {
                self.feed(input);
                continue;
            }
            match self.node.poll_timeout() {
                Some(at) if at < horizon => self.fire_timeout(at),
                _ => return,
            }
        }
        panic!("harness did not settle");
    }

    fn drain_effects(&mut self) {
        while let Some(effect) = self.node.poll_effect() {
            match effect {
                Effect::Send { to, .. } => panic!("a single node sent a message to node {to:?}"),
                Effect::Reply { request, reply } => {
                    assert!(self.replies.insert(request, reply).is_none(), "answered twice");
                }
                Effect::Disk { token, op } => {
                    self.ops.push(op.clone());
                    self.op_steps.push(self.steps);
                    let injected = self.fault.as_mut().and_then(|fault| fault(&op));
                    let result = match injected {
                        Some(error) => Err(error),
                        None => Ok(execute(&mut self.files, op)),
                    };
                    self.pending.push_back(Input::Disk { token, result });
                }
            }
        }
    }

    /// Total bytes of WAL segments.
    pub fn wal_bytes(&self) -> usize {
        self.files
            .iter()
            .filter(|(f, _)| matches!(f, FileId::WalSegment { .. }))
            .map(|(_, b)| b.len())
            .sum()
    }
}
