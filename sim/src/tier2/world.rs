//! What a tier-2 run shares between its turmoil hosts and the harness loop: the simulated disks
//! (owned here, so they outlive every crash of a node), the checker, the workload, the trace and
//! each node's fault knobs. Everything runs on one thread (turmoil steps hosts one at a time),
//! so the mutex is never contended; it exists because the runtime's tasks must be `Send`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use narad_core::Instant;
use narad_sim_runtime::{FaultClass, FaultHits, SimDisk};
use tokio::sync::mpsc;

use super::access::Basic;
use super::net::DatagramState;
use super::peer_ledger::PeerLedger;
use crate::checker::Checker;
use crate::clock::{START, since_start};
use crate::outcome::ClusterTotals;
use crate::trace::{Trace, TraceRecord, What};
use crate::workload::Workload;

/// One node's slot: its disk and what the harness controls of its process.
pub struct NodeSlot {
    pub disk: SimDisk,
    /// Incarnation counter: bumped whenever the process starts (a crash ends an incarnation).
    pub epoch: u32,
    /// The process serves (became serving since its last start and has not crashed).
    pub serving: bool,
    /// The process is running (started and not crashed).
    pub up: bool,
    /// Per-datagram faults of its UDP socket.
    pub datagrams: Arc<Mutex<DatagramState>>,
    /// Its wall clock's offset from simulated time, in microseconds.
    pub skew: Arc<AtomicI64>,
    /// Asks the running process to stop gracefully (and start again).
    pub stop: Option<mpsc::UnboundedSender<()>>,
    /// A graceful restart waits for the next WAL fsync the driver submits (so the shutdown
    /// meets a group commit in flight), or for this deadline.
    pub stop_at_wal_sync: Option<Instant>,
    /// The process exited; the harness has not yet dropped its host.
    pub exited: Option<Exit>,
    /// Its last start-up refused the disk (damage that cannot be repaired without losing
    /// acknowledged records).
    pub refused: bool,
    /// When the harness starts the exited process again.
    pub restart_at: Option<Instant>,
}

/// How a process exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A graceful stop (it is started again at once).
    Graceful,
    /// By itself: a failed start-up read, a fatal error.
    Early,
}

/// Everything but the hosts.
pub struct World2 {
    pub nodes: Vec<NodeSlot>,
    pub checker: Checker,
    pub workload: Workload,
    pub trace: Trace,
    /// Process and network fault hits (disk hits live in each `SimDisk`).
    pub hits: FaultHits,
    pub totals: ClusterTotals,
    /// Trace records so far (each record's `e`), and the time of the last one.
    records: u64,
    last_t: u64,
    /// Datagrams are lost, duplicated or reordered until the heal: QUIC turns a lost datagram
    /// into a retransmission, a delay without bound (a disturbance to the checker).
    pub datagram_faults: bool,
    /// Where the run is (the client host and the harness loop hand over through it).
    pub phase: Phase,
    /// Nodes crashed and not started again, a bit each (the checker counts each as something
    /// that may lose messages between nodes).
    pub down_for_loss: u32,
    /// Nodes still down after the heal (their recovery refused a damaged disk), a bit each.
    pub lost_nodes: u32,
    /// The verdict, once the client host's final read is done.
    pub verdict: Option<crate::checker::Verdict>,
    /// What the drivers sent to each other and were fed (the transport's contract).
    pub peers: PeerLedger,
    /// The bootstrap admin's credentials, when access control is on (seeds that run the
    /// access client).
    pub admin: Option<Basic>,
}

/// The phases of a tier-2 run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Workload and faults.
    Active,
    /// The workload finished: the harness heals every fault and restarts what is down.
    HealAsked,
    /// Healed: the client host drains, reads everything back and judges.
    Healed,
}

/// The shared world.
pub type Shared = Arc<Mutex<World2>>;

/// Locks the world (a panic elsewhere already failed the run; the state is still readable).
pub fn lock(world: &Shared) -> MutexGuard<'_, World2> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Simulated time now, on the core's clock: the simulation's start plus what turmoil says has
/// elapsed (inside a host, to the microsecond; outside, at the last step).
pub fn now() -> Instant {
    let elapsed = turmoil::sim_elapsed().unwrap_or_default();
    Instant(START.0 + u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
}

impl World2 {
    pub fn new(nodes: Vec<NodeSlot>, checker: Checker, workload: Workload, trace: Trace) -> Self {
        World2 {
            nodes,
            checker,
            workload,
            trace,
            hits: FaultHits::default(),
            totals: ClusterTotals::default(),
            records: 0,
            last_t: 0,
            datagram_faults: false,
            phase: Phase::Active,
            down_for_loss: 0,
            lost_nodes: 0,
            verdict: None,
            peers: PeerLedger::default(),
            admin: None,
        }
    }

    /// Appends a trace line for `node` at simulated time `at`.
    pub fn record_at(&mut self, at: Instant, node: u32, what: What) {
        self.records += 1;
        let t = since_start(at);
        self.last_t = self.last_t.max(t);
        let record = TraceRecord { t, e: self.records, node, what };
        self.trace.push(record);
    }

    /// Appends a trace line for `node` now (inside a host).
    pub fn record(&mut self, node: u32, what: What) {
        self.record_at(now(), node, what);
    }

    /// Trace records so far.
    pub fn trace_records(&self) -> u64 {
        self.records
    }

    /// Simulated milliseconds at the last trace record.
    pub fn last_record_ms(&self) -> u64 {
        self.last_t / 1_000
    }

    /// Counts a process-level fault hit.
    pub fn hit(&mut self, class: FaultClass) {
        self.hits.hit(class);
    }

    /// The checker, told the time first (violations are stamped with it).
    pub fn checker_at(&mut self, at: Instant) -> &mut Checker {
        self.checker.set_now(at);
        &mut self.checker
    }
}

/// Simulated time `elapsed` after the start (the harness's view, between steps).
pub fn instant_at(elapsed: std::time::Duration) -> Instant {
    Instant(START.0 + u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
}

/// A node's wall clock: simulated time plus its skew (the seam `narad::env::WallClock`).
pub struct SimWall {
    pub skew: Arc<AtomicI64>,
}

impl narad::env::WallClock for SimWall {
    fn unix_micros(&self) -> u64 {
        let skew = self.skew.load(Ordering::Relaxed);
        now().0.saturating_add_signed(skew)
    }
}

/// Random bytes from the seed (the seam `narad::env::Entropy`).
pub struct SimEntropy {
    pub rng: Mutex<rand_chacha::ChaCha8Rng>,
}

impl narad::env::Entropy for SimEntropy {
    fn fill(&self, out: &mut [u8]) {
        use rand::Rng;
        self.rng.lock().unwrap_or_else(PoisonError::into_inner).fill_bytes(out);
    }
}
