//! The disk seam of a tier-2 node (`narad::env::DiskBackend`), backed by the harness's `SimDisk`:
//! each operation is scheduled on the simulated disk when the driver submits it and completed at
//! its simulated time by one task of the node's host, in (time, submission) order, so one file's
//! operations complete in order. The task dies with the host: what was in flight at a crash
//! never happened (the disk's page cache and power-loss model decide what survives). The checker
//! hears what every WAL write stages and every partition write lands, as in the first tier.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use narad_core::{DiskOp, FileId, Input, Instant, IoToken};
use tokio::sync::{Notify, mpsc};

use super::world::{Shared, lock, now};
use crate::observe;
use crate::trace::{DoneCode, OpKind, What};

/// Operations scheduled and not yet completed, by (completion time, submission number).
#[derive(Default)]
struct Pending {
    due: BTreeMap<(Instant, u64), (IoToken, DiskOp)>,
    next: u64,
}

/// The simulated disk of node `node`, incarnation `epoch`.
pub struct SimDiskBackend {
    node: u32,
    world: Shared,
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
    /// WAL operations submitted whose completion the driver has not been handed yet.
    wal_pending: BTreeSet<IoToken>,
    /// Records were staged in the WAL since its last fsync (the next one is a group commit's).
    staged_since_sync: bool,
}

impl SimDiskBackend {
    /// The backend, and the task that completes its operations (spawn it on the node's host);
    /// completions go to `done`.
    pub fn new(
        node: u32,
        world: Shared,
        done: mpsc::UnboundedSender<Input>,
    ) -> (SimDiskBackend, impl Future<Output = ()> + Send + 'static) {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let wake = Arc::new(Notify::new());
        let completer = complete_loop(node, world.clone(), pending.clone(), wake.clone(), done);
        let backend = SimDiskBackend {
            node,
            world,
            pending,
            wake,
            wal_pending: BTreeSet::new(),
            staged_since_sync: false,
        };
        (backend, completer)
    }
}

impl narad::env::DiskBackend for SimDiskBackend {
    fn submit(&mut self, token: IoToken, op: DiskOp) {
        if matches!(op.file(), FileId::WalSegment { .. }) {
            self.wal_pending.insert(token);
        }
        let at = {
            let mut world = lock(&self.world);
            let now = now();
            let checker = world.checker_at(now);
            if observe_wal_op(&mut self.staged_since_sync, checker, self.node, &op) {
                super::faults::stop_armed(&mut world, self.node);
            }
            let at = world.nodes[self.node as usize].disk.schedule(now, &op);
            let (kind, offset, len) = OpKind::of(&op);
            let what = What::DiskIssue {
                token: token.0,
                kind,
                file: op.file(),
                offset,
                len,
                at: at.0 - now.0,
            };
            world.record(self.node, what);
            at
        };
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let n = pending.next;
        pending.next += 1;
        pending.due.insert((at, n), (token, op));
        drop(pending);
        self.wake.notify_one();
    }

    fn completed(&mut self, token: IoToken) {
        self.wal_pending.remove(&token);
    }

    /// Runs at once (no simulated time passes: the driver's thread would block on it) when
    /// nothing of the WAL is pending, as the production executor does, unless a graceful
    /// restart waits for a group commit in flight.
    fn run_wal_inline(&mut self, token: IoToken, op: DiskOp) -> Result<Input, DiskOp> {
        if !matches!(op.file(), FileId::WalSegment { .. }) || !self.wal_pending.is_empty() {
            return Err(op);
        }
        let mut world = lock(&self.world);
        if world.nodes[self.node as usize].stop_at_wal_sync.is_some() {
            // A graceful restart waits for a group commit in flight: the WAL thread takes this
            // one, as it does whenever it is busy.
            return Err(op);
        }
        let now = now();
        observe_wal_op(&mut self.staged_since_sync, world.checker_at(now), self.node, &op);
        let result = complete_one(&mut world, self.node, token, &op);
        Ok(Input::Disk { token, result })
    }
}

/// Tells the checker what WAL write `op` stages; returns whether `op` is the fsync of a WAL
/// group commit (records were staged since the last one).
fn observe_wal_op(
    staged_since_sync: &mut bool,
    checker: &mut crate::checker::Checker,
    node: u32,
    op: &DiskOp,
) -> bool {
    *staged_since_sync |= observe::note_stagings(checker, node, op) > 0;
    matches!(op, DiskOp::Sync { file: FileId::WalSegment { .. } })
        && std::mem::take(staged_since_sync)
}

/// Completes each operation at its time, handing the completions to the driver.
async fn complete_loop(
    node: u32,
    world: Shared,
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
    done: mpsc::UnboundedSender<Input>,
) {
    loop {
        let next =
            pending.lock().unwrap_or_else(PoisonError::into_inner).due.keys().next().copied();
        let Some((at, _)) = next else {
            wake.notified().await;
            continue;
        };
        let now = now();
        if at > now {
            // Biased: an earlier operation submitted meanwhile is looked at first.
            tokio::select! {
                biased;
                () = wake.notified() => {}
                () = tokio::time::sleep(Duration::from_micros(at.0 - now.0)) => {}
            }
            continue;
        }
        let (key, (token, op)) = {
            let mut pending = pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.due.pop_first().expect("invariant: peeked above")
        };
        debug_assert!(key.0 <= now);
        let result = complete_one(&mut lock(&world), node, token, &op);
        if done.send(Input::Disk { token, result }).is_err() {
            return; // the driver is gone
        }
    }
}

/// Performs `op` on node `node`'s disk and tells the checker what it landed.
fn complete_one(
    world: &mut super::world::World2,
    node: u32,
    token: IoToken,
    op: &DiskOp,
) -> Result<narad_core::DiskDone, narad_core::DiskError> {
    let n = node as usize;
    let result = world.nodes[n].disk.complete(op);
    let (kind, _, _) = OpKind::of(op);
    let what =
        What::DiskDone { token: token.0, kind, file: op.file(), result: DoneCode::of(&result) };
    world.record(node, what);
    let now = now();
    let super::world::World2 { nodes, checker, .. } = world;
    checker.set_now(now);
    observe::collect_damage(checker, &mut nodes[n].disk);
    observe::note_partition_tail(checker, op);
    result
}
