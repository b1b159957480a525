//! `Harness`: one node, its fuzzed disk, a clock and the oracle, and the drain loop around them
//! (feed one input, drain events and effects, restart the process if the node reports a fatal
//! error). Crashes rebuild the node from the disk's bytes with `Node::recover_in_chunks`, like
//! the simulator's host; recovery refusing a disk that saw only I/O errors and crashes is a
//! violation.

use narad_core::{
    ClientOp, ClientReply, Config, Effect, Input, Instant, Node, NodeEvent, RequestId,
};

use super::disk::FuzzDisk;
use super::input::{CrashKind, FuzzInput, Setup};
use super::oracle::Oracle;
use super::values::{NODE, Values};
use super::{ACTIVE_STEPS, MAX_TIMER_FIRES};

/// Simulated start time (the simulator's).
pub const START: Instant = crate::clock::START;
/// Partition index interval of `small_index` runs (the simulator's).
const SMALL_INDEX_BYTES: u64 = 512;
/// Metastore entries between snapshots in `small_index` runs (production: 1,024).
const SMALL_SNAPSHOT_ENTRIES: u64 = 8;

/// See the module docs.
pub struct Harness {
    config: Config,
    node: Option<Node>,
    pub disk: FuzzDisk,
    pub now: Instant,
    pub oracle: Oracle,
    pub values: Values,
    scan_chunk: usize,
    next_request: u64,
    /// The running node reported `WalLatched`.
    pub latched: bool,
    /// `BeginShutdown` was delivered to the running node.
    pub shutting_down: bool,
    /// Timer firings and disk completions so far.
    pub steps: u64,
    /// Work bound: no completion or timer runs once `steps` reaches it.
    pub step_limit: u64,
    /// Times the node was (re)started.
    pub starts: u32,
    /// Messages the node sent to the fake peer.
    pub sent_to_peer: u64,
}

impl Harness {
    /// A node recovered from an empty disk, brought to the state `input.setup` asks for.
    pub fn new(input: &FuzzInput) -> Harness {
        let mut config = Config::single(NODE, 0x5eed);
        if input.small_index {
            config.partition_index_interval_bytes = SMALL_INDEX_BYTES;
            // Heartbeats alone append one entry a second: runs snapshot and reset the Raft log.
            config.meta_snapshot_every_entries = SMALL_SNAPSHOT_ENTRIES;
        }
        config.dispatch_linger = input.dispatch_linger();
        if input.produce_quota {
            config.produce_quota_bytes_per_sec = 2_048;
        }
        if input.small_lanes {
            config.wal_small_request_bytes = 128;
            config.wal_group_bulk_bytes = if input.grouped_chunks { 2_048 } else { 1 };
        }
        // 64 B steps: frames still straddle chunks, and megabyte logs are not fed a byte at a time.
        let scan_chunk = input.scan_chunk_bytes();
        let mut harness = Harness {
            config,
            node: None,
            disk: FuzzDisk::default(),
            now: START,
            oracle: Oracle::default(),
            values: Values::default(),
            scan_chunk,
            next_request: 1,
            latched: false,
            shutting_down: false,
            steps: 0,
            step_limit: ACTIVE_STEPS,
            starts: 0,
            sent_to_peer: 0,
        };
        harness.start();
        harness.setup(input.setup);
        harness
    }

    fn setup(&mut self, setup: Setup) {
        if setup == Setup::Fresh {
            return;
        }
        let ready = self.run_until(30_000_000, Harness::ready);
        assert!(ready, "harness: a fresh single node did not become ready in 30 s");
        if setup == Setup::ReadyWithTopics {
            for (name, partitions) in [("t0", 1), ("t1", 3)] {
                let op = ClientOp::CreateTopic {
                    name: name.into(),
                    partitions: Some(partitions),
                    retention_ms: None,
                    retention_bytes: None,
                    queue: Default::default(),
                };
                let reply = self.ask(op, 5_000_000);
                assert!(
                    matches!(reply, Some(ClientReply::TopicCreated(_))),
                    "harness: creating {name} on a ready node answered {reply:?}"
                );
            }
        }
    }

    /// The running node (the process is always up between operations).
    pub fn node(&self) -> &Node {
        self.node.as_ref().expect("invariant: the node runs between operations")
    }

    /// Ready (leader, caught up, a live member) with its start-up syncs done.
    pub fn ready(&self) -> bool {
        self.node.as_ref().is_some_and(Node::is_ready)
    }

    /// Rebuilds the node from the disk's current bytes.
    pub fn start(&mut self) {
        assert!(self.node.is_none(), "invariant: start only a stopped process");
        let files = self.disk.snapshot();
        let config = self.config.clone();
        match Node::recover_in_chunks(config, self.now, files, self.scan_chunk) {
            Ok(node) => self.node = Some(node),
            Err(error) => panic!(
                "INVARIANT recovery-accepts-sound-disk: recovery refused a disk that saw only \
                 I/O errors and crashes (no corruption): {error}"
            ),
        }
        self.starts += 1;
        self.latched = false;
        self.shutting_down = false;
        self.drain();
    }

    /// The process dies (`land` picks in-flight heads that reached the disk) and restarts.
    pub fn crash_and_restart(&mut self, kind: CrashKind, land: &[u8]) {
        self.node = None;
        self.oracle.crashed();
        self.disk.crash(kind, land);
        self.start();
    }

    /// Feeds one input, then drains.
    pub fn input(&mut self, input: Input) {
        let node = self.node.as_mut().expect("invariant: the node runs");
        node.handle_input(self.now, input);
        self.drain();
    }

    /// Sends a client request; returns its id. Every produce is preceded by a probe.
    pub fn client(&mut self, op: ClientOp) -> RequestId {
        let probe = match &op {
            ClientOp::Produce { topic, .. } => {
                let probe = self.next_id();
                self.oracle.sent_probe(probe, topic);
                self.input(Input::Client {
                    request: probe,
                    // The few names the fuzzer uses fit one page.
                    op: ClientOp::list_topics(),
                    who: narad_core::access::Principal::Trusted,
                });
                Some(probe)
            }
            _ => None,
        };
        let request = self.next_id();
        self.oracle.sent(request, &op, probe);
        self.input(Input::Client { request, op, who: narad_core::access::Principal::Trusted });
        request
    }

    /// Sends a request the harness reads the answer of, and runs until it comes (or
    /// `within_micros` pass): `None` if it did not.
    pub fn ask(&mut self, op: ClientOp, within_micros: u64) -> Option<ClientReply> {
        let request = self.next_id();
        self.oracle.sent_harness(request);
        self.input(Input::Client { request, op, who: narad_core::access::Principal::Trusted });
        let mut answer = self.oracle.take_answer(request);
        let deadline = Instant(self.now.0 + within_micros);
        while answer.is_none() && self.node.is_some() && self.now < deadline {
            self.complete_all();
            answer = self.oracle.take_answer(request);
            if answer.is_none() && !self.fire_next_timer(deadline) {
                break;
            }
        }
        answer.or_else(|| self.oracle.take_answer(request))
    }

    fn next_id(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    /// Drains events and effects; a node that reports a fatal error is stopped and restarted
    /// (as the production runtime exits and is restarted), keeping the page cache.
    fn drain(&mut self) {
        loop {
            let node = self.node.as_mut().expect("invariant: drain a running node");
            while let Some(event) = node.poll_event() {
                if event == NodeEvent::WalLatched {
                    self.latched = true;
                }
            }
            while let Some(effect) = node.poll_effect() {
                match effect {
                    Effect::Disk { token, op } => self.disk.submit(token, op),
                    Effect::Reply { request, reply } => self.oracle.reply(request, reply),
                    Effect::Send { .. } => self.sent_to_peer += 1,
                }
            }
            if node.fatal_error().is_none() {
                return;
            }
            self.crash_and_restart(CrashKind::Process, &[]);
        }
    }

    /// Completes the head of one file's queue (with an injected failure if `fault`).
    pub fn complete(&mut self, pending: super::disk::Pending, fault: Option<super::input::Fault>) {
        self.steps += 1;
        let result = self.disk.execute(&pending.op, fault);
        self.input(Input::Disk { token: pending.token, result });
    }

    /// Completes everything in flight, oldest first, including what completions cause.
    pub fn complete_all(&mut self) {
        while self.steps < self.step_limit {
            let Some(pending) = self.disk.pop_oldest() else {
                return;
            };
            self.complete(pending, None);
        }
    }

    /// Moves the clock to the node's next deadline if it is at or before `limit` and fires it;
    /// false (clock unmoved) if there is none by then.
    pub fn fire_next_timer(&mut self, limit: Instant) -> bool {
        let Some(at) = self.node.as_ref().and_then(Node::poll_timeout) else {
            return false;
        };
        if at > limit || self.steps >= self.step_limit {
            return false;
        }
        self.steps += 1;
        self.now = self.now.max(at);
        self.node.as_mut().expect("checked above").handle_timeout(self.now);
        self.drain();
        true
    }

    /// Lets `micros` pass: every deadline that falls due fires, in order (I/O stays queued).
    pub fn advance(&mut self, micros: u64) {
        let until = Instant(self.now.0 + micros);
        let mut fired = 0;
        while fired < MAX_TIMER_FIRES && self.fire_next_timer(until) {
            fired += 1;
        }
        self.now = self.now.max(until);
    }

    /// Runs the node (all I/O completes, timers fire) until `done` or `micros` pass.
    pub fn run_until(&mut self, micros: u64, done: impl Fn(&Harness) -> bool) -> bool {
        let deadline = Instant(self.now.0 + micros);
        loop {
            self.complete_all();
            if done(self) {
                return true;
            }
            if !self.fire_next_timer(deadline) {
                self.now = self.now.max(deadline);
                return done(self);
            }
        }
    }
}
