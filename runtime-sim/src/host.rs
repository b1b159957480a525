//! `NodeHost`: the simulated process around one `Node`. It runs the same drain loop as the tokio
//! runtime (handle one input → drain `poll_event` for the checkers → drain `poll_effect` →
//! re-arm `poll_timeout`), and models the process faults: crash (the node and everything in
//! flight are gone; completions of the old incarnation are dropped by epoch), restart from disk,
//! and pause (inputs queue up and are delivered in order on resume). A host may run its node on
//! a skewed clock ([`ClockSkew`]): the node sees its own time, the event queue keeps one.
//!
//! Batching ([`NodeHost::set_batching`]): as the tokio driver takes up to 256 inputs from one
//! channel (disk completions, peer messages, client requests) before it drains, a batching host
//! hands consecutive inputs of one channel to the node back to back and drains once: when the
//! batch is full, when an input of another kind comes, or when the simulation flushes it.
//!
//! After every input the host runs `Node::check_invariants` (the deep variant every
//! `DEEP_CHECK_EVERY` inputs); the first failure is kept for the simulation to report.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use narad_core::{
    ClientReply, Config, DiskDone, DiskError, DiskOp, Effect, FileId, Input, Instant, IoToken,
    Node, NodeEvent, RecoveryError, RequestId,
};

/// What a host asks of the simulation around it.
pub trait HostRuntime {
    /// Execute a disk operation; complete it later with `NodeHost::disk_done(.., epoch, ..)`.
    fn disk_op(&mut self, node: u32, epoch: u32, token: IoToken, op: DiskOp);
    /// Deliver a reply to the client that sent `request`.
    fn reply(&mut self, node: u32, request: RequestId, reply: ClientReply);
    /// A node event for the checkers.
    fn event(&mut self, node: u32, event: NodeEvent);
    /// Call `NodeHost::fire_timer(.., generation, ..)` at `at`.
    fn arm_timer(&mut self, node: u32, at: Instant, generation: u64);
    /// Deliver bytes to node `to` (a simulated network may delay, drop or duplicate them).
    fn send(&mut self, node: u32, to: narad_core::NodeId, bytes: Bytes);
    /// The node just started serving (its start-up syncs are done): what it serves from now on.
    fn ready(
        &mut self,
        node: u32,
        numbers: &[(narad_core::PartitionKey, narad_core::api::PartitionNumbers)],
        clock_ms: u64,
    );
}

/// A node's clock relative to simulated time: `node = t + offset + (t - base) * drift`, with the
/// drift in parts per million. Monotonic as long as the drift is above -1,000,000 ppm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockSkew {
    /// Simulated instant from which the drift accumulates.
    pub base: Instant,
    /// Constant offset in microseconds (may be negative).
    pub offset_us: i64,
    /// Rate error in parts per million (may be negative).
    pub drift_ppm: i64,
}

impl ClockSkew {
    /// The node's reading of simulated time `t`.
    pub fn node_time(&self, t: Instant) -> Instant {
        if *self == ClockSkew::default() {
            return t;
        }
        let elapsed = i128::from(t.0) - i128::from(self.base.0);
        let drift = elapsed * i128::from(self.drift_ppm) / 1_000_000;
        let at = i128::from(t.0) + i128::from(self.offset_us) + drift;
        Instant(u64::try_from(at.max(0)).expect("invariant: skewed clocks stay within u64"))
    }

    /// The first simulated instant at which the node's clock reads `at` or later.
    pub fn sim_time(&self, at: Instant) -> Instant {
        if *self == ClockSkew::default() {
            return at;
        }
        let rate = 1_000_000 + i128::from(self.drift_ppm);
        let since = i128::from(at.0) - i128::from(self.offset_us) - i128::from(self.base.0);
        let guess = i128::from(self.base.0) + since * 1_000_000 / rate;
        let mut t = Instant(u64::try_from(guess.max(0)).expect("invariant: within u64"));
        while self.node_time(t) < at {
            t = Instant(t.0 + 1);
        }
        while t.0 > 0 && self.node_time(Instant(t.0 - 1)) >= at {
            t = Instant(t.0 - 1);
        }
        t
    }
}

/// One simulated process running a node.
pub struct NodeHost {
    index: u32,
    config: Config,
    node: Option<Node>,
    epoch: u32,
    paused: bool,
    deferred: VecDeque<Option<Input>>,
    timer: Option<Instant>,
    timer_generation: u64,
    /// The running node has reported ready since it started.
    ready: bool,
    skew: ClockSkew,
    /// Most inputs handed to the node before a drain (1: drain after every input).
    batch_max: usize,
    /// The batch being fed, not drained yet.
    batch: Option<OpenBatch>,
    /// Inputs checked so far (every `DEEP_CHECK_EVERY`th gets the deep check).
    checks: u64,
    /// The first failure of `Node::check_invariants`.
    invariant_failure: Option<String>,
}

/// Which driver channel an input arrives on: the runtime batches inputs of one channel only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Channel {
    Disk,
    Peer,
    Client,
}

/// Inputs handed to the node since the last drain.
#[derive(Clone, Copy, Debug)]
struct OpenBatch {
    channel: Channel,
    inputs: usize,
    /// Simulated time of the first input.
    since: Instant,
}

/// Inputs between two deep invariant checks (the deep check walks every partition log and the
/// dispatcher's window).
const DEEP_CHECK_EVERY: u64 = 16;

impl NodeHost {
    /// A host for node `index` that is not running yet.
    pub fn new(index: u32, config: Config) -> NodeHost {
        NodeHost {
            index,
            config,
            node: None,
            epoch: 0,
            paused: false,
            deferred: VecDeque::new(),
            timer: None,
            timer_generation: 0,
            ready: false,
            skew: ClockSkew::default(),
            batch_max: 1,
            batch: None,
            checks: 0,
            invariant_failure: None,
        }
    }

    /// Hands up to `max` consecutive inputs of one channel to the node before draining (the
    /// tokio driver takes up to 256); 1 drains after every input.
    pub fn set_batching(&mut self, max: usize) {
        self.batch_max = max.max(1);
    }

    /// When the open batch's first input was handed over, if inputs wait for a drain.
    pub fn batch_since(&self) -> Option<Instant> {
        self.batch.map(|batch| batch.since)
    }

    /// Drains the open batch (the driver's wakeup ends), unless the process is paused.
    pub fn flush(&mut self, rt: &mut impl HostRuntime) {
        if self.batch.is_some() && self.node.is_some() && !self.paused {
            self.drain(rt);
        }
    }

    /// The first invariant failure of the node since the last call, if any.
    pub fn take_invariant_failure(&mut self) -> Option<String> {
        self.invariant_failure.take()
    }

    /// Runs the node on a skewed clock from now on (set it before `start`).
    pub fn set_skew(&mut self, skew: ClockSkew) {
        self.skew = skew;
    }

    /// The node's clock skew.
    pub fn skew(&self) -> ClockSkew {
        self.skew
    }

    /// The running node, if the process is up.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// True while the process runs (paused or not).
    pub fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// True while the process is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Incarnation counter: bumped at every crash.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Starts the process from the bytes on disk (`Node::recover`) and drains its first effects.
    pub fn start(
        &mut self,
        now: Instant,
        files: BTreeMap<FileId, Bytes>,
        rt: &mut impl HostRuntime,
    ) -> Result<(), RecoveryError> {
        assert!(self.node.is_none(), "invariant: start only a stopped process");
        let now = self.skew.node_time(now);
        let _span = tracing::info_span!("node", id = self.index).entered();
        let config = self.config.clone();
        self.node = Some(Node::recover_in_chunks(config, now, files, SCAN_CHUNK_BYTES)?);
        self.paused = false;
        self.ready = false;
        self.check_node();
        self.drain(rt);
        Ok(())
    }

    /// Kills the process: the node, its timers and everything in flight are gone.
    pub fn crash(&mut self) {
        self.node = None;
        self.epoch += 1;
        self.paused = false;
        self.deferred.clear();
        self.batch = None;
        self.timer = None;
        self.timer_generation += 1;
    }

    /// Stops running the node until `resume`.
    pub fn pause(&mut self) {
        if self.node.is_some() {
            self.paused = true;
        }
    }

    /// Resumes a paused node and delivers what queued meanwhile, in order.
    pub fn resume(&mut self, now: Instant, rt: &mut impl HostRuntime) {
        if !self.paused {
            return;
        }
        self.paused = false;
        while let Some(input) = self.deferred.pop_front() {
            if self.node.is_none() {
                break;
            }
            self.step(now, input, rt);
        }
    }

    /// Feeds a client request or control input. Dropped if the process is down.
    pub fn deliver(&mut self, now: Instant, input: Input, rt: &mut impl HostRuntime) {
        self.feed(now, Some(input), rt);
    }

    /// A disk completion of incarnation `epoch` (dropped if the process died since).
    pub fn disk_done(
        &mut self,
        now: Instant,
        epoch: u32,
        token: IoToken,
        result: Result<DiskDone, DiskError>,
        rt: &mut impl HostRuntime,
    ) {
        if epoch == self.epoch {
            self.feed(now, Some(Input::Disk { token, result }), rt);
        }
    }

    /// The timer armed with `generation` fired (ignored if it was re-armed since).
    pub fn fire_timer(&mut self, now: Instant, generation: u64, rt: &mut impl HostRuntime) {
        if generation == self.timer_generation && self.timer.is_some() {
            self.timer = None;
            self.feed(now, None, rt);
        }
    }

    fn feed(&mut self, now: Instant, input: Option<Input>, rt: &mut impl HostRuntime) {
        if self.node.is_none() {
            return;
        }
        if self.paused {
            self.deferred.push_back(input);
            return;
        }
        self.step(now, input, rt);
    }

    fn step(&mut self, now: Instant, input: Option<Input>, rt: &mut impl HostRuntime) {
        let channel = input.as_ref().and_then(channel_of).filter(|_| self.batch_max > 1);
        let joins = self.batch.is_some_and(|b| Some(b.channel) == channel);
        if self.batch.is_some() && !joins {
            self.drain(rt); // a wakeup takes one channel; timers and control inputs come alone
        }
        let node = self.node.as_mut().expect("invariant: step only a running node");
        let node_now = self.skew.node_time(now);
        let span = tracing::info_span!("node", id = self.index).entered();
        match input {
            Some(input) => node.handle_input(node_now, input),
            None => node.handle_timeout(node_now),
        }
        drop(span);
        self.check_node();
        let Some(channel) = channel else {
            return self.drain(rt);
        };
        let batch = self.batch.get_or_insert(OpenBatch { channel, inputs: 0, since: now });
        batch.inputs += 1;
        if batch.inputs >= self.batch_max {
            self.drain(rt);
        }
    }

    /// Runs the node's invariant checks; keeps the first failure.
    fn check_node(&mut self) {
        let node = self.node.as_ref().expect("invariant: check only a running node");
        self.checks += 1;
        let checked = if self.checks.is_multiple_of(DEEP_CHECK_EVERY) {
            node.check_invariants_deep()
        } else {
            node.check_invariants()
        };
        if let Err(failure) = checked {
            self.invariant_failure.get_or_insert(failure);
        }
    }

    /// Events are drained before effects: a checker then learns of a commit (watermark) or a
    /// latch before it sees replies produced by the same input.
    fn drain(&mut self, rt: &mut impl HostRuntime) {
        self.batch = None;
        let node = self.node.as_mut().expect("invariant: drain only a running node");
        while let Some(event) = node.poll_event() {
            rt.event(self.index, event);
        }
        while let Some(effect) = node.poll_effect() {
            match effect {
                Effect::Disk { token, op } => rt.disk_op(self.index, self.epoch, token, op),
                Effect::Reply { request, reply } => rt.reply(self.index, request, reply),
                Effect::Send { to, bytes } => rt.send(self.index, to, bytes),
            }
        }
        if !self.ready && node.is_serving() {
            self.ready = true;
            rt.ready(self.index, &node.partition_numbers(), node.clock().as_millis());
        }
        let next = node.poll_timeout();
        if next != self.timer {
            self.timer = next;
            self.timer_generation += 1;
            if let Some(at) = next {
                rt.arm_timer(self.index, self.skew.sim_time(at), self.timer_generation);
            }
        }
    }
}

/// The driver channel an input arrives on; `None` for inputs the driver handles alone.
fn channel_of(input: &Input) -> Option<Channel> {
    match input {
        Input::Disk { .. } => Some(Channel::Disk),
        Input::Peer { .. } | Input::PeerUnreachable { .. } => Some(Channel::Peer),
        Input::Client { .. } => Some(Channel::Client),
        Input::BeginShutdown => None,
    }
}

/// Bytes fed to a `PartitionScan` at a time: small and odd, so that frames straddle chunks the
/// way they do in the production runtime (which reads 8 MiB chunks of far larger logs).
const SCAN_CHUNK_BYTES: usize = 997;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skewed_clocks_round_trip_to_the_first_instant_that_reads_the_deadline() {
        let base = Instant(1_000_000_000);
        for (offset_us, drift_ppm) in [(0, 0), (5_000_000, 0), (-3_000_000, 20_000), (7, -15_000)] {
            let skew = ClockSkew { base, offset_us, drift_ppm };
            for t in [base.0, base.0 + 1, base.0 + 123_456_789] {
                let node = skew.node_time(Instant(t));
                let back = skew.sim_time(node);
                assert!(back.0 <= t && skew.node_time(back) >= node, "{skew:?} t={t}");
                assert!(skew.node_time(Instant(back.0 - 1)) < node);
                assert!(skew.node_time(Instant(t + 1)) >= node, "monotonic");
            }
        }
    }
}
