//! Tests of pre-writing: an idle WAL writes zeros ahead of its active segment and the next
//! group commits overwrite them; recovery reads the zero tail as the clean end; a failed
//! pre-write write stops it for the segment, a failed pre-write sync latches the WAL and fails
//! the group commit queued behind it.

use std::collections::BTreeMap;

use super::tests::{Disk, draft, settle};
use super::*;

const CHUNK: u64 = 4_096;

fn prewriting() -> Wal<u32> {
    let recovered = recover(&BTreeMap::new(), None).expect("an empty disk recovers");
    let sizes = WalSizes {
        segment_bytes: 1 << 20,
        rotate_dispatched_bytes: 1 << 30,
        prewrite_chunk_bytes: CHUNK,
        ..WalSizes::default()
    };
    Wal::from_recovered(recovered).with_sizes(sizes)
}

/// A pre-writing WAL whose first group commit completed (the pre-write it starts is not yet
/// pumped), its disk, and the time.
fn after_one_group_commit() -> (Wal<u32>, Disk, Instant) {
    let mut wal = prewriting();
    let mut disk = Disk::default();
    let now = Instant(1_000);
    wal.stage(vec![draft(100)], 1).expect("not latched");
    wal.pump(now, false);
    while let Some((io, op)) = wal.poll_io() {
        assert_eq!(io, WalIo::Batch);
        let done = disk.apply(&op);
        let _ = wal.on_batch_io(Ok(done));
    }
    (wal, disk, now)
}

fn segment_len(disk: &Disk) -> usize {
    disk.segments().values().next().map_or(0, Bytes::len)
}

#[test]
fn an_idle_wal_prewrites_ahead_and_group_commits_overwrite_it() {
    let mut wal = prewriting();
    let mut disk = Disk::default();
    let now = Instant(1_000);
    wal.stage(vec![draft(100)], 1).expect("not latched");
    settle(&mut wal, &mut disk, now);
    let written = wal.disk_usage().1;
    assert_eq!(segment_len(&disk) as u64, written + CHUNK, "one chunk of zeros past the end");
    assert_eq!(wal.counters().prewrite_syncs, 1);
    // Small group commits land inside the zeros: no new chunk until less than half is left.
    for waiter in 2..10 {
        wal.stage(vec![draft(100)], waiter).expect("not latched");
        settle(&mut wal, &mut disk, now);
    }
    let written = wal.disk_usage().1;
    let len = segment_len(&disk) as u64;
    assert!(len >= written + CHUNK / 2 && len <= written + 2 * CHUNK, "{len} for {written}");
    // Recovery sees every record, and the zeros as the clean end.
    let recovered = recover(&disk.segments(), None).expect("a zero tail is a clean end");
    assert_eq!(recovered.next_seq, 9);
    assert_eq!(recovered.truncate_tail, None);
}

#[test]
fn a_failed_prewrite_write_stops_prewriting_for_the_segment_only() {
    let (mut wal, mut disk, now) = after_one_group_commit();
    wal.pump(now, false);
    let (io, write) = wal.poll_io().expect("a pre-write write");
    assert!(io == WalIo::Prewrite && matches!(write, DiskOp::Write { .. }));
    let failed = wal.on_prewrite_io(Err(DiskError::NoSpace));
    assert!(matches!(failed, PrewriteDone::Stopped(DiskError::NoSpace)));
    let (io, _sync) = wal.poll_io().expect("its sync");
    assert!(matches!(wal.on_prewrite_io(Ok(DiskDone::Done)), PrewriteDone::Quiet));
    assert_eq!(io, WalIo::Prewrite);
    for waiter in 2..5 {
        wal.stage(vec![draft(100)], waiter).expect("a failed pre-write latches nothing");
        settle(&mut wal, &mut disk, now);
    }
    assert_eq!(wal.counters().prewrite_syncs, 1, "not tried again for this segment");
    assert_eq!(wal.durable_seq(), 4);
}

#[test]
fn a_failed_prewrite_sync_latches_and_fails_the_group_commit_behind_it() {
    let (mut wal, _disk, now) = after_one_group_commit();
    wal.pump(now, false);
    let prewrite: Vec<(WalIo, DiskOp)> = std::iter::from_fn(|| wal.poll_io()).collect();
    assert_eq!(prewrite.len(), 2);
    // A produce arrives while the pre-write runs: its group commit queues behind it.
    wal.stage(vec![draft(100)], 2).expect("not latched yet");
    wal.pump(now, false);
    let batch: Vec<(WalIo, DiskOp)> = std::iter::from_fn(|| wal.poll_io()).collect();
    assert!(batch.iter().all(|(io, _)| *io == WalIo::Batch));
    assert!(matches!(wal.on_prewrite_io(Ok(DiskDone::Done)), PrewriteDone::Quiet));
    let error = DiskError::Io("fsync failed".into());
    assert!(matches!(wal.on_prewrite_io(Err(error)), PrewriteDone::Latched(_)));
    let mut outcome = None;
    for _ in &batch {
        outcome = wal.on_batch_io(Ok(DiskDone::Done)).or(outcome);
    }
    let outcome = outcome.expect("the group commit completed");
    assert_eq!((outcome.acked, outcome.failed), (vec![], vec![2]), "not acked after it");
    assert!(wal.latched().is_some());
    assert!(wal.stage(vec![draft(1)], 3).is_err());
}
