//! The driver: the one task that owns the `Node` (no mutex). It turns client requests, disk
//! completions, the shutdown signal and the node's own deadline into inputs, and after every input
//! drains the node's effects (disk operations to the disk threads, replies to the waiting HTTP
//! handlers), drains its events into the log and re-arms the timer (the drain rule,
//! docs/contributing.md).

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use narad_core::access::Principal;
use narad_core::{
    ClientOp, ClientReply, DiskOp, Effect, FileId, Input, Instant, IoToken, Node, NodeEvent,
    RequestId, Stats,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::clock::Clock;
use crate::env::{DiskBackend, LogOnly, NodeObserver, PeerTraffic, WallClock};
use crate::transport::{Outbox, TransportStats};
use crate::user_directory::{SharedDirectory, UserDirectory};

/// Client requests queued for the node before senders wait (backpressure for HTTP handlers).
const COMMAND_QUEUE: usize = 4_096;
/// Inputs taken from one channel per wakeup before the node's effects are drained: under load a
/// wakeup finds many produces (or disk completions) waiting, and handling them together costs one
/// drain pass instead of one each, while the bound keeps replies and disk submissions flowing.
const INPUTS_PER_WAKEUP: usize = 256;
/// Offloaded request work (`NodeHandle::offload`) running at once. One: the runtime thread
/// and the disk threads need the other core, and each pool thread that decodes large bodies
/// keeps its own allocator arena. Measured with `scripts/hostile-clients.sh` (2,000 slow-loris
/// connections and 24 clients flooding 16 MiB batches): the node's peak RSS 448 MiB with every
/// decode let run at once, 383–388 MiB one at a time, 298–316 MiB decoding inline.
pub const OFFLOADS_AT_ONCE: usize = 1;
/// Largest group-commit write the driver runs itself on a quiet node (see `Driver::wal_op`).
const INLINE_WRITE_BYTES: usize = 64 * 1024;

/// A request to the driver task.
enum Command {
    /// A client operation from `who`; the node's answer goes back on `reply`.
    Client { op: ClientOp, who: Principal, reply: oneshot::Sender<ClientReply> },
    /// A snapshot of the node's counters (served without a request id).
    Stats { reply: oneshot::Sender<Stats> },
}

/// How the driver's run ended: the caller, not the driver, decides what the process does.
#[derive(Debug)]
pub enum NodeExit {
    /// A shutdown was asked for and the node finished it; its final counters.
    Clean(Box<Stats>),
    /// The node cannot go on (what it read at start-up may not be durable, say): it must not
    /// serve anything more, and a restart recovers from what is really on disk.
    Fatal(String),
}

/// The driver task has stopped (shutdown finished, or it died): no answer will come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeGone {
    /// It had stopped before the request was handed over: nothing happened.
    Stopped,
    /// It stopped after the request was handed over, before answering: the request may have
    /// taken effect (a produce may be durable in the WAL and be committed after a restart).
    Unanswered,
}

/// Cheap, cloneable access to the node for HTTP handlers: one reference count, since every
/// request clones it (more than once: the router's state, the door, the caller).
#[derive(Clone)]
pub struct NodeHandle {
    parts: Arc<HandleParts>,
}

/// What a `NodeHandle` shares.
struct HandleParts {
    commands: mpsc::Sender<Command>,
    ready: Arc<AtomicBool>,
    /// Set once the node began shutting down (`/healthz` answers 503 from then on).
    stopping: Arc<AtomicBool>,
    peers: Arc<OnceLock<Outbox>>,
    /// The data directory, for the free-space gauge.
    data_dir: Option<Arc<std::path::Path>>,
    /// The node's wall clock, for the times the API shows.
    wall: Arc<dyn WallClock>,
    /// The users' credentials as the node's replica last showed them.
    users: SharedDirectory,
    /// Turns to run long CPU work of a request on tokio's blocking pool (`offload`,
    /// `OFFLOADS_AT_ONCE`): production's; `None` in the simulator, which starts no threads.
    offloads: Option<tokio::sync::Semaphore>,
    /// Payers the node refused for their produce quota, answered at once for a while.
    quota_gate: Arc<crate::quota_gate::QuotaGate>,
}

impl NodeHandle {
    /// Sends `op` from `who` to the node and waits for its reply.
    pub async fn request(&self, op: ClientOp, who: Principal) -> Result<ClientReply, NodeGone> {
        let (reply, answer) = oneshot::channel();
        let sent = self.parts.commands.send(Command::Client { op, who, reply }).await;
        sent.map_err(|_| NodeGone::Stopped)?;
        answer.await.map_err(|_| NodeGone::Unanswered)
    }

    /// This handle, knowing the node's data directory (`/metrics` reports its free space).
    pub fn with_data_dir(mut self, dir: &std::path::Path) -> NodeHandle {
        let parts = Arc::get_mut(&mut self.parts).expect("invariant: set before it is shared");
        parts.data_dir = Some(Arc::from(dir));
        self
    }

    /// This handle, running long CPU work of requests on tokio's blocking pool (`offload`).
    pub fn with_blocking_pool(mut self) -> NodeHandle {
        let parts = Arc::get_mut(&mut self.parts).expect("invariant: set before it is shared");
        parts.offloads = Some(tokio::sync::Semaphore::new(OFFLOADS_AT_ONCE));
        self
    }

    /// Runs `work` (CPU only: parsing a large body, say) on tokio's blocking pool if this
    /// handle may, so the runtime thread goes on serving other requests meanwhile; otherwise
    /// here, inline. At most `OFFLOADS_AT_ONCE` run at once; the rest wait their turn. `None`
    /// if the pool lost the task (it panicked).
    pub async fn offload<T, F>(&self, work: F) -> Option<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let Some(offloads) = &self.parts.offloads else { return Some(work()) };
        let _turn = offloads.acquire().await.ok()?;
        tokio::task::spawn_blocking(work).await.ok()
    }

    /// The users' credentials as the node's metastore replica last showed them.
    pub fn users(&self) -> Arc<UserDirectory> {
        self.parts.users.load()
    }

    /// The gate of the produce quota, in front of request bodies (`quota_gate.rs`).
    pub fn quota_gate(&self) -> &Arc<crate::quota_gate::QuotaGate> {
        &self.parts.quota_gate
    }

    /// Microseconds since the Unix epoch on the node's wall clock.
    pub fn unix_micros(&self) -> u64 {
        self.parts.wall.unix_micros()
    }

    /// The node's data directory, if this handle knows it.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.parts.data_dir.as_deref()
    }

    /// Milliseconds since the Unix epoch on the node's wall clock (for what the API shows).
    pub fn unix_millis(&self) -> u64 {
        self.parts.wall.unix_millis()
    }

    /// The node's counters and gauges.
    pub async fn stats(&self) -> Result<Stats, NodeGone> {
        let (reply, answer) = oneshot::channel();
        self.parts.commands.send(Command::Stats { reply }).await.map_err(|_| NodeGone::Stopped)?;
        answer.await.map_err(|_| NodeGone::Unanswered)
    }

    /// Node RPC counters, for a node with peers.
    pub fn transport_stats(&self) -> Option<TransportStats> {
        self.parts.peers.get().map(Outbox::stats)
    }

    /// True once the node has recovered and serves requests (`/readyz`).
    pub fn is_ready(&self) -> bool {
        self.parts.ready.load(Ordering::Relaxed)
    }

    /// True once the node began its graceful shutdown (`/healthz`).
    pub fn is_stopping(&self) -> bool {
        self.parts.stopping.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
impl NodeHandle {
    /// A handle with no node behind it (every request answers `NodeGone`), ready or not,
    /// stopping or not: for tests of what the HTTP layer answers on its own.
    pub fn detached(ready: bool, stopping: bool) -> NodeHandle {
        let (commands, _) = mpsc::channel(1);
        NodeHandle::with_commands(commands, ready, stopping)
    }

    /// A handle whose node takes every request and stops before answering it (a driver that
    /// died with requests in flight).
    pub fn dying() -> NodeHandle {
        let (commands, mut taken) = mpsc::channel::<Command>(1);
        tokio::spawn(async move {
            while let Some(command) = taken.recv().await {
                drop(command); // its reply sender goes unanswered
            }
        });
        NodeHandle::with_commands(commands, true, false)
    }

    fn with_commands(commands: mpsc::Sender<Command>, ready: bool, stopping: bool) -> NodeHandle {
        let parts = HandleParts {
            commands,
            ready: Arc::new(AtomicBool::new(ready)),
            stopping: Arc::new(AtomicBool::new(stopping)),
            peers: Arc::new(OnceLock::new()),
            data_dir: None,
            wall: Arc::new(crate::env::SystemClock),
            users: SharedDirectory::default(),
            offloads: None,
            quota_gate: Default::default(),
        };
        NodeHandle { parts: Arc::new(parts) }
    }
}

/// Owns the node and everything needed to drive it.
pub struct Driver {
    node: Node,
    clock: Clock,
    disk: Box<dyn DiskBackend>,
    /// Hears the node's events and its first serving (the log alone, in production).
    observer: Box<dyn NodeObserver>,
    /// The node served since the driver started (reported to the observer once).
    served: bool,
    disk_done: mpsc::UnboundedReceiver<Input>,
    commands: mpsc::Receiver<Command>,
    /// Each request's reply channel, and whether it is a produce (a graceful shutdown must
    /// answer every produce).
    waiters: BTreeMap<RequestId, (oneshot::Sender<ClientReply>, bool)>,
    /// Disk operations held until the replies of this pass are written.
    deferred: Vec<(IoToken, DiskOp)>,
    /// Completions of WAL operations the driver ran itself (see `wal_op`), not yet handed over.
    inline_done: Vec<Input>,
    /// Client requests taken in this pass, and whether it has answered one yet.
    pass_commands: usize,
    pass_replied: bool,
    next_request: u64,
    deadline: Option<Instant>,
    ready: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
    /// Node RPC (a cluster of one has none): messages out, and messages in from peers.
    peers_out: Option<Outbox>,
    peers_in: mpsc::Receiver<Input>,
    /// The outbox as HTTP handlers see it (for its counters).
    peers: Arc<OnceLock<Outbox>>,
    /// The users' credentials as HTTP handlers see them, and the replica's users epoch they
    /// were copied at.
    users: SharedDirectory,
    users_epoch: u64,
    /// The produce quota's gate the HTTP handlers consult (`quota_gate.rs`).
    quota_gate: Arc<crate::quota_gate::QuotaGate>,
}

impl Driver {
    /// Wraps a recovered node. `disk` must send its completions to `disk_done`.
    pub fn new(
        node: Node,
        clock: Clock,
        disk: Box<dyn DiskBackend>,
        disk_done: mpsc::UnboundedReceiver<Input>,
    ) -> (Driver, NodeHandle) {
        let (tx, commands) = mpsc::channel(COMMAND_QUEUE);
        let ready = Arc::new(AtomicBool::new(false));
        let stopping = Arc::new(AtomicBool::new(false));
        let (_, peers_in) = mpsc::channel(1); // closed until `with_peers`
        let peers = Arc::new(OnceLock::new());
        let users = SharedDirectory::default();
        users.replace(UserDirectory::of(node.users()));
        let users_epoch = node.users_epoch();
        let quota_gate = Arc::new(crate::quota_gate::QuotaGate::default());
        let parts = HandleParts {
            commands: tx,
            ready: Arc::clone(&ready),
            stopping: Arc::clone(&stopping),
            peers: Arc::clone(&peers),
            data_dir: None,
            wall: clock.wall(),
            users: users.clone(),
            offloads: None,
            quota_gate: Arc::clone(&quota_gate),
        };
        let handle = NodeHandle { parts: Arc::new(parts) };
        let driver = Driver {
            node,
            clock,
            disk,
            observer: Box::new(LogOnly),
            served: false,
            disk_done,
            commands,
            waiters: BTreeMap::new(),
            deferred: Vec::new(),
            inline_done: Vec::new(),
            pass_commands: 0,
            pass_replied: false,
            next_request: 0,
            deadline: None,
            ready,
            stopping,
            peers_out: None,
            peers_in,
            peers,
            users,
            users_epoch,
            quota_gate,
        };
        (driver, handle)
    }

    /// Reports the node's events and first serving to `observer` too.
    pub fn with_observer(mut self, observer: Box<dyn NodeObserver>) -> Driver {
        self.observer = observer;
        self
    }

    /// Connects the node to its peers: `Effect::Send`s go to `outbox`, and the transport's
    /// inputs (`Input::Peer`, `Input::PeerUnreachable`) arrive on `inbox`.
    pub fn with_peers(mut self, outbox: Outbox, inbox: mpsc::Receiver<Input>) -> Driver {
        let _ = self.peers.set(outbox.clone()); // set once: a driver gets one transport
        self.peers_out = Some(outbox);
        self.peers_in = inbox;
        self
    }

    /// Drives the node until `shutdown` turns true and the node reports it has shut down, or
    /// until the node reports a fatal error.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> NodeExit {
        self.after_input(); // Recovery may have queued repairs (torn-tail truncation).
        self.submit_deferred(); // and start-up syncs: nothing else may wake us before they end
        let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
        let mut shutting_down = false;
        let mut clients_open = true;
        let mut disk_open = true;
        let mut peers_open = true;
        let mut peer_inputs = Vec::with_capacity(INPUTS_PER_WAKEUP);
        let mut armed: Option<Instant> = None;
        let mut disk_inputs = Vec::with_capacity(INPUTS_PER_WAKEUP);
        let mut commands = Vec::with_capacity(INPUTS_PER_WAKEUP);
        loop {
            if let Some(exit) = self.fatal_exit() {
                return exit;
            }
            if shutting_down && self.node.is_shut_down() {
                break;
            }
            if self.deadline != armed {
                if let Some(deadline) = self.deadline {
                    timer.as_mut().reset(self.clock.tokio_deadline(deadline));
                }
                armed = self.deadline;
            }
            tokio::select! {
                biased;
                n = self.disk_done.recv_many(&mut disk_inputs, INPUTS_PER_WAKEUP), if disk_open => {
                    disk_open = n > 0; // 0: every disk thread is gone (cannot happen while we live).
                    self.on_disk_inputs(&mut disk_inputs);
                }
                // Held until the node serves: before, it would drop them (see `submit_deferred`).
                n = self.peers_in.recv_many(&mut peer_inputs, INPUTS_PER_WAKEUP),
                    if peers_open && self.node.is_serving() => {
                    peers_open = n > 0; // 0: no transport (a cluster of one)
                    let now = self.clock.now();
                    for input in peer_inputs.drain(..n) {
                        if let Some(traffic) = peer_traffic(&input) {
                            self.observer.peer(traffic);
                        }
                        self.node.handle_input(now, input);
                    }
                }
                n = self.commands.recv_many(&mut commands, INPUTS_PER_WAKEUP), if clients_open => {
                    clients_open = n > 0;
                    self.pass_commands = n;
                    for command in commands.drain(..n) {
                        self.on_command(command);
                    }
                }
                _ = shutdown.changed(), if !shutting_down => {
                    shutting_down = true;
                    self.stopping.store(true, Ordering::Relaxed);
                    tracing::info!(in_flight = self.waiters.len(), "node shutting down");
                    let now = self.clock.now();
                    self.node.handle_input(now, Input::BeginShutdown);
                }
                () = &mut timer, if armed.is_some() => {
                    let deadline = armed.take().expect("invariant: guarded by is_some");
                    let now = self.clock.now_at_least(deadline);
                    self.node.handle_timeout(now);
                }
            }
            self.after_input();
            self.pass_commands = 0;
            self.submit_after_replies().await;
        }
        NodeExit::Clean(Box::new(self.finish()))
    }

    /// The node reported a fatal error: what it read at start-up may not be durable, so it must
    /// not serve anything (a restart recovers from what is really on disk).
    fn fatal_exit(&self) -> Option<NodeExit> {
        let reason = self.node.fatal_error()?;
        tracing::error!(%reason, "fatal: the node stops");
        self.ready.store(false, Ordering::Relaxed);
        self.stopping.store(true, Ordering::Relaxed);
        Some(NodeExit::Fatal(reason.to_string()))
    }

    /// After a pass: the disk work other than the WAL's goes once the handlers just answered
    /// wrote their responses (the 202s are on the clients' critical path, partition commits are
    /// not).
    async fn submit_after_replies(&mut self) {
        if !self.deferred.is_empty() {
            tokio::task::yield_now().await;
            self.submit_deferred();
        }
    }

    /// Submits the disk work `after_input` deferred. Before the loop, that includes the
    /// start-up syncs: until they are done the node serves nothing, peer messages wait (a node
    /// that is not serving would drop them, and a dropped commit costs its sender the 30 s
    /// commit timeout), so no input may come to wake the loop and submit them later.
    fn submit_deferred(&mut self) {
        for (token, op) in self.deferred.drain(..) {
            self.disk.submit(token, op);
        }
    }

    /// Disk completions: the executor learns which WAL operations are answered, then the node.
    fn on_disk_inputs(&mut self, inputs: &mut Vec<Input>) {
        let now = self.clock.now();
        for input in inputs.drain(..) {
            if let Input::Disk { token, .. } = &input {
                self.disk.completed(*token);
            }
            self.node.handle_input(now, input);
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Client { op, who, reply } => {
                let request = RequestId(self.next_request);
                self.next_request += 1;
                self.waiters.insert(request, (reply, matches!(op, ClientOp::Produce { .. })));
                let now = self.clock.now();
                self.node.handle_input(now, Input::Client { request, op, who });
            }
            Command::Stats { reply } => {
                let _ = reply.send(self.node.stats()); // The asker may have gone: fine.
            }
        }
    }

    /// The drain rule: effects to `None`, then events, then the next deadline.
    fn after_input(&mut self) {
        self.pass_replied = false;
        loop {
            self.drain_effects();
            if self.inline_done.is_empty() {
                break;
            }
            // Ends: once these completions are in, the node answers, and a pass that answered
            // runs no more WAL operations itself.
            let now = self.clock.now();
            for input in std::mem::take(&mut self.inline_done) {
                self.node.handle_input(now, input);
            }
        }
        while let Some(event) = self.node.poll_event() {
            self.observer.event(&event);
            if let NodeEvent::QuotaSpent { payer, wait_us } = &event {
                let now_us = self.clock.wall().unix_micros();
                self.quota_gate.close(payer.clone(), now_us, *wait_us);
            }
            log_event(event);
        }
        if !self.served && self.node.is_serving() {
            self.served = true;
            self.observer.serving(&self.node);
        }
        self.deadline = self.node.poll_timeout();
        self.ready.store(self.node.is_ready(), Ordering::Relaxed);
        if self.node.users_epoch() != self.users_epoch {
            self.users_epoch = self.node.users_epoch();
            self.users.replace(UserDirectory::of(self.node.users()));
        }
    }

    /// A WAL operation: to the WAL thread, or run right here when the pass is a lone request on
    /// an otherwise quiet node (one client request taken, none waiting, nothing answered yet, a
    /// small write). The driver would only wait for the fsync anyway, and running it here saves
    /// the two thread handoffs (wake the WAL thread, wake us back) on a lone producer's round
    /// trip. Under load requests arrive in groups and the WAL thread keeps the group commit off
    /// this thread.
    ///
    /// Disk work the node emitted before the operation goes first: on a quiet node that is the
    /// partition work the core held for this group commit (flush pairing, docs/design.md
    /// §4.3), whose fsyncs must reach the device beside this one, not after it.
    fn wal_op(&mut self, token: IoToken, op: DiskOp) {
        let small = match &op {
            DiskOp::Write { data, .. } => data.len() <= INLINE_WRITE_BYTES,
            _ => true,
        };
        let quiet = self.pass_commands == 1 && !self.pass_replied && self.commands.is_empty();
        if !(quiet && small) {
            return self.disk.submit(token, op);
        }
        self.submit_deferred();
        match self.disk.run_wal_inline(token, op) {
            Ok(done) => self.inline_done.push(done),
            Err(op) => self.disk.submit(token, op),
        }
    }

    fn drain_effects(&mut self) {
        while let Some(effect) = self.node.poll_effect() {
            match effect {
                // The WAL's group commit goes at once (produces wait on it); other disk work
                // (partition commits, reads, the checkpoint) after the replies (see `run`).
                Effect::Disk { token, op } => match op.file() {
                    FileId::WalSegment { .. } => self.wal_op(token, op),
                    _ => self.deferred.push((token, op)),
                },
                Effect::Reply { request, reply } => {
                    self.pass_replied = true;
                    self.observer.replied(&reply);
                    match self.waiters.remove(&request) {
                        // A client that hung up no longer listens; its request still ran to the
                        // end.
                        Some((waiter, _)) => drop(waiter.send(reply)),
                        None => tracing::warn!(request = request.0, "reply to an unknown request"),
                    }
                }
                Effect::Send { to, bytes } => match &self.peers_out {
                    Some(outbox) => {
                        self.observer.peer(PeerTraffic::Sent { to, bytes: &bytes });
                        outbox.send(to, bytes);
                    }
                    // A cluster of one never sends.
                    None => tracing::warn!(to = to.0, "no transport to other nodes; dropped"),
                },
            }
        }
    }

    fn finish(mut self) -> Stats {
        let produces = self.waiters.values().filter(|(_, produce)| *produce).count();
        self.observer.shut_down(produces, self.waiters.len());
        if !self.waiters.is_empty() {
            // Reads and admin requests waiting on peers may go unanswered (their clients get a
            // 500: ambiguous); produces never should (their group commits finish first).
            tracing::warn!(
                unanswered = self.waiters.len(),
                produces,
                "node stopped with requests unanswered"
            );
        }
        self.ready.store(false, Ordering::Relaxed);
        self.node.stats()
    }
}

/// The transport's input as the observer hears it.
fn peer_traffic(input: &Input) -> Option<PeerTraffic<'_>> {
    match input {
        Input::Peer { from, bytes } => Some(PeerTraffic::Received { from: *from, bytes }),
        Input::PeerUnreachable { to } => Some(PeerTraffic::Unreachable { to: *to }),
        _ => None,
    }
}

fn log_event(event: NodeEvent) {
    match event {
        NodeEvent::Committed { key, first_offset, origins, .. } => {
            tracing::debug!(%key, first_offset, records = origins.len(), "records committed");
        }
        NodeEvent::CheckpointDurable { checkpoint } => {
            tracing::debug!(checkpoint, "wal checkpoint durable");
        }
        NodeEvent::Discarded { seq, topic } => {
            tracing::debug!(seq, topic = topic.0, "record of a deleted topic discarded");
        }
        NodeEvent::WalLatched => {
            tracing::warn!("ingress WAL failed and latched: produces answer 500 until restart");
        }
        NodeEvent::RecordsLost { seqs } => {
            tracing::error!(?seqs, "acknowledged WAL records damaged at rest were lost");
        }
        NodeEvent::RecordsAbandoned { seqs } => {
            tracing::debug!(
                records = seqs.len(),
                "records of an unacknowledged bulk produce dropped"
            );
        }
        NodeEvent::CommitFailed { key, reason } => {
            tracing::warn!(%key, reason, "partition commit failed and was rolled back");
        }
        NodeEvent::QuotaSpent { payer, wait_us } => {
            tracing::debug!(?payer, wait_us, "produce quota spent");
        }
        // The core logs topic and user changes and retention's deletions itself.
        NodeEvent::TopicApplied { .. }
        | NodeEvent::UserApplied { .. }
        | NodeEvent::UsersReplaced { .. }
        | NodeEvent::SegmentDeleted { .. }
        | NodeEvent::DeadLettered { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Offloaded work runs on the blocking pool, `OFFLOADS_AT_ONCE` at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn offloaded_work_runs_one_at_a_time() {
        let handle = NodeHandle::detached(true, false).with_blocking_pool();
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let works = (0..4).map(|_| {
            let (handle, running, most) = (handle.clone(), running.clone(), most.clone());
            tokio::spawn(async move {
                handle
                    .offload(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
            })
        });
        for work in works.collect::<Vec<_>>() {
            assert_eq!(work.await.expect("joined"), Some(()));
        }
        assert_eq!(most.load(Ordering::SeqCst), OFFLOADS_AT_ONCE);
    }
}
